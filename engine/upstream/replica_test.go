package upstream

import (
	"fmt"
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

func replicas(t *testing.T, n int) []*replica {
	t.Helper()
	out := make([]*replica, n)
	for i := range out {
		r, err := newReplica(i, fmt.Sprintf("http://10.0.0.%d:8000", i+1), "")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r
	}
	return out
}

func TestPick(t *testing.T) {
	t.Parallel()
	key := func(s string) uint64 {
		k, _ := affinityKey(&engine.Request{Prompt: s}, 512)
		return k
	}
	t.Run("affinity is stable and spreads", func(t *testing.T) {
		t.Parallel()
		rs := replicas(t, 4)
		used := make(map[int]int)
		for i := range 200 {
			k := key(fmt.Sprintf("prompt %d", i))
			first := pick(rs, make([]bool, 4), k, true, 8, uint64(i))
			for rot := range uint64(5) {
				if again := pick(rs, make([]bool, 4), k, true, 8, rot); again != first {
					t.Fatalf("prompt %d: replica %d, then %d", i, first.idx, again.idx)
				}
			}
			used[first.idx]++
		}
		for i := range 4 {
			if used[i] < 25 {
				t.Errorf("replica %d got %d of 200 prefixes: %v", i, used[i], used)
			}
		}
	})
	t.Run("busy target loses to the least loaded", func(t *testing.T) {
		t.Parallel()
		rs := replicas(t, 3)
		k := key("shared system prompt")
		target := pick(rs, make([]bool, 3), k, true, 2, 0)
		target.inflight.Store(2)
		if got := pick(rs, make([]bool, 3), k, true, 2, 0); got != target {
			t.Errorf("within the imbalance: replica %d, want the target %d", got.idx, target.idx)
		}
		target.inflight.Store(3)
		got := pick(rs, make([]bool, 3), k, true, 2, 0)
		if got == target || got.inflight.Load() != 0 {
			t.Errorf("beyond the imbalance: replica %d (load %d), want an idle one", got.idx, got.inflight.Load())
		}
	})
	t.Run("least loaded without affinity", func(t *testing.T) {
		t.Parallel()
		rs := replicas(t, 3)
		rs[0].inflight.Store(5)
		rs[1].inflight.Store(1)
		rs[2].inflight.Store(3)
		for rot := range uint64(3) {
			if got := pick(rs, make([]bool, 3), 0, false, 8, rot); got != rs[1] {
				t.Errorf("rot %d: replica %d, want 1", rot, got.idx)
			}
		}
		// Ties rotate.
		rs[0].inflight.Store(1)
		seen := make(map[int]bool)
		for rot := range uint64(3) {
			seen[pick(rs, make([]bool, 3), 0, false, 8, rot).idx] = true
		}
		if !seen[0] || !seen[1] || seen[2] {
			t.Errorf("ties picked %v, want replicas 0 and 1", seen)
		}
	})
	t.Run("down and tried replicas", func(t *testing.T) {
		t.Parallel()
		rs := replicas(t, 3)
		k := key("x")
		target := pick(rs, make([]bool, 3), k, true, 8, 0)
		target.markDown("test")
		next := pick(rs, make([]bool, 3), k, true, 8, 0)
		if next == target {
			t.Fatal("a down replica was picked while healthy ones are left")
		}
		// The fallback is itself stable: the next in rendezvous order.
		if again := pick(rs, make([]bool, 3), k, true, 8, 7); again != next {
			t.Errorf("fallback moved from %d to %d", next.idx, again.idx)
		}
		tried := make([]bool, 3)
		for _, r := range rs {
			if r != target {
				tried[r.idx] = true
			}
		}
		if got := pick(rs, tried, k, true, 8, 0); got != target {
			t.Errorf("with every healthy replica tried: %v, want the down one as a last resort", got)
		}
		tried[target.idx] = true
		if got := pick(rs, tried, k, true, 8, 0); got != nil {
			t.Errorf("with every replica tried: replica %d, want none", got.idx)
		}
	})
}

func TestAffinityKey(t *testing.T) {
	t.Parallel()
	sys := engine.Message{Role: engine.RoleSystem, Content: strings.Repeat("You are a helpful assistant. ", 30)}
	chat := func(msgs ...engine.Message) *engine.Request { return &engine.Request{Messages: msgs} }
	user := func(s string) engine.Message { return engine.Message{Role: engine.RoleUser, Content: s} }
	keyed := func(key string, r *engine.Request) *engine.Request { r.CacheKey = key; return r }
	cases := []struct {
		name string
		a, b *engine.Request
		n    int
		same bool
	}{
		{"shared long prefix", chat(sys, user("a")), chat(sys, user("b")), 512, true},
		{"difference within the prefix", chat(sys, user("a")), chat(sys, user("b")), 2048, false},
		{"role matters", chat(user("hi")), chat(engine.Message{Role: engine.RoleSystem, Content: "hi"}), 512, false},
		{"message boundaries matter", chat(user("ab"), user("c")), chat(user("a"), user("bc")), 512, false},
		{"text prompts", &engine.Request{Prompt: strings.Repeat("x", 600) + "1"}, &engine.Request{Prompt: strings.Repeat("x", 600) + "2"}, 512, true},
		{"short text prompts differ", &engine.Request{Prompt: "Once upon a time"}, &engine.Request{Prompt: "Once upon a tide"}, 512, false},
		{"token prompts", &engine.Request{PromptTokens: []int{1, 2, 3, 4}}, &engine.Request{PromptTokens: []int{1, 2, 3, 5}}, 12, true},
		{"token prompts differ", &engine.Request{PromptTokens: []int{1, 2, 3, 4}}, &engine.Request{PromptTokens: []int{1, 2, 3, 5}}, 16, false},
		{"the same cache key, prompts that differ at once", keyed("codex-1", chat(user("a"))), keyed("codex-1", chat(sys, user("b"))), 512, true},
		{"cache keys differ, prompts agree", keyed("codex-1", chat(sys, user("a"))), keyed("codex-2", chat(sys, user("a"))), 512, false},
		{"a cache key is not a prompt", keyed("x", &engine.Request{Prompt: "y"}), &engine.Request{Prompt: "x"}, 512, false},
	}
	for _, tc := range cases {
		ka, oka := affinityKey(tc.a, tc.n)
		kb, okb := affinityKey(tc.b, tc.n)
		if !oka || !okb || (ka == kb) != tc.same {
			t.Errorf("%s: keys %x %x (ok %v %v), want same=%v", tc.name, ka, kb, oka, okb, tc.same)
		}
	}
	if _, ok := affinityKey(chat(user("x")), -1); ok {
		t.Error("affinity on with a negative prefix length")
	}
	if _, ok := affinityKey(keyed("k", chat(user("x"))), -1); ok {
		t.Error("affinity on with a negative prefix length and a cache key")
	}
}

func TestNewReplica(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
	}{
		{"http://h:8000", "http://h:8000"},
		{"http://h:8000/", "http://h:8000"},
		{"http://h:8000/v1", "http://h:8000"},
		{"https://api.example.com/v1/", "https://api.example.com"},
		{"http://h/proxy/v1", "http://h/proxy"},
		{"ftp://h", ""},
		{"h:8000", ""},
		{"http://", ""},
		{"http://h/?a=1", ""},
	}
	for _, tc := range cases {
		r, err := newReplica(0, tc.in, "")
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: accepted as %q", tc.in, r.base)
		case tc.want != "" && (err != nil || r.base != tc.want):
			t.Errorf("%q: %v, %v; want %q", tc.in, r, err, tc.want)
		}
	}
}

