package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/native/cpurun"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/engine/upstream"
	"rill/internal/wait"
	"rill/service"
)

// nativeEngine starts the native engine on the embedded test model.
func nativeEngine(t testing.TB, id string) *native.Engine {
	t.Helper()
	data, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	e, err := native.New(m, cpurun.New(cpu.Options{Threads: 1}), native.Options{ID: id, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	go e.Run(context.Background()) // Close stops it
	t.Cleanup(func() { e.Close() })
	return e
}

// gate wraps a replica's handler: it counts generation requests, can hold
// new ones before their first byte (until the connection dies), and slows
// every write down so that streams are still running when the test acts.
type gate struct {
	h        http.Handler
	delay    time.Duration
	hold     atomic.Bool
	held     atomic.Int32
	requests atomic.Int32
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.h.ServeHTTP(w, r)
		return
	}
	g.requests.Add(1)
	if g.hold.Load() {
		g.held.Add(1)
		<-r.Context().Done()
		return
	}
	g.h.ServeHTTP(&slowWriter{ResponseWriter: w, delay: g.delay}, r)
}

type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
}

func (s *slowWriter) Write(p []byte) (int, error) {
	// A real sleep: it paces a real replica's stream so that the test can
	// kill the replica mid-stream; it waits for nothing to happen.
	time.Sleep(s.delay)
	return s.ResponseWriter.Write(p)
}

func (s *slowWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// result is one client stream's outcome.
type result struct {
	answer
	err error
}

// TestRillBehindRill runs rill in front of two real rills (the service over
// the native engine, on loopback) and kills one under load. Streams running
// on it end with an error event; requests it held before their first byte
// are retried on the other replica and complete; later requests go to the
// survivor. The usage the client sees is the upstream rill's, passed through.
func TestRillBehindRill(t *testing.T) {
	t.Parallel()
	native := nativeEngine(t, "tiny")
	gates := []*gate{{delay: 3 * time.Millisecond}, {delay: 3 * time.Millisecond}}
	var urls []string
	var servers []*http.Server
	for _, g := range gates {
		g.h = service.New(service.Options{Engine: native, Logger: discard})
		u, srv := serve(t, g)
		urls, servers = append(urls, u), append(servers, srv)
	}
	e, err := upstream.New(upstream.Options{ID: "tiny", Kind: upstream.Rill, Logger: discard,
		Replicas:       []upstream.Replica{{URL: urls[0]}, {URL: urls[1]}},
		HealthInterval: 50 * time.Millisecond, MaxImbalance: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	url := front(t, e)

	chat := func(prompt string, maxTokens int, stream bool) string {
		return fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":%q}],"max_tokens":%d,"ignore_eos":true,"temperature":0,"stream":%v%s}`,
			prompt, maxTokens, stream, map[bool]string{true: `,"stream_options":{"include_usage":true}`}[stream])
	}
	// Find a prompt that affinity sends to each replica.
	prompts := make([]string, 2)
	for k := 0; prompts[0] == "" || prompts[1] == ""; k++ {
		if k == 64 {
			t.Fatal("affinity sent 64 prompts to one replica")
		}
		p := fmt.Sprintf("Tell me story number %d.", k)
		before := [2]int32{gates[0].requests.Load(), gates[1].requests.Load()}
		if got := post(t, url, "/v1/chat/completions", chat(p, 1, false)); got.status != http.StatusOK {
			t.Fatalf("probe: status %d: %s", got.status, got.body)
		}
		for i, g := range gates {
			if g.requests.Load() > before[i] && prompts[i] == "" {
				prompts[i] = p
			}
		}
	}
	// The same prompt goes to the same replica again.
	before := gates[0].requests.Load()
	post(t, url, "/v1/chat/completions", chat(prompts[0], 1, false))
	if gates[0].requests.Load() != before+1 {
		t.Fatal("affinity: a prompt changed replicas")
	}

	// Long streams on both replicas, each past its first token.
	const long = 150
	var wg sync.WaitGroup
	stream := func(prompt string, maxTokens int, out *result, started chan<- struct{}) {
		defer wg.Done()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(chat(prompt, maxTokens, true)))
		if err != nil {
			out.err = err
			close(started)
			return
		}
		defer resp.Body.Close()
		out.status = resp.StatusCode
		pr := &firstContent{r: resp.Body, started: started}
		out.events, out.done = readSSE(t, pr)
		pr.signal()
	}
	running := make([]result, 5)
	for i := range running {
		started := make(chan struct{})
		wg.Add(1)
		go stream(prompts[min(i/3, 1)], long, &running[i], started) // 3 on replica 0, 2 on replica 1
		<-started
	}
	// Requests held by replica 0 before their first byte.
	gates[0].hold.Store(true)
	held := make([]result, 3)
	for i := range held {
		wg.Add(1)
		go stream(prompts[0], 8, &held[i], make(chan struct{}))
	}
	wait.For(t, "3 held requests", func() bool { return gates[0].held.Load() == 3 })
	servedBefore := gates[1].requests.Load()

	servers[0].Close() // kill replica 0, its connections included
	wg.Wait()

	for i, r := range running {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("stream %d: %v, status %d", i, r.err, r.status)
		}
		last := decode(t, r.events[len(r.events)-1])
		if i < 3 {
			// Mid-stream on the killed replica: an error event, no [DONE].
			if r.done || last.Error == nil || last.Error.Code == nil || *last.Error.Code != "upstream_error" {
				t.Errorf("stream %d on the killed replica: done %v, last event %s; want an upstream_error event", i, r.done, r.events[len(r.events)-1])
			}
			continue
		}
		checkUsage(t, fmt.Sprintf("stream %d on the survivor", i), r, long)
	}
	for i, r := range held {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("held request %d: %v, status %d", i, r.err, r.status)
		}
		checkUsage(t, fmt.Sprintf("held request %d", i), r, 8)
	}
	if got := gates[1].requests.Load() - servedBefore; got != 3 {
		t.Errorf("the survivor got %d of the 3 held requests", got)
	}

	// Later requests, even those that prefer the dead replica, go to the survivor.
	if st := e.Replicas(); st[0].Healthy || !st[1].Healthy {
		t.Errorf("replica states %+v: want the killed one down", st)
	}
	before = gates[1].requests.Load()
	for range 2 {
		if got := post(t, url, "/v1/chat/completions", chat(prompts[0], 4, false)); got.status != http.StatusOK {
			t.Fatalf("after the kill: status %d: %s", got.status, got.body)
		}
	}
	if got := gates[1].requests.Load() - before; got != 2 {
		t.Errorf("the survivor got %d of 2 later requests", got)
	}
}

