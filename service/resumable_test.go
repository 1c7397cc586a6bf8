package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"rill/engine"
	"rill/store"
)

// idEvent is one SSE event with its id line.
type idEvent struct {
	id   int64 // -1: none
	data string
}

// readIDEvents reads SSE events from body, at most max of them (max <= 0:
// all); comments are skipped. It reads a byte at a time and nothing past
// its last event, so that a later call on the same body goes on from
// there (a buffered scanner's read-ahead would be lost with it).
func readIDEvents(t *testing.T, body io.Reader, max int) []idEvent {
	t.Helper()
	var out []idEvent
	cur := idEvent{id: -1}
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(body, b[:]); err != nil {
			return out
		}
		if b[0] != '\n' {
			line = append(line, b[0])
			continue
		}
		text := strings.TrimSuffix(string(line), "\r")
		line = line[:0]
		switch {
		case text == "":
			if cur.data != "" {
				out = append(out, cur)
				if max > 0 && len(out) == max {
					return out
				}
			}
			cur = idEvent{id: -1}
		case strings.HasPrefix(text, "id: "):
			n, err := strconv.ParseInt(text[4:], 10, 64)
			if err != nil {
				t.Fatalf("bad id line %q", text)
			}
			cur.id = n
		case strings.HasPrefix(text, "data: "):
			cur.data = text[6:]
		case strings.HasPrefix(text, ":"), strings.HasPrefix(text, "event: "):
		default:
			t.Fatalf("unexpected SSE line %q", text)
		}
	}
}

// streamText is the text of chunks (chat deltas or completion text), the
// usage of the last chunk that has one, and whether [DONE] ended them.
func streamText(t *testing.T, evs []idEvent) (text, usage string, done bool) {
	t.Helper()
	for _, ev := range evs {
		if ev.data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev.data, err)
		}
		for _, ch := range c.Choices {
			text += ch.Text + ch.Delta.Content
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			usage = string(c.Usage)
		}
	}
	return text, usage, done
}

func postStream(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return resp
}

// TestResumableStream: a resumable stream whose client drops after k
// events, on chat and on completions, resumed with Last-Event-ID (or
// last_event_id), on the same server or on another that shares the store,
// gives exactly the text and usage of an uninterrupted stream, its events
// numbered without gap or duplicate.
func TestResumableStream(t *testing.T) {
	t.Parallel()
	const n = 16
	chat := `{"model":"tiny","messages":[{"role":"user","content":"count"}],"stream":true,"stream_options":{"include_usage":true%s}}`
	completion := `{"model":"tiny","prompt":"count","stream":true,"stream_options":{"include_usage":true%s}}`
	tests := []struct {
		name, path, body string
		k                int
		query            bool // last_event_id in the query, not the header
		other            bool // resume on another server sharing the store
	}{
		{name: "chat", path: "/v1/chat/completions", body: chat, k: 5},
		{name: "chat at once", path: "/v1/chat/completions", body: chat, k: 1},
		{name: "completions, query", path: "/v1/completions", body: completion, k: 7, query: true},
		{name: "chat, another server", path: "/v1/chat/completions", body: chat, k: 4, other: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := store.NewMemory(store.Retention{})
			fake := &fakeEngine{respond: slowPieces(n, 10*time.Millisecond, nil)}
			ts := newTestServer(t, fake, Options{Store: st})
			resumeAt := ts
			if tt.other {
				resumeAt = newTestServer(t, &fakeEngine{respond: slowPieces(0, 0, nil)}, Options{Store: st})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			plain := postStream(t, ctx, ts.URL+tt.path, strings.Replace(tt.body, "%s", "", 1))
			wantText, wantUsage, _ := streamText(t, readIDEvents(t, plain.Body, 0))
			plain.Body.Close()

			dctx, drop := context.WithCancel(ctx)
			first := postStream(t, dctx, ts.URL+tt.path, strings.Replace(tt.body, "%s", `,"resumable":true`, 1))
			head := readIDEvents(t, first.Body, tt.k)
			drop()
			first.Body.Close()
			if len(head) != tt.k {
				t.Fatalf("%d events before the drop", len(head))
			}
			var id string
			for i, ev := range head {
				if ev.id != int64(i) {
					t.Fatalf("event %d has id %d", i, ev.id)
				}
				var c struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal([]byte(ev.data), &c)
				id = c.ID
			}
			last := strconv.FormatInt(head[len(head)-1].id, 10)
			url := resumeAt.URL + tt.path + "/" + id
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if tt.query {
				req.URL.RawQuery = "last_event_id=" + last
			} else {
				req.Header.Set("Last-Event-ID", last)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("resume: %d %s", resp.StatusCode, b)
			}
			tail := readIDEvents(t, resp.Body, 0)
			for i, ev := range tail[:len(tail)-1] { // [DONE] has no id
				if ev.id != int64(tt.k+i) {
					t.Fatalf("resumed event %d has id %d, want %d", i, ev.id, tt.k+i)
				}
			}
			text, usage, done := streamText(t, append(head, tail...))
			if !done || text != wantText || usage != wantUsage || text != piecesText(n) {
				t.Errorf("resumed: done %v text %q usage %s; uninterrupted: text %q usage %s", done, text, usage, wantText, wantUsage)
			}
		})
	}
}

