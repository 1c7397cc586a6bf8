package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
)

// Stream POSTs body with "stream": true to path and reads the Server-Sent
// Events to the end. A non-200 answer is not an error: its body lands in
// Transcript.Error. The error result is for transport failures only.
func (t *Target) Stream(ctx context.Context, path string, body map[string]any) (*Transcript, error) {
	b := maps.Clone(body)
	b["stream"] = true
	data, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode body for %s: %w", path, err)
	}
	resp, err := t.Do(ctx, http.MethodPost, path, data, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tr := &Transcript{Transport: "SSE", Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("read error body of %s: %w", path, err)
		}
		tr.Error = data
		return tr, nil
	}
	if mt, _, _ := strings.Cut(tr.ContentType, ";"); strings.TrimSpace(mt) != "text/event-stream" {
		tr.Problems = append(tr.Problems, fmt.Sprintf("the stream's Content-Type is %q, not text/event-stream", tr.ContentType))
	}
	if err := ReadSSE(resp.Body, tr); err != nil {
		return nil, fmt.Errorf("read stream of %s: %w", path, err)
	}
	return tr, nil
}

// ReadSSE reads an event stream from r into tr until EOF, following the
// WHATWG framing: "data:" lines (an optional space after the colon) joined
// by newlines make one event, a blank line ends it, lines starting with ":"
// are comments. Each event must be a chunk object, an error object
// ({"error": ...}) or [DONE]; anything else, and anything after [DONE], is
// recorded in tr.Problems. The error result is for read failures only.
func ReadSSE(r io.Reader, tr *Transcript) error {
	events := 0
	event := func(_ string, ev []byte) {
		events++
		switch {
		case tr.Done:
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d arrives after data: [DONE]: %s", events, clip(ev)))
		case string(ev) == "[DONE]":
			tr.Done = true
		case tr.Error != nil:
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d arrives after the error event: %s", events, clip(ev)))
		default:
			var top map[string]json.RawMessage
			if err := json.Unmarshal(ev, &top); err != nil {
				tr.Problems = append(tr.Problems, fmt.Sprintf("event %d is not JSON: %s", events, clip(ev)))
				return
			}
			if _, ok := top["error"]; ok {
				tr.Error = bytes.Clone(ev)
				return
			}
			tr.Chunks = append(tr.Chunks, bytes.Clone(ev))
		}
	}
	ping := func() { tr.Pings++ }
	problem := func(p string) { tr.Problems = append(tr.Problems, p) }
	return readSSEEvents(r, event, ping, problem)
}

// readSSEEvents reads an SSE stream and calls event at the blank line that
// ends each event with data: its name (the event field, "" without one)
// and its data lines joined by newlines, a slice reused once event
// returns. ping is called for each comment line; problem for a line that
// is no SSE field and for a stream that ends inside an event, which is
// then dispatched. The id and retry fields are valid and ignored.
func readSSEEvents(r io.Reader, event func(name string, data []byte), ping func(), problem func(string)) error {
	br := bufio.NewReader(r)
	var name string
	var data []byte
	haveData := false
	dispatch := func() {
		if haveData {
			event(name, bytes.TrimSuffix(data, []byte("\n")))
		}
		data, haveData, name = data[:0], false, ""
	}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch {
			case len(line) == 0:
				dispatch()
			case len(field) == 0:
				ping()
			case string(field) == "data":
				data = append(append(data, value...), '\n')
				haveData = true
			case string(field) == "event":
				name = string(value)
			case string(field) == "id", string(field) == "retry":
			default:
				problem(fmt.Sprintf("line %q is not an SSE field", clip(line)))
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if haveData {
		problem("the stream ends inside an event (no blank line after its last data line)")
		dispatch()
	}
	return nil
}