// TestHealthChecks runs the checker against a server that answers as told:
// a failing replica goes down, comes back up, and a server without /health
// is checked on /v1/models with the replica's key.
func TestHealthChecks(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	var models, auth atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(int(status.Load()))
		case "/v1/models":
			models.Add(1)
			if r.Header.Get("Authorization") == "Bearer sk-test" {
				auth.Add(1)
			}
			w.Write([]byte(`{"object":"list","data":[]}`))
		}
	}))
	t.Cleanup(srv.Close)
	// Checks are counted as the engine starts them: a handler may still run
	// for one the engine gave up at Close.
	started := &countingTransport{next: http.DefaultTransport}
	e, err := New(Options{ID: "m", Kind: VLLM, Replicas: []Replica{{URL: srv.URL, APIKey: "sk-test"}},
		HealthInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Transport: started})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	healthy := func(want bool) func() bool {
		return func() bool { return e.Replicas()[0].Healthy == want }
	}
	status.Store(http.StatusServiceUnavailable)
	wait.For(t, "the replica down on 503", healthy(false))
	if st := e.Replicas()[0]; !strings.Contains(st.LastError, "503") {
		t.Errorf("last error %q", st.LastError)
	}
	status.Store(http.StatusOK)
	wait.For(t, "the replica up again", healthy(true))
	status.Store(http.StatusNotFound)
	if !wait.Until(func() bool { return auth.Load() >= 2 }) {
		t.Fatalf("no authorised /v1/models checks (%d checks)", models.Load())
	}
	if !e.Replicas()[0].Healthy {
		t.Error("down although /v1/models answers")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	n := started.n.Load()
	// Five health intervals pass. A real sleep: the check is that nothing
	// happens, which no signal marks, and the checker's requests go over
	// real sockets, out of synctest's reach.
	time.Sleep(50 * time.Millisecond)
	if started.n.Load() != n {
		t.Error("health checks went on after Close")
	}
}

// countingTransport counts the requests it is given.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}
