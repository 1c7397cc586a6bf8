package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/sched"
	"rill/engine/testmodel"
	"rill/internal/wait"
)

// newTestEngine starts an engine on the embedded test model.
func newTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	return newTestEngineOf(t, quant.F32, opts)
}

// newTestEngineOf is newTestEngine on the test model with weights of type
// typ.
func newTestEngineOf(t testing.TB, typ quant.Type, opts Options) *Engine {
	t.Helper()
	data, err := testmodel.Bytes(testmodel.Target(typ))
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
	return startOn(t, m, opts)
}

// startOn starts an engine on m (which it takes over, and closes if New
// refuses it) with opts, discarding its log unless opts has a logger, and
// runs it until the test ends.
func startOn(t testing.TB, m *model.Model, opts Options) *Engine {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	e, err := New(m, testCompute(t), opts)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	start(t, e)
	return e
}

// start runs e until the test ends; Close stops it.
func start(t testing.TB, e *Engine) {
	t.Helper()
	ran := make(chan error, 1)
	go func() { ran <- e.Run(context.Background()) }()
	t.Cleanup(func() {
		e.Close()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

var discard = slog.New(slog.DiscardHandler)

type result struct {
	text   []string // per choice
	final  []engine.Event
	events int
}

// collect runs req to the end.
func collect(t testing.TB, e *Engine, req *engine.Request) result {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	n := req.Choices()
	r := result{text: make([]string, n), final: make([]engine.Event, n)}
	var b []strings.Builder = make([]strings.Builder, n)
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		r.events++
		b[ev.Choice].WriteString(ev.Text)
		if ev.Final {
			r.final[ev.Choice] = ev
		}
	}
	for i := range b {
		r.text[i] = b[i].String()
		if !r.final[i].Final {
			t.Fatalf("choice %d has no final event", i)
		}
	}
	return r
}

func seed(s int64) *int64 { return &s }

func TestGenerateBasics(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	r := collect(t, e, &engine.Request{Model: id, Prompt: "Once upon a time", MaxTokens: 10})
	st := r.final[0].Stats
	if st.CompletionTokens != 10 || r.final[0].FinishReason != engine.FinishLength {
		t.Fatalf("completion %d tokens, finish %q; want 10, length", st.CompletionTokens, r.final[0].FinishReason)
	}
	if st.PromptTokens != len(e.tok.Encode("Once upon a time", encodeWithBOS)) {
		t.Fatalf("prompt tokens %d", st.PromptTokens)
	}
	if st.CachedTokens == nil || *st.CachedTokens != 0 {
		t.Fatalf("cold cached tokens %v, want 0", st.CachedTokens)
	}
	if st.DraftAccepted != nil || st.DraftRejected != nil {
		t.Fatal("draft counters set without drafting")
	}
	if r.text[0] == "" {
		t.Fatal("no text")
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{ContextLength: 64})
	id := e.Models()[0].ID
	long := strings.Repeat("the river ran past the hill ", 40)
	tests := []struct {
		name      string
		req       engine.Request
		wantCode  string
		wantModel bool
	}{
		{"unknown model", engine.Request{Model: "gpt-4", Prompt: "hi"}, "", true},
		{"prompt over the context", engine.Request{Model: id, Prompt: long}, engine.CodeContextLengthExceeded, false},
		{"token outside the vocabulary", engine.Request{Model: id, PromptTokens: []int{1, 99999}}, "", false},
		{"empty messages", engine.Request{Model: id, Messages: []engine.Message{}}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), &tc.req)
			if tc.wantModel {
				if !errors.Is(err, engine.ErrUnknownModel) {
					t.Fatalf("err = %v, want ErrUnknownModel", err)
				}
				return
			}
			var re *engine.RequestError
			if !errors.As(err, &re) || re.Code != tc.wantCode {
				t.Fatalf("err = %v, want a RequestError with code %q", err, tc.wantCode)
			}
		})
	}
}

func TestStopAndEOS(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	full := collect(t, e, &engine.Request{Model: id, Prompt: "The fox", MaxTokens: 40})
	text := full.text[0]
	// Stop at the second word of the greedy continuation.
	words := strings.Fields(text)
	if len(words) < 3 {
		t.Fatalf("greedy text too short: %q", text)
	}
	stop := words[2]
	r := collect(t, e, &engine.Request{Model: id, Prompt: "The fox", MaxTokens: 40, Stop: []string{stop}})
	want := text[:strings.Index(text, stop)]
	if r.text[0] != want || r.final[0].FinishReason != engine.FinishStop {
		t.Fatalf("with stop %q: %q (%s), want %q (stop)", stop, r.text[0], r.final[0].FinishReason, want)
	}
}

