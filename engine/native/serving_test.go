package native

import (
	"bytes"
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
	"time"

	"rill/engine"
	"rill/engine/quant"
	"rill/engine/sched"
	"rill/engine/testmodel"
	"rill/internal/wait"
)

// TestOverloaded: past MaxSeqs running and MaxQueuedRequests waiting,
// Generate refuses with ErrOverloaded; every request it took completes.
func TestOverloaded(t *testing.T) {
	t.Parallel()
	// Streams hold every event: unread requests must not be paused (a
	// paused request gives up its running slot).
	e := newTestEngine(t, Options{MaxSeqs: 1, MaxQueuedRequests: 1, StreamBuffer: 256})
	id := e.Models()[0].ID
	// Slow steps keep the first request running while the others arrive:
	// a real pause per step, which paces the engine rather than waiting
	// for it.
	e.beforeForward = func(*sched.Plan) { time.Sleep(time.Millisecond) }
	var streams []engine.Stream
	for i := range 4 {
		st, err := e.Generate(context.Background(), &engine.Request{Model: id, Prompt: fmt.Sprintf("The fox %d", i), MaxTokens: 200, IgnoreEOS: true})
		if i < 2 {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			streams = append(streams, st)
			continue
		}
		if !errors.Is(err, engine.ErrOverloaded) {
			t.Fatalf("request %d beyond the queue: err = %v, want ErrOverloaded", i, err)
		}
	}
	for i, st := range streams {
		n := 0
		for {
			ev, err := engine.Recv(st)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("admitted request %d: %v", i, err)
			}
			if ev.Final {
				n = ev.Stats.CompletionTokens
			}
		}
		if n != 200 {
			t.Fatalf("admitted request %d completed %d tokens", i, n)
		}
	}
	// With the queue empty again, requests are taken.
	collect(t, e, &engine.Request{Model: id, Prompt: "again", MaxTokens: 2})
}

