package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"rill/engine"
	"rill/internal/park"
	"rill/internal/wait"
)

// queueEngine starts requests whose events the test pushes: each request's
// queue arrives on the returned channel; ended counts the requests whose
// context ended.
func queueEngine() (*fakeEngine, chan *engine.Queue, *atomic.Int32) {
	queues := make(chan *engine.Queue, 64)
	var ended atomic.Int32
	e := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		q := engine.NewQueue(0, nil)
		context.AfterFunc(ctx, func() {
			ended.Add(1)
			q.End(ctx.Err())
		})
		queues <- q
		return q, nil
	}}
	return e, queues, &ended
}

// sseClient is a streamed request on a raw connection: the response parsed
// by net/http's client code (its chunked decoding included), the
// connection kept to see whether the server closes it.
type sseClient struct {
	conn net.Conn
	br   *bufio.Reader
	body *bufio.Reader
}

// sendSSE posts body to path.
func sendSSE(t *testing.T, addr, path, body string) *sseClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, len(body), body); err != nil {
		t.Fatal(err)
	}
	return &sseClient{conn: c, br: bufio.NewReader(c)}
}

// head reads the response's status and header: a chunked 200.
func (c *sseClient) head(t *testing.T) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" ||
		resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("status %d, transfer encoding %v, header %v", resp.StatusCode, resp.TransferEncoding, resp.Header)
	}
	c.body = bufio.NewReader(resp.Body)
	return resp
}

// until reads the body's lines until one contains marker, and returns
// them; io.EOF when the body ended first.
func (c *sseClient) until(marker string) ([]string, error) {
	var lines []string
	for {
		line, err := c.body.ReadString('\n')
		if line != "" {
			lines = append(lines, line)
		}
		if strings.Contains(line, marker) {
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}

// closedByServer reads the body to its end and reports whether the server
// closed the connection after it, within a second (a keep-alive connection
// stays open).
func (c *sseClient) closedByServer() bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.Copy(io.Discard, c.body); err != nil {
		return false
	}
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF)
}