// TestBatchInvariance: the same request gives the same tokens alone, among 8
// concurrent requests, and with a warm prefix cache; greedy and seeded. F16,
// BF16, Q4_0 and Q8_0 run on the packed kernels where the machine has
// AVX-512, whose arithmetic is their own for every batch size.
func TestBatchInvariance(t *testing.T) {
	t.Parallel()
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			testBatchInvariance(t, typ)
		})
	}
}

func testBatchInvariance(t *testing.T, typ quant.Type) {
	e := newTestEngineOf(t, typ, Options{})
	id := e.Models()[0].ID
	prompts := []string{
		"Once upon a time there was a small river. The river ran past a green hill",
		"The fox and the bird went on together",
		"Tokens stream from the server one by one",
		"A cached prefix is fast",
	}
	reqs := func() []*engine.Request {
		var out []*engine.Request
		for i, p := range prompts {
			out = append(out,
				&engine.Request{Model: id, Prompt: p, MaxTokens: 24, IgnoreEOS: true},
				&engine.Request{Model: id, Prompt: p, MaxTokens: 24, IgnoreEOS: true,
					Sampling: engine.Sampling{Temperature: 0.9, TopP: 0.95, Seed: seed(int64(i))}})
		}
		return out
	}
	// Alone, cold: a fresh engine per request would be cold; here the first
	// pass is cold for each prompt's first request only, so compare alone
	// against concurrent and warm.
	var alone []string
	for _, r := range reqs() {
		alone = append(alone, collect(t, e, r).text[0])
	}
	for round := range 2 { // round 1 runs with every prefix warm
		rs := reqs()
		got := make([]string, len(rs))
		var wg sync.WaitGroup
		for i, r := range rs {
			wg.Go(func() { got[i] = collect(t, e, r).text[0] })
		}
		wg.Wait()
		for i := range rs {
			if got[i] != alone[i] {
				t.Fatalf("round %d request %d: batched %q, alone %q", round, i, got[i], alone[i])
			}
		}
	}
	cold := newTestEngineOf(t, typ, Options{})
	for i, r := range reqs() {
		if got := collect(t, cold, r).text[0]; got != alone[i] {
			t.Fatalf("request %d: on a cold engine %q, warm %q", i, got, alone[i])
		}
	}
}

func TestPrefixCacheCounts(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	prompt := strings.Repeat("The river sang a quiet song to the stones. ", 8)
	first := collect(t, e, &engine.Request{Model: id, Prompt: prompt, MaxTokens: 4})
	second := collect(t, e, &engine.Request{Model: id, Prompt: prompt, MaxTokens: 4})
	p := first.final[0].Stats.PromptTokens
	if c := *first.final[0].Stats.CachedTokens; c != 0 {
		t.Fatalf("cold request cached %v tokens", c)
	}
	want := float64((p - 1) / 16 * 16)
	if c := *second.final[0].Stats.CachedTokens; c != want {
		t.Fatalf("warm request cached %v of %d prompt tokens, want %v", c, p, want)
	}
	if first.text[0] != second.text[0] {
		t.Fatalf("warm output %q differs from cold %q", second.text[0], first.text[0])
	}
}

