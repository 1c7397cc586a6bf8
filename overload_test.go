package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/service"
)

// overloadTokens is how long each stream of TestOverloadSheds is: long
// enough that the admitted streams still run when the last request of the
// burst arrives.
const overloadTokens = 1000

// TestOverloadSheds sends 64 concurrent long streams over loopback HTTP to
// rill started with --max-seqs 4 --max-queued-requests 4: the engine takes
// what it can run and queue, the rest is shed at once with a 503 in
// OpenAI's error shape, code engine_overloaded, and a Retry-After header;
// every admitted stream runs to its end with its usage. Nothing else
// happens. A WebSocket request arriving meanwhile is refused the same way,
// with an error message of status 503 for its request_id.
func TestOverloadSheds(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, "--max-seqs", "4", "--max-queued-requests", "4")
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}

	// The WebSocket is open before the burst, so that its requests reach
	// the engine while the burst's streams still fill it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)

	const streams = 64
	outcomes := make([]string, streams)
	shed := make(chan struct{}, streams)
	start, burstDone := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			<-start
			outcomes[i] = overloadStream(client, ts.URL, i, shed)
		})
	}
	close(start)
	go func() { wg.Wait(); close(burstDone) }()

	// While the admitted streams run, a WebSocket request is shed as well.
	select {
	case <-shed:
	case <-time.After(30 * time.Second):
		t.Fatal("no request was shed")
	}
	wsOutcome := overloadWS(ctx, ws, burstDone)
	<-burstDone

	admitted, refused := 0, 0
	for i, o := range outcomes {
		switch o {
		case "done":
			admitted++
		case "503":
			refused++
		default:
			t.Errorf("stream %d: %s", i, o)
		}
	}
	t.Logf("%d streams: %d admitted and completed, %d shed with 503", streams, admitted, refused)
	if refused == 0 || admitted < 8 {
		t.Errorf("%d admitted, %d shed: want the 4 running and 4 queued admitted, the rest shed", admitted, refused)
	}
	if wsOutcome != "" {
		t.Errorf("WebSocket request while full: %s", wsOutcome)
	}
}

// overloadStream posts one streamed completion and says how it went:
// "done" (complete, with its usage), "503" (shed as OpenAI would), or what
// was wrong.
func overloadStream(client *http.Client, url string, i int, shed chan<- struct{}) string {
	body := fmt.Sprintf(`{"model":"rill-tiny","prompt":"The fox %d","max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, i, overloadTokens)
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		if resp.Header.Get("Retry-After") == "" {
			return "503 without Retry-After"
		}
		data, _ := io.ReadAll(resp.Body)
		if why := checkOverloaded(data); why != "" {
			return "503 body " + why
		}
		shed <- struct{}{}
		return "503"
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("status %d: %s", resp.StatusCode, data)
	}
	completion := -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			if completion != overloadTokens {
				return fmt.Sprintf("done with usage completion_tokens %d", completion)
			}
			return "done"
		}
		var chunk struct {
			Error *json.RawMessage `json:"error"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return fmt.Sprintf("chunk %q: %v", data, err)
		}
		if chunk.Error != nil {
			return "error mid-stream: " + string(*chunk.Error)
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	return "stream ended without [DONE]"
}

// checkOverloaded checks an error object in OpenAI's shape with code
// engine_overloaded and returns what is wrong with it ("" if nothing).
func checkOverloaded(data []byte) string {
	var body struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return fmt.Sprintf("%q: %v", data, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := body.Error[k]; !ok {
			return fmt.Sprintf("%s lacks %q", data, k)
		}
	}
	if string(body.Error["code"]) != `"engine_overloaded"` || string(body.Error["type"]) != `"server_error"` {
		return string(data)
	}
	return ""
}

// overloadWS creates requests over the WebSocket c, one at a time, until
// one is refused with a 503 in OpenAI's shape ("" is returned) or the
// burst is over (what happened to the last one is returned). The engine
// is full only until the first admitted stream ends, and a loaded machine
// may deliver a request after that, so a try that is not refused within
// a moment is cancelled, and the next one follows once it has ended. (A
// cancel sent with the create can overtake it and cancel it before the
// engine decides.)
func overloadWS(ctx context.Context, c *websocket.Conn, burstDone <-chan struct{}) string {
	type message struct {
		Type      string          `json:"type"`
		RequestID string          `json:"request_id"`
		Status    int             `json:"status"`
		Error     json.RawMessage `json:"error"`
		raw       []byte
	}
	// The reader ends when the connection fails or the test closes it.
	msgs := make(chan message)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			m := message{raw: data}
			if err := json.Unmarshal(data, &m); err != nil {
				readErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	send := func(typ, id, body string) error {
		m := fmt.Sprintf(`{"type":%q,"request_id":%q%s}`, typ, id, body)
		return c.Write(ctx, websocket.MessageText, []byte(m))
	}
	outcome := "no request sent"
	for try := 0; ; try++ {
		select {
		case <-burstDone:
			return outcome
		default:
		}
		id := fmt.Sprintf("ws%d", try)
		body := fmt.Sprintf(`,"body":{"model":"rill-tiny","prompt":"The websocket fox","max_tokens":%d,"ignore_eos":true}`, overloadTokens)
		if err := send("create", id, body); err != nil {
			return err.Error()
		}
		patience := time.NewTimer(50 * time.Millisecond)
	reply:
		for {
			select {
			case <-patience.C:
				if err := send("cancel", id, ""); err != nil {
					return err.Error()
				}
			case err := <-readErr:
				return err.Error()
			case m := <-msgs:
				if m.RequestID != id || (m.Type != "done" && m.Type != "error") {
					continue
				}
				if m.Type == "error" && m.Status == http.StatusServiceUnavailable {
					if why := checkOverloaded(append(append([]byte(`{"error":`), m.Error...), '}')); why != "" {
						return why
					}
					return ""
				}
				outcome = "admitted (the engine had room): " + string(m.raw)
				break reply
			}
		}
		patience.Stop()
	}
}
