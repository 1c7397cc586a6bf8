package upstream

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
	"rill/internal/wait"
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
		var l engine.ModelLoad
		if !wait.Until(func() bool {
			loads := lr.Load()
			if len(loads) != 1 {
				t.Fatalf("%d loads for one model", len(loads))
			}
			l = loads[0]
			return ok(l)
		}) {
			t.Fatalf("timed out waiting for %s; load %+v", what, l)
		}
		return l
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

// TestReplicaMetrics: the load of an upstream model includes what its
// healthy replicas' own /metrics say, in vLLM's, SGLang's, llama.cpp's or
// rill's names: waiting requests summed, KV usage averaged over those that
// report it, the series of the upstream model's name where there are
// several. A replica without metrics is asked once; one whose metrics do
// not parse stays healthy and reports nothing; a down one does not count.
func TestReplicaMetrics(t *testing.T) {
	t.Parallel()
	const vllm = `# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m-up"} 0.25
vllm:kv_cache_usage_perc{engine="0",model_name="other"} 0.9
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m-up"} 3
vllm:num_requests_waiting{engine="0",model_name="other"} 7
`
	const llamacpp = `# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
`
	const sglangDown = `# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m-up"} 1
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m-up"} 40
`
	var noMetricsAsked atomic.Int32
	var checks [5]atomic.Int32 // health checks per replica
	replica := func(i, health int, metrics func(w http.ResponseWriter)) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health":
				checks[i].Add(1)
				w.WriteHeader(health)
			case "/metrics":
				metrics(w)
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	text := func(body string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			io.WriteString(w, body)
		}
	}
	replicas := []Replica{
		{URL: replica(0, http.StatusOK, text(vllm))},
		{URL: replica(1, http.StatusOK, text(llamacpp))},
		{URL: replica(2, http.StatusOK, func(w http.ResponseWriter) {
			noMetricsAsked.Add(1)
			w.WriteHeader(http.StatusNotImplemented)
		})},
		{URL: replica(3, http.StatusOK, text("vllm:kv_cache_usage_perc{ 0.5\n"))},
		{URL: replica(4, http.StatusServiceUnavailable, text(sglangDown))},
	}
	e, err := New(Options{ID: "m", UpstreamModel: "m-up", Kind: VLLM, Replicas: replicas,
		HealthInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	var l engine.ModelLoad
	if !wait.Until(func() bool {
		l = e.Load()[0]
		return l.Waiting == 5 && l.KVCacheUsage != nil && !l.Replicas[4].Healthy
	}) {
		t.Fatalf("load %+v, want 5 waiting (3 + 2) and KV usage 0.25", l)
	}
	if *l.KVCacheUsage != 0.25 {
		t.Errorf("KV usage %v, want 0.25 (the one replica that reports it, for m-up)", *l.KVCacheUsage)
	}
	for i := range 4 {
		if !l.Replicas[i].Healthy {
			t.Errorf("replica %d down: its metrics are not its health", i)
		}
	}
	// Ten more checks of the replica without metrics, each of which would
	// have asked for them: a replica's checks run one after the other, so
	// the eleventh /health from here comes once the ten before it ended.
	from := checks[2].Load()
	wait.For(t, "ten more health checks", func() bool { return checks[2].Load() >= from+11 })
	if n := noMetricsAsked.Load(); n != 1 {
		t.Errorf("a replica without metrics was asked %d times, want once", n)
	}
}
