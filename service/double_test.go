package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"rill/engine"
	"rill/internal/park"
	"rill/openapi"
)

// fakeEngine is the engine double: it records requests and answers each with
// the stream its respond function builds.
type fakeEngine struct {
	models  []engine.ModelCard
	respond func(ctx context.Context, req *engine.Request) (engine.Stream, error)

	mu   sync.Mutex
	reqs []engine.Request
}

func (f *fakeEngine) Models() []engine.ModelCard { return f.models }

func (f *fakeEngine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	f.mu.Unlock()
	known := false
	for _, m := range f.models {
		known = known || m.ID == req.Model
	}
	if !known {
		return nil, engine.ErrUnknownModel
	}
	return f.respond(ctx, req)
}

func (f *fakeEngine) requests() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.reqs...)
}

var testModels = []engine.ModelCard{{ID: "tiny", OwnedBy: "rill", Created: 1700000000,
	ContextLength: 256, Description: "a test double"}}

// fakeStream replays events; it honours ctx the way the Stream contract
// asks: the stream ends with ctx's error once it is cancelled.
type fakeStream struct {
	ctx    context.Context
	events []engine.Event
	// delay comes before every event; hang holds the stream open after the
	// events until ctx ends; err is returned after the events instead of
	// io.EOF.
	delay time.Duration
	hang  bool
	err   error
	// cancelled, if set, is closed when the stream sees ctx end, as an
	// engine does.
	cancelled chan struct{}

	init    sync.Once
	ready   chan struct{}
	due     time.Time   // when the next event may go
	unwatch func() bool // stops watching ctx once the stream completed
}

func (s *fakeStream) start() {
	s.init.Do(func() {
		s.ready = make(chan struct{}, 1)
		s.unwatch = context.AfterFunc(s.ctx, func() {
			if s.cancelled != nil {
				close(s.cancelled)
			}
			s.signal()
		})
		s.arm()
	})
}

func (s *fakeStream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// arm makes the next event wait for the delay.
func (s *fakeStream) arm() {
	if s.delay > 0 {
		s.due = time.Now().Add(s.delay)
		time.AfterFunc(s.delay, s.signal)
	}
}

func (s *fakeStream) Ready() <-chan struct{} {
	s.start()
	return s.ready
}

func (s *fakeStream) TryRecv() (engine.Event, bool, error) {
	s.start()
	if err := s.ctx.Err(); err != nil {
		return engine.Event{}, false, err
	}
	if time.Now().Before(s.due) {
		return engine.Event{}, false, nil
	}
	if len(s.events) == 0 {
		if s.hang {
			return engine.Event{}, false, nil
		}
		s.unwatch() // done: a later cancellation finds nothing to stop
		if s.err != nil {
			return engine.Event{}, false, s.err
		}
		return engine.Event{}, false, io.EOF
	}
	ev := s.events[0]
	s.events = s.events[1:]
	s.arm()
	return ev, true, nil
}

// readyNow is the Ready channel of doubles that always have something.
var readyNow = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// script builds events: every piece for every choice (interleaved), then a
// final event per choice with reason and the Stats stats(choice) returns.
func script(n int, pieces []string, reason engine.FinishReason, stats func(choice int) engine.Stats) []engine.Event {
	var evs []engine.Event
	for _, p := range pieces {
		for j := range n {
			evs = append(evs, engine.Event{Choice: j, Text: p})
		}
	}
	for j := range n {
		st := stats(j)
		evs = append(evs, engine.Event{Choice: j, Final: true, FinishReason: reason, Stats: &st})
	}
	return evs
}

// plainStats counts the prompt's words as prompt tokens and one token per piece.
func plainStats(prompt, completion int) func(int) engine.Stats {
	return func(int) engine.Stats { return engine.Stats{PromptTokens: prompt, CompletionTokens: completion} }
}

// replay answers every request with script(req.N, pieces, reason, stats).
func replay(pieces []string, reason engine.FinishReason, stats func(int) engine.Stats) func(context.Context, *engine.Request) (engine.Stream, error) {
	return func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: script(req.Choices(), pieces, reason, stats)}, nil
	}
}

func ptr[T any](v T) *T { return &v }

// newTestServer serves a Server over fake on a real listener.
func newTestServer(t testing.TB, fake *fakeEngine, opts Options) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(New(testOptions(fake, opts)))
	t.Cleanup(ts.Close)
	return ts
}

// testOptions is opts for a test server over fake: its models testModels
// and its log discarded unless set.
func testOptions(fake *fakeEngine, opts Options) Options {
	if fake.models == nil {
		fake.models = testModels
	}
	opts.Engine = fake
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts
}

// newServedTestServer is newTestServer served as rill serve serves: idle
// connections in a park.Poller (Options.Poller and a park.Listener), and
// WebSocket connections and detached SSE streams apart from their handlers
// (Options.Shutdown, when the caller gave none). Off Linux it is
// newTestServer with Options.Shutdown.
func newServedTestServer(t testing.TB, fake *fakeEngine, opts Options) *httptest.Server {
	t.Helper()
	if opts.Shutdown == nil {
		opts.Shutdown = make(chan struct{})
	}
	p, err := park.NewPoller()
	if err != nil {
		return newTestServer(t, fake, opts)
	}
	t.Cleanup(func() { p.Close() })
	opts.Poller = p
	ts := httptest.NewUnstartedServer(New(testOptions(fake, opts)))
	pl := park.NewListener(ts.Listener, p, park.ListenerOptions{})
	ts.Listener, ts.Config.ConnState = pl, pl.ConnState
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// post sends body as JSON and returns the response with its body read.
func post(t testing.TB, client *http.Client, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// sseEvent is one parsed event of a stream.
type sseEvent struct {
	comment bool
	data    []byte
}

// parseSSE splits a raw SSE body into events and checks OpenAI's framing:
// every event is a `data: ` line or a comment, followed by a blank line.
func parseSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	var evs []sseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	expectBlank := false
	for sc.Scan() {
		line := sc.Bytes()
		if expectBlank {
			if len(line) != 0 {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		switch {
		case bytes.HasPrefix(line, []byte(": ")):
			evs = append(evs, sseEvent{comment: true, data: append([]byte(nil), line[2:]...)})
		case bytes.HasPrefix(line, []byte("data: ")):
			evs = append(evs, sseEvent{data: append([]byte(nil), line[6:]...)})
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
		expectBlank = true
	}
	if expectBlank {
		t.Fatalf("stream ends without the blank line of its last event")
	}
	return evs
}

// dataEvents returns the data payloads of evs, dropping comments, and checks
// that the last is [DONE] and appears only there.
func dataEvents(t testing.TB, evs []sseEvent) [][]byte {
	t.Helper()
	var out [][]byte
	for _, e := range evs {
		if !e.comment {
			out = append(out, e.data)
		}
	}
	if len(out) == 0 || string(out[len(out)-1]) != "[DONE]" {
		t.Fatalf("stream does not end with data: [DONE]")
	}
	out = out[:len(out)-1]
	for _, d := range out {
		if string(d) == "[DONE]" {
			t.Fatalf("[DONE] before the end of the stream")
		}
	}
	return out
}

// mustValidate checks data against an openapi component schema.
func mustValidate(t testing.TB, component string, data []byte) {
	t.Helper()
	if err := openapi.ValidateSchema(component, data); err != nil {
		t.Fatalf("%s does not validate: %v\n%s", component, err, data)
	}
}

// decodeMap decodes a JSON object, failing the test if it is not one.
func decodeMap(t testing.TB, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, data)
	}
	return m
}
