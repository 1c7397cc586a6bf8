package upstream_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/upstream"
	"rill/internal/shared"
	"rill/service"
)

var discard = slog.New(slog.DiscardHandler)

// refdata returns ../shared/refdata, skipping the test when absent.
func refdata(t testing.TB) string { return shared.Path(t, "refdata") }

// serve runs h on a loopback listener until the test ends, and returns its
// base URL and its server (Close kills it, connections included).
func serve(t testing.TB, h http.Handler) (string, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), srv
}

// newUpstream starts an upstream engine over the replica URLs with short
// health intervals, closed when the test ends.
func newUpstream(t testing.TB, id string, kind upstream.Kind, urls ...string) *upstream.Engine {
	t.Helper()
	opts := upstream.Options{ID: id, Kind: kind, HealthInterval: 50 * time.Millisecond,
		HealthTimeout: time.Second, Logger: discard}
	for _, u := range urls {
		opts.Replicas = append(opts.Replicas, upstream.Replica{URL: u})
	}
	e, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// front serves e with rill's HTTP service and returns its base URL.
func front(t testing.TB, e engine.Engine) string {
	t.Helper()
	url, _ := serve(t, service.New(service.Options{Engine: e, Logger: discard}))
	return url
}

// answer is what a client of rill saw.
type answer struct {
	status int
	body   []byte
	// For streams: each data payload, [DONE] excluded, and whether it came.
	events [][]byte
	done   bool
}

// post sends body to url+path and reads the whole answer.
func post(t testing.TB, url, path, body string) answer {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		a.body, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a.events, a.done = readSSE(t, resp.Body)
	return a
}

// readSSE reads data payloads until [DONE] or the end of the body.
func readSSE(t testing.TB, r io.Reader) (events [][]byte, done bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return events, true
		}
		events = append(events, []byte(data))
	}
	return events, false
}

// clientChunk is what the tests read from rill's chunks and responses.
type clientChunk struct {
	Choices []struct {
		Index   int
		Text    string
		Delta   struct{ Content string }
		Message struct{ Content string }
		// FinishReason is a pointer: null and absent differ from "".
		FinishReason *string `json:"finish_reason"`
	}
	Usage json.RawMessage
	Error *struct {
		Message string
		Type    string
		Code    *string
	}
}

func decode(t testing.TB, data []byte) clientChunk {
	t.Helper()
	var c clientChunk
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("bad JSON %s: %v", data, err)
	}
	return c
}

// text joins the text of every choice of a stream or response, per index.
func texts(t testing.TB, a answer) map[int]string {
	t.Helper()
	out := make(map[int]string)
	add := func(c clientChunk) {
		for _, ch := range c.Choices {
			out[ch.Index] += ch.Text + ch.Delta.Content + ch.Message.Content
		}
	}
	if a.events == nil {
		add(decode(t, a.body))
	}
	for _, e := range a.events {
		add(decode(t, e))
	}
	return out
}

// hasUsageKey reports whether any event has a "usage" member.
func hasUsageKey(events [][]byte) bool {
	for _, e := range events {
		var m map[string]json.RawMessage
		if json.Unmarshal(e, &m) == nil {
			if _, ok := m["usage"]; ok {
				return true
			}
		}
	}
	return false
}

// compact re-encodes JSON without spaces, for comparisons.
func compact(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return buf.String()
}