// TestResumableGrace: a resumable stream that nobody follows runs on for
// the grace period, then stops (its engine stream is cancelled); a client
// that comes back after that hears that it was abandoned; one that stays
// keeps it running past the grace period.
func TestResumableGrace(t *testing.T) {
	t.Parallel()
	const grace = 150 * time.Millisecond
	cancelled := make(chan struct{})
	fake := &fakeEngine{respond: slowPieces(10000, 10*time.Millisecond, cancelled)}
	ts := newTestServer(t, fake, Options{ResumeGrace: grace})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`

	dctx, drop := context.WithCancel(ctx)
	resp := postStream(t, dctx, ts.URL+"/v1/chat/completions", body)
	head := readIDEvents(t, resp.Body, 2*int(grace/(10*time.Millisecond))) // followed for longer than the grace
	drop()
	resp.Body.Close()
	dropped := time.Now()
	select {
	case <-cancelled:
		if since := time.Since(dropped); since < grace/2 {
			t.Errorf("stopped %v after the drop, before the grace period", since)
		}
	case <-time.After(grace + 5*time.Second):
		t.Fatal("not stopped after the grace period")
	}
	var c struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(head[0].data), &c)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/chat/completions/"+c.ID, nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(head[len(head)-1].id, 10))
	back, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Body.Close()
	tail := readIDEvents(t, back.Body, 0)
	if len(tail) == 0 || !strings.Contains(tail[len(tail)-1].data, "stream_abandoned") {
		t.Errorf("a late reconnect ends with %v", tail)
	}
}

// TestResumableRefused: resumable without a store is a 400 naming it;
// reconnecting to an unknown stream, or to a chat stream on the
// completions path, is a 404; a bad Last-Event-ID is a 400.
func TestResumableRefused(t *testing.T) {
	t.Parallel()
	off := newTestServer(t, &fakeEngine{respond: slowPieces(2, 0, nil)}, Options{ResponsesStore: -1})
	resp, body := post(t, http.DefaultClient, off.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "stream_options.resumable") {
		t.Errorf("resumable without a store: %d %s", resp.StatusCode, body)
	}
	on := newTestServer(t, &fakeEngine{respond: slowPieces(2, 0, nil)}, Options{})
	ctx := context.Background()
	r := postStream(t, ctx, on.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`)
	evs := readIDEvents(t, r.Body, 0)
	r.Body.Close()
	var c struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(evs[0].data), &c)
	tests := []struct {
		path, lastID string
		status       int
	}{
		{"/v1/chat/completions/chatcmpl-nope", "", http.StatusNotFound},
		{"/v1/completions/" + c.ID, "", http.StatusNotFound},
		{"/v1/chat/completions/" + c.ID, "x", http.StatusBadRequest},
		{"/v1/chat/completions/" + c.ID, "1", http.StatusOK},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, on.URL+tt.path, nil)
		if tt.lastID != "" {
			req.Header.Set("Last-Event-ID", tt.lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s (Last-Event-ID %q): %d %s, want %d", tt.path, tt.lastID, resp.StatusCode, b, tt.status)
		}
	}
}