// TestCacheWritesFromTheFirstEvent: a request's cache writes are in the
// Stats of its first event already (the running usage of a streamed
// request, which Anthropic's message_start carries), and in the final
// Stats of a one-token answer, although the scheduler counts them after
// the step that samples that token.
func TestCacheWritesFromTheFirstEvent(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	for i, maxTokens := range []int{1, 8} {
		prompt := make([]int, 50)
		for j := range prompt {
			prompt[j] = 300 + 10*i + j%7
		}
		st, err := e.Generate(context.Background(), &engine.Request{Model: id, PromptTokens: prompt, MaxTokens: maxTokens,
			IgnoreEOS: true, ContinuousUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		first := true
		for {
			ev, err := engine.Recv(st)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if (first || ev.Final) && (ev.Stats == nil || ev.Stats.CacheWriteTokens == nil || *ev.Stats.CacheWriteTokens != 48) {
				t.Errorf("max_tokens %d: event %+v (first %v) does not report the 48 tokens written", maxTokens, ev, first)
			}
			first = false
		}
	}
}

// TestPrefixCacheWrites pins Stats.CacheWriteTokens: a cold prompt writes
// what the same prompt again reads, its full 16-token blocks but a last
// whole block (whose last token the repeat computes again), the repeat
// writes nothing, and n choices report their one prompt's count each.
func TestPrefixCacheWrites(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	tests := []struct {
		name      string
		tokens, n int
		// written is the cold request's count; cached the repeat's.
		written, cached int
	}{
		{"three blocks and two tokens", 50, 1, 48, 48},
		{"exact multiple: the repeat computes the last block again", 48, 1, 32, 32},
		{"less than a block", 10, 1, 0, 0},
		{"three choices share one prompt", 40, 3, 32, 32},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the cases share one engine's cache. Each
			// prompt starts with a token of its own, so none hits another's.
			prompt := make([]int, tc.tokens)
			for j := range prompt {
				prompt[j] = 100 + 10*i + j%7
			}
			req := &engine.Request{Model: id, PromptTokens: prompt, MaxTokens: 20, IgnoreEOS: true, N: tc.n}
			for round, want := range []struct{ cached, written int }{{0, tc.written}, {tc.cached, 0}} {
				for j, f := range collect(t, e, req).final {
					st := f.Stats
					if st.CacheWriteTokens == nil || st.CachedTokens == nil {
						t.Fatalf("round %d choice %d: cached %v, written %v; want both measured", round, j, st.CachedTokens, st.CacheWriteTokens)
					}
					if *st.CachedTokens != float64(want.cached) || *st.CacheWriteTokens != want.written {
						t.Fatalf("round %d choice %d of a %d-token prompt: cached %v, written %d; want %d, %d",
							round, j, st.PromptTokens, *st.CachedTokens, *st.CacheWriteTokens, want.cached, want.written)
					}
				}
			}
		})
	}
}

func TestChoicesShareThePrompt(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	req := &engine.Request{Model: id, Prompt: "One morning a little fox came down the hill", MaxTokens: 16, N: 4,
		IgnoreEOS: true, Sampling: engine.Sampling{Temperature: 1, Seed: seed(7)}}
	a := collect(t, e, req)
	b := collect(t, e, req)
	if !slices.Equal(a.text, b.text) {
		t.Fatalf("same seed, different choices:\n%q\n%q", a.text, b.text)
	}
	if len(slices.Compact(slices.Clone(a.text))) == 1 {
		t.Fatalf("all %d choices identical: %q", req.N, a.text[0])
	}
	for i, f := range a.final {
		if f.Stats.CompletionTokens != 16 {
			t.Fatalf("choice %d: %d tokens", i, f.Stats.CompletionTokens)
		}
	}
	// Each choice equals the same seed's single-choice run? No: choices use
	// derived seeds. But choice 0 uses the request seed itself.
	one := collect(t, e, &engine.Request{Model: id, Prompt: req.Prompt, MaxTokens: 16, IgnoreEOS: true,
		Sampling: req.Sampling})
	if one.text[0] != a.text[0] {
		t.Fatalf("choice 0 %q differs from the single-choice run %q", a.text[0], one.text[0])
	}
}

// TestForkWithoutBlocks: a further choice that finds no block to fork into
// (a 2-block cache that the 20-token prompt fills) waits with the first
// token it sampled from the prompt's logits, recomputes the prompt once the
// first choice is done, and writes what it writes when it forks.
func TestForkWithoutBlocks(t *testing.T) {
	t.Parallel()
	c := testmodel.Target(quant.F32)
	perBlock := int64(c.Layers) * 2 * 16 * int64(c.KV*(c.Embd/c.Heads)) * 2
	small := newTestEngine(t, Options{KVCacheBytes: 2 * perBlock})
	big := newTestEngine(t, Options{})
	prompt := make([]int, 20)
	for i := range prompt {
		prompt[i] = 10 + 7*i
	}
	req := &engine.Request{Model: small.Models()[0].ID, PromptTokens: prompt, MaxTokens: 6, N: 2, IgnoreEOS: true,
		Sampling: engine.Sampling{Temperature: 1, Seed: seed(3)}}
	var recomputed atomic.Bool
	small.beforeForward = func(p *sched.Plan) {
		for _, sc := range p.Seqs {
			if sc.Seq.Choice() == 1 && sc.Compute > 1 {
				recomputed.Store(true)
			}
		}
	}
	want := collect(t, big, req).text
	got := collect(t, small, req).text
	if !slices.Equal(got, want) {
		t.Fatalf("choices %q, want %q as with room to fork", got, want)
	}
	if !recomputed.Load() {
		t.Fatal("the second choice forked: the test no longer exercises a fork without blocks")
	}
}