// TestSlowConsumerIsPaused: a request whose consumer stops reading is
// paused once its stream holds StreamBuffer events: it is not computed any
// more, while another request streams on, and it resumes, with the same
// tokens, when its consumer reads again.
func TestSlowConsumerIsPaused(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{StreamBuffer: 8})
	id := e.Models()[0].ID
	want := collect(t, e, &engine.Request{Model: id, Prompt: "The slow reader", MaxTokens: 120, IgnoreEOS: true}).text[0]
	wantFast := collect(t, e, &engine.Request{Model: id, Prompt: "The fast reader", MaxTokens: 120, IgnoreEOS: true}).text[0]

	slowPrompt := e.tok.Encode("The slow reader", encodeWithBOS)
	isSlow := func(seq *sched.Sequence) bool {
		for i, id := range slowPrompt {
			if int(seq.Tokens[i]) != id {
				return false
			}
		}
		return true
	}
	var watching atomic.Bool
	var computedWhilePaused atomic.Int32
	e.beforeForward = func(p *sched.Plan) {
		for _, sc := range p.Seqs {
			if watching.Load() && isSlow(sc.Seq) {
				computedWhilePaused.Add(1)
			}
		}
	}
	slow, err := e.Generate(context.Background(), &engine.Request{Model: id, Prompt: "The slow reader", MaxTokens: 120, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the slow request is paused with a full stream.
	if !wait.Until(func() bool { return e.Stats().Paused > 0 }) {
		t.Fatalf("the unread request was never paused: %+v", e.Stats())
	}
	watching.Store(true)
	queued := slow.(*engine.Queue).Len()
	if queued != 8 {
		t.Fatalf("the paused request's stream holds %d events, want its bound of 8", queued)
	}

	// Another request streams to its end meanwhile.
	fast := collect(t, e, &engine.Request{Model: id, Prompt: "The fast reader", MaxTokens: 120, IgnoreEOS: true})
	if fast.text[0] != wantFast {
		t.Fatalf("the other request gave %q, alone %q", fast.text[0], wantFast)
	}
	if n := computedWhilePaused.Load(); n != 0 {
		t.Fatalf("the paused request was computed in %d steps", n)
	}
	if got := slow.(*engine.Queue).Len(); got != queued {
		t.Fatalf("the paused request's stream grew from %d to %d events", queued, got)
	}
	steps := e.Stats().Steps
	// A real sleep: the check is that nothing happens in a window, which
	// no signal can say.
	time.Sleep(20 * time.Millisecond)
	if e.Stats().Steps != steps {
		t.Fatal("the engine kept stepping with only a paused request")
	}
	watching.Store(false)

	// Reading resumes it; its text is what it is alone.
	var b strings.Builder
	for {
		ev, err := engine.Recv(slow)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(ev.Text)
	}
	if b.String() != want {
		t.Fatalf("after the pause: %q, want %q", b.String(), want)
	}
}

// TestStepPanicFailsRunningRequests: a panic in a step fails the requests
// that were running with an error, is logged with its stack, frees their
// blocks, and the engine serves the next request.
func TestStepPanicFailsRunningRequests(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	e := newTestEngine(t, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	id := e.Models()[0].ID
	poison := []int32{1, 77, 78, 79, 80}
	e.beforeForward = func(p *sched.Plan) {
		for _, sc := range p.Seqs {
			if len(sc.Seq.Tokens) >= len(poison) && slices.Equal(sc.Seq.Tokens[:len(poison)], poison) {
				panic("poisoned step")
			}
		}
	}
	st, err := e.Generate(context.Background(), &engine.Request{Model: id, PromptTokens: []int{1, 77, 78, 79, 80}, MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			t.Fatal("the poisoned request completed")
		}
		if err != nil {
			if !errors.Is(err, errInternal) || !strings.Contains(err.Error(), "poisoned step") {
				t.Fatalf("the poisoned request failed with %v", err)
			}
			break
		}
	}
	r := collect(t, e, &engine.Request{Model: id, Prompt: "Once upon a time", MaxTokens: 8})
	if r.final[0].Stats.CompletionTokens != 8 {
		t.Fatalf("after the panic: %+v", r.final[0].Stats)
	}
	waitIdle(t, e)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "engine step panicked") || !strings.Contains(logs.String(), "runtime/debug.Stack") {
		t.Fatalf("the panic was not logged with its stack:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitIdle waits until the engine holds no block and runs nothing.
func waitIdle(t *testing.T, e *Engine) {
	t.Helper()
	if !wait.Until(func() bool {
		s := e.Stats()
		return s.Cache.BlocksUsed == 0 && s.Running == 0 && s.Waiting == 0 && s.Paused == 0
	}) {
		t.Fatalf("the engine still holds work: %+v", e.Stats())
	}
}

// TestLifecycle: requests wait for Run; Close fails the ones in flight
// and every later Generate with ErrClosed.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	m := loadSpec(t, testmodel.Target(quant.F32))
	e, err := New(m, testCompute(t), Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	id := e.Models()[0].ID
	type result struct {
		st  engine.Stream
		err error
	}
	got := make(chan result, 1)
	go func() {
		st, err := e.Generate(context.Background(), &engine.Request{Model: id, Prompt: "The fox", MaxTokens: 1000, IgnoreEOS: true})
		got <- result{st, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("Generate returned before Run: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	ran := make(chan error, 1)
	go func() { ran <- e.Run(context.Background()) }()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := engine.Recv(r.st); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background()); err == nil {
		t.Fatal("a second Run was accepted")
	}
	e.Close()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for {
		_, err := engine.Recv(r.st)
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrClosed) && !errors.Is(err, io.EOF) {
			t.Fatalf("a request in flight at Close ended with %v", err)
		}
		break
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Model: id, Prompt: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Generate after Close: %v", err)
	}
}

// TestContinuousUsage: with ContinuousUsage every event with output
// carries its choice's counts so far; without it none does.
func TestContinuousUsage(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	drafting := newTestEngine(t, Options{NGram: true})
	id := plain.Models()[0].ID
	for _, tc := range []struct {
		name string
		e    *Engine
		req  engine.Request
	}{
		{"greedy n=2", plain, engine.Request{Model: id, Prompt: repetitive, MaxTokens: 30, N: 2, IgnoreEOS: true}},
		{"ngram drafting", drafting, engine.Request{Model: id, Prompt: repetitive, MaxTokens: 30, IgnoreEOS: true}},
		{"stop string", plain, engine.Request{Model: id, Prompt: "The fox", MaxTokens: 30, Stop: []string{"e"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, continuous := range []bool{false, true} {
				req := tc.req
				req.ContinuousUsage = continuous
				st, err := tc.e.Generate(context.Background(), &req)
				if err != nil {
					t.Fatal(err)
				}
				last := make([]engine.Stats, req.Choices())
				for {
					ev, err := engine.Recv(st)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if ev.Final {
						checkRunning(t, &last[ev.Choice], ev.Stats, true)
						continue
					}
					if !continuous {
						if ev.Stats != nil {
							t.Fatalf("stats on a non-final event without continuous usage: %+v", ev)
						}
						continue
					}
					if ev.Stats == nil {
						t.Fatalf("continuous usage: an event with output has no stats: %+v", ev)
					}
					checkRunning(t, &last[ev.Choice], ev.Stats, false)
				}
			}
		})
	}
}

// checkRunning checks st against the previous counts of its choice: the
// prompt and cached counts fixed, the others never decreasing.
func checkRunning(t *testing.T, prev *engine.Stats, st *engine.Stats, final bool) {
	t.Helper()
	if st.CachedTokens == nil || (prev.PromptTokens != 0 && (st.PromptTokens != prev.PromptTokens || *st.CachedTokens != *prev.CachedTokens)) {
		t.Fatalf("prompt counts changed: %+v after %+v", st, prev)
	}
	if st.CompletionTokens < prev.CompletionTokens || (!final && st.CompletionTokens == prev.CompletionTokens) {
		t.Fatalf("completion tokens %d after %d", st.CompletionTokens, prev.CompletionTokens)
	}
	if (st.DraftAccepted == nil) != (st.DraftRejected == nil) || (prev.DraftAccepted != nil && st.DraftAccepted == nil) {
		t.Fatalf("draft counters half set: %+v", st)
	}
	if st.DraftAccepted != nil && prev.DraftAccepted != nil &&
		(*st.DraftAccepted < *prev.DraftAccepted || *st.DraftRejected < *prev.DraftRejected) {
		t.Fatalf("draft counters went down: %d/%d after %d/%d", *st.DraftAccepted, *st.DraftRejected, *prev.DraftAccepted, *prev.DraftRejected)
	}
	if st.DraftAccepted != nil && *st.DraftAccepted > st.CompletionTokens {
		t.Fatalf("accepted %d > completion %d", *st.DraftAccepted, st.CompletionTokens)
	}
	*prev = *st
}

// TestForkWhenTheLeaderDrafts: the further choices of a request start even
// when its leader drafts on the step that completes the prompt (a warm
// prompt with one token left to compute and a prediction to draft from).
// They used to wait forever.
func TestForkWhenTheLeaderDrafts(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	prompt := make([]int, 17) // 16 cached after the first request, 1 to compute
	for i := range prompt {
		prompt[i] = 10 + 7*i
	}
	first := collect(t, e, &engine.Request{Model: id, PromptTokens: prompt, MaxTokens: 12, IgnoreEOS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &engine.Request{Model: id, PromptTokens: prompt, MaxTokens: 12, IgnoreEOS: true, N: 3, Prediction: first.text[0]}
	st, err := e.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	text := make([]string, 3)
	var finals int
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d final events: %v", finals, err)
		}
		text[ev.Choice] += ev.Text
		if ev.Final {
			finals++
			if *ev.Stats.CachedTokens != 16 || ev.Stats.DraftAccepted == nil {
				t.Fatalf("choice %d: %+v", ev.Choice, ev.Stats)
			}
		}
	}
	for i, got := range text {
		if got != first.text[0] {
			t.Fatalf("choice %d: %q, want %q (greedy)", i, got, first.text[0])
		}
	}
}

// TestChoicesHoldNoVocabularyMemory: the choices of a request cost no
// vocabulary-sized memory until they run.
func TestChoicesHoldNoVocabularyMemory(t *testing.T) {
	e := newTestEngine(t, Options{})
	r := &request{req: &engine.Request{N: 128, Sampling: engine.Sampling{Temperature: 1}}, draft: draftModel}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 128 {
		e.newChoice(r, i, 1)
	}
	runtime.ReadMemStats(&after)
	vocabBytes := uint64(e.tok.Size()) * 4
	if per := (after.TotalAlloc - before.TotalAlloc) / 128; per >= vocabBytes {
		t.Fatalf("a choice allocates %d bytes before it runs; one vocabulary row is %d", per, vocabBytes)
	}
}