// TestResumableWebSocket: a resumable create over WebSocket whose
// connection drops after k chunks, resumed on a new connection with a
// resume message naming the stream and the last seq, gives the text and
// usage of an uninterrupted stream, its seqs without gap or duplicate; a
// resume of an unknown stream is a 404 error for that request.
func TestResumableWebSocket(t *testing.T) {
	t.Parallel()
	const n, k = 16, 5
	fake := &fakeEngine{respond: slowPieces(n, 10*time.Millisecond, nil)}
	ts := newTestServer(t, fake, Options{})
	body := `{"model":"tiny","messages":[{"role":"user","content":"count"}],"stream_options":{"include_usage":true,"resumable":true}}`
	type seqChunk struct {
		Seq   *int64 `json:"seq"`
		Chunk struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		} `json:"chunk"`
	}
	var text, usage, id string
	next := int64(0)
	take := func(m wsMsg) {
		t.Helper()
		var c seqChunk
		if err := json.Unmarshal(m.raw, &c); err != nil || c.Seq == nil {
			t.Fatalf("chunk without seq: %s", m.raw)
		}
		if *c.Seq != next {
			t.Fatalf("chunk seq %d, want %d", *c.Seq, next)
		}
		next++
		id = c.Chunk.ID
		for _, ch := range c.Chunk.Choices {
			text += ch.Delta.Content
		}
		if len(c.Chunk.Usage) > 0 && string(c.Chunk.Usage) != "null" {
			usage = string(c.Chunk.Usage)
		}
	}

	first := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, first, createMsg("r1", body))
	for range k {
		m := readWS(t, first)
		if m.Type != "chunk" {
			t.Fatalf("before the drop: %s", m.raw)
		}
		take(m)
	}
	_ = first.CloseNow()

	second := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, second, `{"type":"resume","request_id":"r2","stream_id":"`+id+`","last_seq":`+strconv.FormatInt(next-1, 10)+`}`)
	for {
		m := readWS(t, second)
		if m.id() != "r2" {
			t.Fatalf("message of another request: %s", m.raw)
		}
		if m.Type != "chunk" {
			if m.Type != "done" {
				t.Fatalf("resumed request ended with %s", m.raw)
			}
			break
		}
		take(m)
	}
	if text != piecesText(n) || !strings.Contains(usage, `"completion_tokens":16`) {
		t.Errorf("resumed over WebSocket: text %q usage %s", text, usage)
	}

	sendWS(t, second, `{"type":"resume","request_id":"r3","stream_id":"chatcmpl-nope"}`)
	if m := readWS(t, second); m.Type != "error" || m.id() != "r3" || m.Status != http.StatusNotFound {
		t.Errorf("resume of an unknown stream: %s", m.raw)
	}
}

