package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"rill/engine"
)

// TestLoad: a replica that fails its health check is reported down, a
// request held open by the other counts as running and in flight there
// until it ends, and credentials in a replica URL stay out of the report.
func TestLoad(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(held.Close)
	t.Cleanup(func() { close(release) })
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(sick.Close)
	withUser := strings.Replace(held.URL, "http://", "http://user:secret@", 1)
	e, err := New(Options{ID: "m", Kind: VLLM, Replicas: []Replica{{URL: withUser}, {URL: sick.URL}},
		HealthInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	var lr engine.LoadReporter = e

	waitFor := func(what string, ok func(engine.ModelLoad) bool) engine.ModelLoad {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			loads := lr.Load()
			if len(loads) != 1 {
				t.Fatalf("%d loads for one model", len(loads))
			}
			if ok(loads[0]) {
				return loads[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; load %+v", what, loads[0])
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	l := waitFor("the sick replica to go down", func(l engine.ModelLoad) bool {
		return len(l.Replicas) == 2 && !l.Replicas[1].Healthy
	})
	if l.Model != "m" || l.Running != 0 || l.Waiting != 0 || l.KVCacheUsage != nil || !l.Replicas[0].Healthy {
		t.Errorf("idle load %+v", l)
	}
	if got := l.Replicas[0].URL; got != held.URL || strings.Contains(got, "secret") {
		t.Errorf("replica URL %q, want %q", got, held.URL)
	}
	if l.Replicas[1].URL != sick.URL {
		t.Errorf("replica URL %q, want %q", l.Replicas[1].URL, sick.URL)
	}

	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.Generate(ctx, &engine.Request{Model: "m", Prompt: "hi", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	l = waitFor("the request in flight", func(l engine.ModelLoad) bool { return l.Running == 1 })
	if l.Replicas[0].InFlight != 1 || l.Replicas[1].InFlight != 0 {
		t.Errorf("in flight per replica: %+v", l.Replicas)
	}
	// Cancelled, the request leaves the replica at once, although nobody
	// calls Recv again (a consumer that has stopped reading).
	cancel()
	waitFor("the request to end", func(l engine.ModelLoad) bool { return l.Running == 0 && l.Replicas[0].InFlight == 0 })
	if _, err := engine.Recv(st); err == nil {
		t.Error("Recv after cancel returned no error")
	}
}