// TestDetachedSSEStream: an SSE stream whose engine's first event comes
// later than sseWaitInline leaves net/http (its connection hijacked), its
// status and header sent then, with Connection: close, and goes on as
// before: its pings while idle, its tokens, its usage and its last event,
// a well-formed chunked body; then the server closes the connection. Its
// access line is written at its end, with its status, bytes and usage. A
// stream whose first event comes sooner keeps its keep-alive connection.
// Chat, completions, Messages and Responses streams alike.
func TestDetachedSSEStream(t *testing.T) {
	t.Parallel()
	const (
		chatBody  = `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`
		chatUsage = `"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4`
	)
	tests := []struct {
		name, path, body, token string
		usage, last             string // the usage's text, and the last event's
		wait                    bool   // wait past sseWaitInline before the tokens
	}{
		{"chat", "/v1/chat/completions", chatBody, `"content":"tok"`, chatUsage, "data: [DONE]", true},
		{"completions", "/v1/completions", `{"model":"tiny","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`,
			`"text":"tok"`, chatUsage, "data: [DONE]", true},
		{"chat, no wait", "/v1/chat/completions", chatBody, `"content":"tok"`, chatUsage, "data: [DONE]", false},
		{"messages", "/v1/messages", `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"x"}],"stream":true}`,
			`"text":"tok"`, `"output_tokens":1`, `"type":"message_stop"`, true},
		{"responses", "/v1/responses", `{"model":"tiny","input":"x","store":false,"stream":true}`,
			`"delta":"tok"`, `"input_tokens":3`, `"type":"response.completed"`, true},
		{"responses, no wait", "/v1/responses", `{"model":"tiny","input":"x","store":false,"stream":true}`,
			`"delta":"tok"`, `"input_tokens":3`, `"type":"response.completed"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var sink lockedBuffer
			e, queues, _ := queueEngine()
			ts := newTestServer(t, e, Options{Shutdown: make(chan struct{}), PingInterval: 300 * time.Millisecond,
				Poller: testPoller(t), Logger: slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			c := sendSSE(t, ts.Listener.Addr().String(), tt.path, tt.body)
			q := <-queues
			if !tt.wait {
				q.Push(engine.Event{Text: "tok"})
			}
			// Held until the first event or the detach, which says the
			// connection closes at the stream's end.
			if resp := c.head(t); resp.Close != tt.wait {
				t.Errorf("Connection: close %v, want %v", resp.Close, tt.wait)
			}
			if tt.wait {
				// Pings come while it waits, before and after it detaches.
				deadline := time.Now().Add(sseWaitInline + 700*time.Millisecond)
				pings := 0
				for time.Now().Before(deadline) {
					if _, err := c.until(": ping"); err != nil {
						t.Fatalf("before a ping: %v", err)
					}
					pings++
				}
				if pings < 4 {
					t.Errorf("%d pings in %v, want 4 or more", pings, sseWaitInline+700*time.Millisecond)
				}
			}
			if tt.wait {
				q.Push(engine.Event{Text: "tok"})
			}
			if _, err := c.until(tt.token); err != nil {
				t.Fatalf("before the token: %v", err)
			}
			q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 3, CompletionTokens: 1}})
			q.End(nil)
			lines, err := c.until(tt.last)
			if err != nil {
				t.Fatalf("before %s: %v (read %q)", tt.last, err, lines)
			}
			if !strings.Contains(strings.Join(lines, ""), tt.usage) {
				t.Errorf("no %s before %s: %q", tt.usage, tt.last, lines)
			}
			if rest, err := io.ReadAll(c.body); err != nil || string(rest) != "\n" {
				t.Errorf("after %s: %q, %v; want the event's blank line, then the body's end", tt.last, rest, err)
			}
			if got := c.closedByServer(); got != tt.wait {
				t.Errorf("connection closed by the server after the stream: %v, want %v", got, tt.wait)
			}
			var line map[string]any
			wait.Until(func() bool { return strings.Contains(sink.String(), `"msg":"request"`) })
			for l := range strings.SplitSeq(strings.TrimSpace(sink.String()), "\n") {
				if m := decodeMap(t, []byte(l)); m["msg"] == "request" {
					line = m
				}
			}
			if line == nil {
				t.Fatalf("no access line: %s", sink.String())
			}
			for k, want := range map[string]any{"method": "POST", "path": tt.path, "transport": "http", "model": "tiny",
				"status": 200.0, "prompt_tokens": 3.0, "completion_tokens": 1.0} {
				if line[k] != want {
					t.Errorf("access line %s = %v, want %v (%v)", k, line[k], want, line)
				}
			}
			if b, _ := line["bytes"].(float64); b < 100 {
				t.Errorf("access line bytes = %v, want the body's", line["bytes"])
			}
		})
	}
}

// TestDetachedSSEEnds: a detached stream ends, its engine request with it,
// when its client goes, and when the server shuts down (the client hears
// server_shutting_down, and the line says so); its connection waiting for
// the client in a Poller or on a goroutine. Chat, Messages and Responses
// streams alike, each telling of the shutdown in its API's shape.
func TestDetachedSSEEnds(t *testing.T) {
	t.Parallel()
	apis := []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`},
		{"messages", "/v1/messages", `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"x"}],"stream":true}`},
		{"responses", "/v1/responses", `{"model":"tiny","input":"x","store":false,"stream":true}`},
	}
	for _, api := range apis {
		for _, tc := range []struct{ shutdown, poller bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			testDetachedSSEEnds(t, api.name, api.path, api.body, tc.shutdown, tc.poller)
		}
	}
}