// checkUsage checks a completed stream: [DONE], completion tokens as asked
// (ignore_eos), and a prefix-cache measurement as the native engine makes.
func checkUsage(t *testing.T, what string, r result, completion int) {
	t.Helper()
	if !r.done {
		t.Errorf("%s: no [DONE]; last event %s", what, r.events[len(r.events)-1])
		return
	}
	var u struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	raw := decode(t, r.events[len(r.events)-1]).Usage
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("%s: usage %s: %v", what, raw, err)
	}
	if u.CompletionTokens != completion || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens ||
		u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens >= u.PromptTokens {
		t.Errorf("%s: usage %s, want %d completion tokens and a cache measurement", what, raw, completion)
	}
	if n := len([]rune(texts(t, r.answer)[0])); n == 0 {
		t.Errorf("%s: no text", what)
	}
}

// contentDelta matches a chat chunk's non-empty content delta (the opening
// chunk's delta has a role first and empty content).
var contentDelta = regexp.MustCompile(`"delta":\{"content":"[^"]`)

// firstContent passes a stream through and closes started at its first
// content delta (or at the end).
type firstContent struct {
	r       interface{ Read([]byte) (int, error) }
	started chan<- struct{}
	once    sync.Once
}

func (f *firstContent) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if contentDelta.Match(p[:n]) {
		f.signal()
	}
	return n, err
}

func (f *firstContent) signal() { f.once.Do(func() { close(f.started) }) }
