package service

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
)

// The SSE transport: cancellation on disconnect, connection reuse, pings,
// flushing.

// TestDisconnectCancels: a client that goes away mid-stream cancels its
// generation at once, streamed or not.
func TestDisconnectCancels(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			cancelled, arrived := make(chan struct{}), make(chan struct{})
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				st := &fakeStream{ctx: ctx, events: []engine.Event{{Text: "first"}}, hang: true, cancelled: cancelled}
				st.start() // watch ctx from here on, as an engine does
				close(arrived)
				return st, nil
			}}
			ts := newTestServer(t, fake, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
				strings.NewReader(fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":%v}`, stream)))
			done := make(chan error, 1)
			go func() {
				resp, err := ts.Client().Do(req)
				if err == nil {
					if stream {
						// Read up to the first content chunk, then hang up.
						r := bufio.NewReader(resp.Body)
						for {
							line, err := r.ReadString('\n')
							if err != nil || strings.Contains(line, "first") {
								break
							}
						}
						cancel()
					}
					resp.Body.Close()
				}
				done <- err
			}()
			if !stream {
				// Hang up once the request reached the engine.
				select {
				case <-arrived:
				case <-time.After(5 * time.Second):
					t.Fatal("the request never reached the engine")
				}
				cancel()
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the engine never saw the cancellation")
			}
			<-done
		})
	}
}

// TestKeepAliveReuse: a pooled client reuses one connection for many
// sequential streams (the peer drops it after each).
func TestKeepAliveReuse(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a", "b", "c"}, engine.FinishStop, plainStats(2, 3))}
	fake.models = testModels
	ts := httptest.NewUnstartedServer(New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)}))
	var conns atomic.Int32
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 20 {
		path, body := "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`
		if i%2 == 1 {
			path, body = "/v1/completions", `{"model":"tiny","prompt":"x","stream":true}`
		}
		resp, data := post(t, client, ts.URL+path, body)
		if resp.StatusCode != 200 || !bytes.HasSuffix(data, []byte("data: [DONE]\n\n")) {
			t.Fatalf("stream %d: status %d body %q", i, resp.StatusCode, data)
		}
		if resp.Close {
			t.Fatalf("stream %d: server closes the connection", i)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 20 sequential streams, want 1", n)
	}
}

func TestPings(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: 60 * time.Millisecond,
			events: script(1, []string{"slow", "ly"}, engine.FinishStop, plainStats(1, 2))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: 10 * time.Millisecond})
	_, data := post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":"x","stream":true}`)
	evs := parseSSE(t, data)
	pings := 0
	for _, e := range evs {
		if e.comment {
			if string(e.data) != "ping" {
				t.Errorf("comment %q", e.data)
			}
			pings++
		}
	}
	if pings == 0 {
		t.Errorf("no ping in a stream idle for 60ms at a time with a 10ms interval:\n%s", data)
	}
	var text string
	for _, c := range dataEvents(t, evs) {
		text += decodeMap(t, c)["choices"].([]any)[0].(map[string]any)["text"].(string)
	}
	if text != "slowly" {
		t.Errorf("text %q", text)
	}

	// Negative disables pings.
	ts2 := newTestServer(t, fake, Options{PingInterval: -1})
	_, data = post(t, ts2.Client(), ts2.URL+"/v1/completions", `{"model":"tiny","prompt":"x","stream":true}`)
	if bytes.Contains(data, []byte(": ping")) {
		t.Errorf("ping with pings disabled")
	}
}

// TestReadChunksAsTheyCome: every event is flushed when it is made, not when
// the response ends.
func TestReadChunksAsTheyCome(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &gatedStream{ctx: ctx, release: release}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"x","stream":true}`))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, `"text":"before"`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(r)
	if !bytes.Contains(rest, []byte(`"text":"after"`)) || !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		t.Errorf("rest %q", rest)
	}
}

// gatedStream sends one event, waits for release, then finishes.
type gatedStream struct {
	ctx     context.Context
	release chan struct{}
	step    int
}

func (s *gatedStream) TryRecv() (engine.Event, bool, error) {
	if err := s.ctx.Err(); err != nil {
		return engine.Event{}, false, err
	}
	switch s.step {
	case 0:
		s.step++
		return engine.Event{Text: "before"}, true, nil
	case 1:
		select {
		case <-s.release:
		default:
			return engine.Event{}, false, nil
		}
		s.step++
		return engine.Event{Text: "after"}, true, nil
	case 2:
		s.step++
		return engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 1, CompletionTokens: 2}}, true, nil
	}
	return engine.Event{}, false, io.EOF
}

// Ready is release: it becomes ready when the gate opens (and stays so).
func (s *gatedStream) Ready() <-chan struct{} { return s.release }

func (s *gatedStream) Recv() (engine.Event, error) {
	s.step++
	switch s.step {
	case 1:
		return engine.Event{Text: "before"}, nil
	case 2:
		select {
		case <-s.release:
		case <-s.ctx.Done():
			return engine.Event{}, s.ctx.Err()
		}
		return engine.Event{Text: "after"}, nil
	case 3:
		return engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{PromptTokens: 1, CompletionTokens: 2}}, nil
	}
	return engine.Event{}, io.EOF
}