func testDetachedSSEEnds(t *testing.T, api, path, body string, shutdown, poller bool) {
	t.Run(fmt.Sprintf("%s, shutdown %v, poller %v", api, shutdown, poller), func(t *testing.T) {
		t.Parallel()
		var sink lockedBuffer
		e, queues, ended := queueEngine()
		stop := make(chan struct{})
		var p *park.Poller
		if poller {
			p = testPoller(t)
		}
		ts := newTestServer(t, e, Options{Shutdown: stop, Poller: p,
			Logger: slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		c := sendSSE(t, ts.Listener.Addr().String(), path, body)
		<-queues
		c.head(t) // detached
		time.Sleep(200 * time.Millisecond)
		if ended.Load() != 0 {
			t.Fatal("the engine request ended while its client was there")
		}
		want := `"status":499`
		if shutdown {
			close(stop)
			lines, err := c.until("The server shut down")
			if err != nil {
				t.Fatalf("before the shutdown's error event: %v (read %q)", err, lines)
			}
			if !c.closedByServer() {
				t.Error("the connection stayed open after the shutdown's error event")
			}
			want = `"status":503`
		} else {
			c.conn.Close()
		}
		if !wait.Until(func() bool { return ended.Load() == 1 }) {
			t.Fatal("the engine request still runs")
		}
		if !wait.Until(func() bool { return strings.Contains(sink.String(), want) }) {
			t.Errorf("no access line with %s: %s", want, sink.String())
		}
	})
}

// TestDetachedSSEGoroutines: a detached stream that waits for its engine
// holds no goroutine when its server has a Poller, and one, the small one
// that reads its connection for the client's leaving, when not; net/http
// held two (its connection's, grown, and its background reader).
func TestDetachedSSEGoroutines(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	for _, poller := range []bool{false, true} {
		t.Run(fmt.Sprintf("poller %v", poller), func(t *testing.T) {
			const n = 20
			e, queues, _ := queueEngine()
			var p *park.Poller
			if poller {
				p = testPoller(t)
			}
			ts := newTestServer(t, e, Options{Shutdown: make(chan struct{}), Poller: p})
			addr := ts.Listener.Addr().String()
			body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`
			g0 := runtime.NumGoroutine()
			clients := make([]*sseClient, n)
			for i := range clients {
				clients[i] = sendSSE(t, addr, "/v1/chat/completions", body)
				<-queues
			}
			defer func() {
				// Gone before the next case counts (the shared two may
				// stay).
				for _, c := range clients {
					c.conn.Close()
				}
				if !wait.Until(func() bool { return runtime.NumGoroutine() <= g0+2 }) {
					t.Errorf("%d goroutines after the streams' clients left, %d before", runtime.NumGoroutine(), g0)
				}
			}()
			// The server's shutdown watch and the pool's goroutine are shared.
			limit := n/10 + 2
			if !poller {
				limit += n
			}
			settled := func() bool { return runtime.NumGoroutine()-g0 <= limit && (!poller || p.Len() == n) }
			if !(wait.Options{Bound: sseWaitInline + 10*time.Second}).Until(settled) {
				t.Fatalf("%d goroutines for %d detached streams, want at most %d; %d connections in the Poller",
					runtime.NumGoroutine()-g0, n, limit, p.Len())
			}
		})
	}
}

// testPoller returns a park.Poller that the test closes at its end; the
// test is skipped where there is none (off Linux).
func testPoller(t *testing.T) *park.Poller {
	t.Helper()
	p, err := park.NewPoller()
	if err != nil {
		t.Skipf("no park.Poller here: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestDetachedSSESDK: the official client streams a reply that detached
// (its engine kept it waiting past sseWaitInline) like any other, and its
// next requests, on the connection the server closed, find a new one; a
// Responses stream too (TestDetachedMessagesSDK: Anthropic's client).
func TestDetachedSSESDK(t *testing.T) {
	t.Parallel()
	e, queues, _ := queueEngine()
	ts := newTestServer(t, e, Options{Shutdown: make(chan struct{})})
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	for i := range 3 {
		go func() { pushLate(<-queues) }()
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "ab" || acc.Usage.TotalTokens != 4 {
			t.Fatalf("stream %d: choices %+v, usage %+v", i, acc.Choices, acc.Usage)
		}
	}
	// The Responses API's stream, its opening events held with the header.
	go func() { pushLate(<-queues) }()
	s := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "tiny",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}, Store: openai.Bool(false)})
	var types []string
	var text string
	var completed *responses.Response
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			r := ev.Response
			completed = &r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("responses stream: %v", err)
	}
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" || completed == nil ||
		text != "ab" || completed.Usage.TotalTokens != 4 {
		t.Fatalf("responses stream: events %v, text %q, completed %+v", types, text, completed)
	}
}

// pushLate plays a two-token answer on q after sseWaitInline: a stream
// that waits for it detaches first.
func pushLate(q *engine.Queue) {
	time.Sleep(sseWaitInline + 200*time.Millisecond)
	q.Push(engine.Event{Text: "a"})
	q.Push(engine.Event{Text: "b"})
	q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 2, CompletionTokens: 2}})
	q.End(nil)
}

// TestDetachedSSEStalledReader: a detached stream whose client stops
// reading is given up after the write idle timeout, as an attached one
// is: its engine request ends, and its line says why.
func TestDetachedSSEStalledReader(t *testing.T) {
	t.Parallel()
	var sink lockedBuffer
	e, queues, ended := queueEngine()
	ts := newTestServer(t, e, Options{Shutdown: make(chan struct{}), WriteIdleTimeout: 100 * time.Millisecond, PingInterval: -1,
		Logger: slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	sendSSE(t, ts.Listener.Addr().String(), "/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`) // and read nothing
	q := <-queues
	time.Sleep(sseWaitInline + 200*time.Millisecond) // detached
	big := strings.Repeat("x", 16<<10)
	go func() {
		for ended.Load() == 0 {
			q.Push(engine.Event{Text: big})
			time.Sleep(time.Millisecond)
		}
	}()
	if !wait.Until(func() bool { return ended.Load() == 1 }) {
		t.Fatal("the engine still generates for a client that reads nothing")
	}
	if !wait.Until(func() bool { return strings.Contains(sink.String(), `"reason":"write_idle_timeout"`) }) {
		t.Errorf("no access line with the write idle timeout: %s", sink.String())
	}
}

// TestDetachedResumable: a resumable SSE stream whose engine keeps it
// waiting detaches (Connection: close), its opening chunk sent then with
// its id; a client that dropped and comes back with Last-Event-ID while
// the stream lives follows it from this process's log, and detaches in
// turn while it waits; it gets the rest, the usage and [DONE], without gap
// or duplicate, and the server closes its connection at the end. The
// shutdown of the server ends a detached follower with
// server_shutting_down.
func TestDetachedResumable(t *testing.T) {
	t.Parallel()
	for _, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprintf("shutdown %v", shutdown), func(t *testing.T) {
			t.Parallel()
			e, queues, _ := queueEngine()
			stop := make(chan struct{})
			ts := newTestServer(t, e, Options{Shutdown: stop, Poller: testPoller(t), PingInterval: 300 * time.Millisecond})
			addr := ts.Listener.Addr().String()
			first := sendSSE(t, addr, "/v1/chat/completions",
				`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,"resumable":true}}`)
			q := <-queues
			if resp := first.head(t); !resp.Close {
				t.Error("a resumable stream that waited past sseWaitInline did not detach")
			}
			opening := readIDEvents(t, first.body, 1)
			if len(opening) != 1 || opening[0].id != 0 || !strings.Contains(opening[0].data, `"role":"assistant"`) {
				t.Fatalf("opening: %v", opening)
			}
			var chunk struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal([]byte(opening[0].data), &chunk); err != nil {
				t.Fatal(err)
			}
			q.Push(engine.Event{Text: "a"})
			if evs := readIDEvents(t, first.body, 1); len(evs) != 1 || evs[0].id != 1 || !strings.Contains(evs[0].data, `"content":"a"`) {
				t.Fatalf("first token: %v", evs)
			}
			first.conn.Close()

			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "GET /v1/chat/completions/%s HTTP/1.1\r\nHost: %s\r\nLast-Event-ID: 1\r\n\r\n", chunk.ID, addr)
			again := &sseClient{conn: c, br: bufio.NewReader(c)}
			if resp := again.head(t); !resp.Close {
				t.Error("a follower that waited past sseWaitInline did not detach")
			}
			if shutdown {
				close(stop)
				lines, err := again.until("server_shutting_down")
				if err != nil {
					t.Fatalf("before the shutdown's error event: %v (read %q)", err, lines)
				}
				if !again.closedByServer() {
					t.Error("the connection stayed open after the shutdown's error event")
				}
				return
			}
			q.Push(engine.Event{Text: "b"})
			q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 3, CompletionTokens: 2}})
			q.End(nil)
			rest := readIDEvents(t, again.body, 0)
			if len(rest) < 2 || rest[0].id != 2 || rest[len(rest)-1].data != "[DONE]" {
				t.Fatalf("after the resume: %v", rest)
			}
			for i, ev := range rest[:len(rest)-1] {
				if ev.id != int64(2+i) {
					t.Errorf("event %d has id %d, want %d", i, ev.id, 2+i)
				}
			}
			text, usage, _ := streamText(t, append(opening, rest...))
			if text != "b" || !strings.Contains(usage, `"completion_tokens":2`) {
				t.Errorf("after the resume: text %q, usage %s", text, usage)
			}
			if _, err := again.br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("the connection stayed open after the stream: %v", err)
			}
		})
	}
}