// TestCancelFreesBlocks cancels streams mid-generation and checks that the
// engine releases every block and leaves no goroutine behind.
func TestCancelFreesBlocks(t *testing.T) {
	before := runtime.NumGoroutine()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := e.Generate(ctx, &engine.Request{Model: id, Prompt: fmt.Sprintf("The fox %d", i), MaxTokens: 2000, IgnoreEOS: true})
			if err != nil {
				t.Error(err)
				return
			}
			for range 3 + i {
				if _, err := engine.Recv(st); err != nil {
					t.Error(err)
					return
				}
			}
			cancel()
			for {
				if _, err := engine.Recv(st); err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("after cancel: %v", err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if !wait.Until(func() bool {
		s := e.Stats()
		return s.Cache.BlocksUsed == 0 && s.Running == 0 && s.Waiting == 0
	}) {
		t.Fatalf("blocks still used after cancelling everything: %+v", e.Stats())
	}
	e.Close()
	if !wait.Until(func() bool { return runtime.NumGoroutine() <= before }) {
		t.Fatalf("%d goroutines before, %d after Close", before, runtime.NumGoroutine())
	}
}

// TestPreemption runs more work than the KV cache holds (8 sequences of
// about 200 tokens in 384 slots; any two overflow it): sequences are
// preempted and recomputed, and every request still gets its own tokens.
func TestPreemption(t *testing.T) {
	t.Parallel()
	c := testmodel.Target(quant.F32)
	perBlock := int64(c.Layers) * 2 * 16 * int64(c.KV*(c.Embd/c.Heads)) * 2
	small := newTestEngine(t, Options{KVCacheBytes: 24 * perBlock}) // 384 token slots
	big := newTestEngine(t, Options{})
	id := small.Models()[0].ID
	var reqs []*engine.Request
	for i := range 8 {
		reqs = append(reqs, &engine.Request{Model: id, Prompt: fmt.Sprintf("The river %d ran", i), MaxTokens: 200, IgnoreEOS: true})
	}
	want := make([]string, len(reqs))
	for i, r := range reqs {
		want[i] = collect(t, big, r).text[0]
	}
	// Submit everything before reading anything, so that the requests run
	// at once and overflow the cache however fast the engine is.
	streams := make([]engine.Stream, len(reqs))
	for i, r := range reqs {
		st, err := small.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	for i, st := range streams {
		var b strings.Builder
		for {
			ev, err := engine.Recv(st)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(ev.Text)
		}
		if b.String() != want[i] {
			t.Fatalf("request %d under preemption: %q, want %q", i, b.String(), want[i])
		}
	}
	if small.Stats().Preemptions == 0 {
		t.Fatal("no preemption happened; the test no longer exercises it")
	}
}

// TestLongPromptChunks: a prompt longer than the token budget is prefilled
// over several steps and gives the same tokens as in one step.
func TestLongPromptChunks(t *testing.T) {
	t.Parallel()
	small := newTestEngine(t, Options{MaxBatchTokens: 32})
	big := newTestEngine(t, Options{})
	id := small.Models()[0].ID
	prompt := strings.Repeat("The river sang a quiet song to the stones. ", 12)
	req := &engine.Request{Model: id, Prompt: prompt, MaxTokens: 16, IgnoreEOS: true}
	got, want := collect(t, small, req), collect(t, big, req)
	if got.text[0] != want.text[0] {
		t.Fatalf("chunked prefill gave %q, one pass %q", got.text[0], want.text[0])
	}
	if got.final[0].Stats.PromptTokens <= 32 {
		t.Fatalf("prompt of %d tokens does not exceed the 32-token budget", got.final[0].Stats.PromptTokens)
	}
}

// TestChatTemplate: chat messages go through the model's template (ChatML
// for the test model): control tokens parsed, one BOS, the assistant cue last.
func TestChatTemplate(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "Be brief."}, {Role: engine.RoleUser, Content: "Tell me about the river."}}
	ids, _, err := e.promptTokens(context.Background(), &engine.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	want := e.tok.Encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell me about the river.<|im_end|>\n<|im_start|>assistant\n", encodeWithBOS)
	got := make([]int, len(ids))
	for i, id := range ids {
		got[i] = int(id)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("prompt tokens %v, want %v", got, want)
	}
	if got[0] != e.tok.BOS() || slices.Index(got[1:], e.tok.BOS()) >= 0 {
		t.Fatalf("want exactly one BOS, first: %v", got)
	}
	r := collect(t, e, &engine.Request{Model: e.Models()[0].ID, Messages: msgs, MaxTokens: 8})
	if r.final[0].Stats.PromptTokens != len(want) {
		t.Fatalf("prompt tokens %d, want %d", r.final[0].Stats.PromptTokens, len(want))
	}
}