// TestResumableShutdown: when the grace period of a shutdown runs out, a
// client following a resumable stream is told why its stream ends (503
// server_shutting_down), as on a stream that is not resumable.
func TestResumableShutdown(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{models: testModels, respond: slowPieces(1000, 10*time.Millisecond, nil)}
	api := New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)})
	base, cut := context.WithCancelCause(context.Background())
	ts := httptest.NewUnstartedServer(api)
	ts.Config.BaseContext = func(net.Listener) context.Context { return base }
	ts.Start()
	defer ts.Close()
	resp := postStream(t, context.Background(), ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`)
	defer resp.Body.Close()
	readIDEvents(t, resp.Body, 2)
	cut(ErrShutdown)
	rest := readIDEvents(t, resp.Body, 0)
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1].data, "server_shutting_down") {
		t.Errorf("the stream ends with %v", rest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := api.WaitConnections(ctx); err != nil {
		t.Error(err)
	}
}

// TestBackgroundStreamShutdown: a client streaming a background response
// when the grace period of a shutdown runs out gets an error event that
// says so, and the response ends failed with server_shutting_down.
func TestBackgroundStreamShutdown(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{models: testModels, respond: slowPieces(1000, 10*time.Millisecond, nil)}
	api := New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)})
	base, cut := context.WithCancelCause(context.Background())
	ts := httptest.NewUnstartedServer(api)
	ts.Config.BaseContext = func(net.Listener) context.Context { return base }
	ts.Start()
	defer ts.Close()
	resp := postStream(t, context.Background(), ts.URL+"/v1/responses",
		`{"model":"tiny","input":"x","stream":true,"background":true}`)
	defer resp.Body.Close()
	head := readIDEvents(t, resp.Body, 2)
	cut(ErrShutdown)
	rest := readIDEvents(t, resp.Body, 0)
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1].data, `"type":"error","code":"server_shutting_down"`) {
		t.Errorf("the stream ends with %v", rest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := api.WaitConnections(ctx); err != nil {
		t.Fatal(err)
	}
	var created struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	_ = json.Unmarshal([]byte(head[0].data), &created)
	client := backgroundClient(ts.URL)
	r, err := client.Responses.Get(ctx, created.Response.ID, responses.ResponseGetParams{})
	if err != nil || r.Status != responses.ResponseStatusFailed || r.Error.Code != "server_shutting_down" {
		t.Errorf("after the shutdown: %v %v", r, err)
	}
}

// TestResumableWebSocketParked: the request that created a resumable
// stream over a WebSocket, its wait for the log parked (past
// wsWaitInline), ends when the client cancels it (request_cancelled) while
// the stream runs on, and when its connection ends; another request's
// resume of the live stream, parked too, ends likewise.
func TestResumableWebSocketParked(t *testing.T) {
	t.Parallel()
	e, queues, ended := queueEngine()
	api := New(testOptions(e, Options{}))
	ts := httptest.NewServer(api)
	defer ts.Close()
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream_options":{"resumable":true}}`
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("r1", body))
	q := <-queues
	m := readWS(t, c)
	var opening struct {
		Chunk struct {
			ID string `json:"id"`
		} `json:"chunk"`
	}
	if err := json.Unmarshal(m.raw, &opening); err != nil || m.Type != "chunk" {
		t.Fatalf("opening: %s", m.raw)
	}
	time.Sleep(3 * wsWaitInline) // parked
	sendWS(t, c, `{"type":"cancel","request_id":"r1"}`)
	if m := readWS(t, c); m.Type != "error" || m.id() != "r1" || !strings.Contains(string(m.raw), "request_cancelled") {
		t.Fatalf("after the cancel: %s", m.raw)
	}
	// A follower left; the stream runs on for the grace period.
	if ended.Load() != 0 {
		t.Fatal("the cancel of the stream's creator stopped its generation")
	}
	sendWS(t, c, `{"type":"resume","request_id":"r2","stream_id":"`+opening.Chunk.ID+`","last_seq":0}`)
	time.Sleep(3 * wsWaitInline) // parked
	q.Push(engine.Event{Text: "a"})
	if m := readWS(t, c); m.Type != "chunk" || m.id() != "r2" || !strings.Contains(string(m.raw), `"content":"a"`) {
		t.Fatalf("resumed: %s", m.raw)
	}
	time.Sleep(3 * wsWaitInline)
	sendWS(t, c, `{"type":"cancel","request_id":"r2"}`)
	if m := readWS(t, c); m.Type != "error" || m.id() != "r2" || !strings.Contains(string(m.raw), "request_cancelled") {
		t.Fatalf("after the resume's cancel: %s", m.raw)
	}
	sendWS(t, c, `{"type":"resume","request_id":"r3","stream_id":"`+opening.Chunk.ID+`","last_seq":1}`)
	time.Sleep(3 * wsWaitInline)
	_ = c.CloseNow()
	// The parked resume ends with its connection.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := api.wsRequests.wait(ctx); err != nil {
		t.Errorf("the parked resume did not end with its connection: %v", err)
	}
}