// TestDetachedMessagesSDK: Anthropic's client streams a message that
// detached (its engine kept it waiting past sseWaitInline) like any
// other: message_start first, the text, the usage, message_stop.
func TestDetachedMessagesSDK(t *testing.T) {
	t.Parallel()
	e, queues, _ := queueEngine()
	ts := newTestServer(t, e, Options{Shutdown: make(chan struct{})})
	go func() { pushLate(<-queues) }()
	client := anthropic.NewClient(aoption.WithBaseURL(ts.URL), aoption.WithAPIKey("none"), aoption.WithMaxRetries(0))
	s := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "tiny", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}})
	var msg anthropic.Message
	var types []string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(types) < 5 || types[0] != "message_start" || types[len(types)-1] != "message_stop" ||
		len(msg.Content) != 1 || msg.Content[0].Text != "ab" || msg.Usage.OutputTokens != 2 {
		t.Fatalf("events %v, message %+v", types, msg)
	}
}

// TestLaunchPartialFailure: when a later prompt's engine request fails to
// start, the request is answered with its error and the engine requests
// already started end with it (they run under the request's context,
// which its end cancels), on every transport.
func TestLaunchPartialFailure(t *testing.T) {
	t.Parallel()
	for _, shutdown := range []bool{false, true} { // the handler's context, or one that may detach
		t.Run(fmt.Sprintf("may detach %v", shutdown), func(t *testing.T) {
			t.Parallel()
			var started, ended atomic.Int32
			e := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				if started.Add(1) > 1 {
					return nil, fmt.Errorf("%w: full", engine.ErrOverloaded)
				}
				q := engine.NewQueue(0, nil)
				context.AfterFunc(ctx, func() {
					ended.Add(1)
					q.End(ctx.Err())
				})
				return q, nil
			}}
			opts := Options{}
			if shutdown {
				opts.Shutdown = make(chan struct{})
			}
			ts := newTestServer(t, e, opts)
			for _, stream := range []bool{false, true} {
				started.Store(0)
				ended.Store(0)
				body := fmt.Sprintf(`{"model":"tiny","prompt":["a","b"],"stream":%v}`, stream)
				resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "engine_overloaded") {
					t.Errorf("stream %v: %d %s", stream, resp.StatusCode, b)
				}
				if !wait.Until(func() bool { return ended.Load() == 1 }) {
					t.Errorf("stream %v: the first prompt's engine request still runs", stream)
				}
			}
			started.Store(0)
			ended.Store(0)
			c := dialWS(t, ts, "/v1/completions", nil)
			defer c.CloseNow()
			sendWS(t, c, createMsg("r1", `{"model":"tiny","prompt":["a","b"]}`))
			if m := readWS(t, c); m.Type != "error" || m.Status != http.StatusServiceUnavailable {
				t.Errorf("websocket: %s", m.raw)
			}
			if !wait.Until(func() bool { return ended.Load() == 1 }) {
				t.Error("websocket: the first prompt's engine request still runs")
			}
		})
	}
}

// TestDetachedBackground: a background response streamed by the request
// that creates it detaches while its engine keeps it waiting
// (Connection: close), its opening events sent then; a GET that follows
// it (?stream=true&starting_after=N) while it lives detaches too; both get
// the rest, response.completed last, and the server closes them.
func TestDetachedBackground(t *testing.T) {
	t.Parallel()
	e, queues, _ := queueEngine()
	ts := newTestServer(t, e, Options{Shutdown: make(chan struct{}), Poller: testPoller(t), PingInterval: 300 * time.Millisecond})
	addr := ts.Listener.Addr().String()
	first := sendSSE(t, addr, "/v1/responses", `{"model":"tiny","input":"x","background":true,"stream":true}`)
	q := <-queues
	if resp := first.head(t); !resp.Close {
		t.Error("a background stream that waited past sseWaitInline did not detach")
	}
	opening := readIDEvents(t, first.body, 2)
	if len(opening) != 2 || opening[0].id != 0 || !strings.Contains(opening[0].data, `"type":"response.created"`) ||
		!strings.Contains(opening[1].data, `"type":"response.in_progress"`) {
		t.Fatalf("opening: %v", opening)
	}
	var created struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(opening[0].data), &created); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET /v1/responses/%s?stream=true&starting_after=1 HTTP/1.1\r\nHost: %s\r\n\r\n", created.Response.ID, addr)
	again := &sseClient{conn: c, br: bufio.NewReader(c)}
	if resp := again.head(t); !resp.Close {
		t.Error("a follower that waited past sseWaitInline did not detach")
	}
	q.Push(engine.Event{Text: "a"})
	q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 3, CompletionTokens: 1}})
	q.End(nil)
	for name, cl := range map[string]*sseClient{"creator": first, "follower": again} {
		rest := readIDEvents(t, cl.body, 0)
		if len(rest) == 0 || rest[0].id != 2 || !strings.Contains(rest[len(rest)-1].data, `"type":"response.completed"`) {
			t.Fatalf("%s: %v", name, rest)
		}
		var text string
		for i, ev := range rest {
			if ev.id != int64(2+i) {
				t.Errorf("%s: event %d has id %d", name, i, ev.id)
			}
			var d struct {
				Type  string `json:"type"`
				Delta string `json:"delta"`
			}
			_ = json.Unmarshal([]byte(ev.data), &d)
			if d.Type == "response.output_text.delta" {
				text += d.Delta
			}
		}
		if text != "a" || !strings.Contains(rest[len(rest)-1].data, `"input_tokens":3`) {
			t.Errorf("%s: text %q, last %s", name, text, rest[len(rest)-1].data)
		}
		if _, err := cl.br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: the connection stayed open after the stream: %v", name, err)
		}
	}
}
