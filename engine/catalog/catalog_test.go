package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
)

// fakeEngine is a loaded model whose requests each run until the test
// finishes them (finish) or their context ends.
type fakeEngine struct {
	id     string
	closed atomic.Bool

	mu   sync.Mutex
	open []*engine.Queue
}

func (f *fakeEngine) Models() []engine.ModelCard {
	return []engine.ModelCard{{ID: f.id, ContextLength: 64}}
}

func (f *fakeEngine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if f.closed.Load() {
		return nil, errors.New("fake: generate after close")
	}
	q := engine.NewQueue(16, nil)
	f.mu.Lock()
	f.open = append(f.open, q)
	f.mu.Unlock()
	context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
	return q, nil
}

// finish ends every request in flight with a final event.
func (f *fakeEngine) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.open {
		q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{}})
		q.End(io.EOF)
	}
	f.open = nil
}

func (f *fakeEngine) Close() error {
	f.closed.Store(true)
	return nil
}

// fakes opens fakeEngines and counts the opens per model.
type fakes struct {
	mu      sync.Mutex
	opens   map[string]int
	engines map[string]*fakeEngine
	delay   time.Duration
	fail    map[string]error
}

func newFakes() *fakes {
	return &fakes{opens: map[string]int{}, engines: map[string]*fakeEngine{}, fail: map[string]error{}}
}

func (fs *fakes) opener(id string) func() (Engine, error) {
	return func() (Engine, error) {
		time.Sleep(fs.delay)
		fs.mu.Lock()
		defer fs.mu.Unlock()
		fs.opens[id]++
		if err := fs.fail[id]; err != nil {
			return nil, err
		}
		e := &fakeEngine{id: id}
		fs.engines[id] = e
		return e, nil
	}
}

func (fs *fakes) engine(id string) *fakeEngine {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.engines[id]
}

func (fs *fakes) catalog(t *testing.T, opts Options, models ...Model) *Catalog {
	t.Helper()
	for i := range models {
		models[i].Open = fs.opener(models[i].ID)
	}
	c, err := New(models, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// run generates one request on model and reads it to its end, finishing
// it at once.
func run(t *testing.T, c *Catalog, fs *fakes, model string) {
	t.Helper()
	st, err := c.Generate(t.Context(), &engine.Request{Model: model, Prompt: "hi"})
	if err != nil {
		t.Fatalf("generate %s: %v", model, err)
	}
	fs.engine(model).finish()
	drain(t, st)
}

func drain(t *testing.T, st engine.Stream) {
	t.Helper()
	for {
		if _, err := engine.Recv(st); err != nil {
			if err != io.EOF {
				t.Fatalf("stream: %v", err)
			}
			return
		}
	}
}

func states(c *Catalog) map[string]string {
	out := map[string]string{}
	for _, m := range c.Models() {
		out[m.ID] = m.State
	}
	return out
}

func loaded(c *Catalog) []string {
	var out []string
	for _, m := range c.Models() {
		if m.State == engine.StateLoaded {
			out = append(out, m.ID)
		}
	}
	return out
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestConcurrentFirstRequestsShareOneLoad(t *testing.T) {
	fs := newFakes()
	fs.delay = 50 * time.Millisecond
	c := fs.catalog(t, Options{}, Model{ID: "a"})
	if got := states(c)["a"]; got != engine.StateUnloaded {
		t.Fatalf("state before any request = %q, want unloaded", got)
	}
	const n = 8
	streams := make(chan engine.Stream, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			st, err := c.Generate(t.Context(), &engine.Request{Model: "a", Prompt: "hi"})
			if err != nil {
				errs <- err
				return
			}
			streams <- st
		})
	}
	eventually(t, "loading state", func() bool { return states(c)["a"] != engine.StateUnloaded })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("generate: %v", err)
	}
	if fs.opens["a"] != 1 {
		t.Errorf("opened %d times, want 1", fs.opens["a"])
	}
	fs.engine("a").finish()
	close(streams)
	for st := range streams {
		drain(t, st)
	}
	if got := states(c)["a"]; got != engine.StateLoaded {
		t.Errorf("state after the load = %q, want loaded", got)
	}
}

func TestFailingLoadAnswersItsRequestsAndOthersServe(t *testing.T) {
	fs := newFakes()
	fs.fail["bad"] = errors.New("tensor blk.0.attn_q.weight is missing")
	c := fs.catalog(t, Options{}, Model{ID: "bad"}, Model{ID: "good"})
	for range 2 { // a second request tries again, and fails again
		_, err := c.Generate(t.Context(), &engine.Request{Model: "bad", Prompt: "hi"})
		if !errors.Is(err, engine.ErrModelLoad) {
			t.Fatalf("error = %v, want ErrModelLoad", err)
		}
	}
	if fs.opens["bad"] != 2 {
		t.Errorf("bad opened %d times, want 2", fs.opens["bad"])
	}
	run(t, c, fs, "good")
	for _, m := range c.Models() {
		switch m.ID {
		case "bad":
			if m.State != engine.StateUnloaded || m.LoadError == "" {
				t.Errorf("bad: state %q, load error %q; want unloaded with the error", m.State, m.LoadError)
			}
		case "good":
			if m.State != engine.StateLoaded || m.LoadError != "" {
				t.Errorf("good: state %q, load error %q; want loaded, no error", m.State, m.LoadError)
			}
		}
	}
	lc := c.Lifecycle()
	if lc[0].LoadFailures != 2 || lc[1].Loads != 1 {
		t.Errorf("lifecycle = %+v, want 2 failures of bad and 1 load of good", lc)
	}
}

func TestUnknownModel(t *testing.T) {
	fs := newFakes()
	c := fs.catalog(t, Options{}, Model{ID: "a"})
	if _, err := c.Generate(t.Context(), &engine.Request{Model: "b"}); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("error = %v, want ErrUnknownModel", err)
	}
}

func TestTTLUnloadsIdleModels(t *testing.T) {
	fs := newFakes()
	c := fs.catalog(t, Options{TTL: 40 * time.Millisecond},
		Model{ID: "idle"}, Model{ID: "busy"}, Model{ID: "forever", TTL: -1}, Model{ID: "pinned", Pinned: true})
	if err := c.LoadPinned(t.Context()); err != nil {
		t.Fatal(err)
	}
	run(t, c, fs, "idle")
	run(t, c, fs, "forever")
	st, err := c.Generate(t.Context(), &engine.Request{Model: "busy", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "idle's unload", func() bool { return states(c)["idle"] == engine.StateUnloaded })
	time.Sleep(100 * time.Millisecond) // well past the TTL for the others
	want := map[string]string{"idle": engine.StateUnloaded, "busy": engine.StateLoaded,
		"forever": engine.StateLoaded, "pinned": engine.StateLoaded}
	if got := states(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	if !fs.engine("idle").closed.Load() {
		t.Error("idle's engine was not closed")
	}
	fs.engine("busy").finish()
	drain(t, st)
	eventually(t, "busy's unload once its stream ended", func() bool { return states(c)["busy"] == engine.StateUnloaded })
	if got := c.Lifecycle()[0].Unloads[engine.UnloadIdle]; got != 1 {
		t.Errorf("idle unloads of idle = %d, want 1", got)
	}
}

func TestCapAndMemoryEvictLeastRecentlyUsed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		pinned string
		uses   []string
		loaded []string
		err    string // the last use fails with ErrModelLoad
	}{
		{name: "cap", opts: Options{MaxLoaded: 2}, uses: []string{"a", "b", "a", "c"}, loaded: []string{"a", "c"}},
		{name: "cap one", opts: Options{MaxLoaded: 1}, uses: []string{"a", "b", "c"}, loaded: []string{"c"}},
		{name: "memory", opts: Options{MemoryBudget: 250}, uses: []string{"a", "b", "c", "b", "a"}, loaded: []string{"b", "a"}},
		{name: "no limits", uses: []string{"a", "b", "c"}, loaded: []string{"a", "b", "c"}},
		{name: "pinned stays", opts: Options{MaxLoaded: 2}, pinned: "a", uses: []string{"b", "a", "c"}, loaded: []string{"a", "c"}},
		{name: "pinned leaves no room", opts: Options{MaxLoaded: 1}, pinned: "a", uses: []string{"b"}, loaded: []string{"a"}, err: "no room"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakes()
			var models []Model
			for _, id := range []string{"a", "b", "c"} {
				models = append(models, Model{ID: id, Size: 100, Pinned: id == tc.pinned})
			}
			c := fs.catalog(t, tc.opts, models...)
			if err := c.LoadPinned(t.Context()); err != nil {
				t.Fatal(err)
			}
			for i, id := range tc.uses {
				if i == len(tc.uses)-1 && tc.err != "" {
					_, err := c.Generate(t.Context(), &engine.Request{Model: id, Prompt: "hi"})
					if !errors.Is(err, engine.ErrModelLoad) || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("error = %v, want ErrModelLoad saying %q", err, tc.err)
					}
					continue
				}
				run(t, c, fs, id)
				time.Sleep(time.Millisecond) // distinct use times
			}
			got := loaded(c)
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.loaded))
			if !slices.Equal(got, want) {
				t.Errorf("loaded %v, want %v", got, want)
			}
			for id, e := range fs.engines {
				if e.closed.Load() == slices.Contains(want, id) {
					t.Errorf("engine of %s closed = %v, want %v", id, e.closed.Load(), !slices.Contains(want, id))
				}
			}
		})
	}
}

func TestUnloadWaitsForStreamsOrCancelsAfterGrace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		finish bool // the test finishes the stream during the grace
	}{
		{name: "finished within grace", grace: 5 * time.Second, finish: true},
		{name: "cancelled after grace", grace: 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakes()
			c := fs.catalog(t, Options{Grace: tc.grace}, Model{ID: "a"})
			st, err := c.Generate(t.Context(), &engine.Request{Model: "a", Prompt: "hi"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- c.UnloadModel(context.Background(), "a") }()
			select {
			case err := <-done:
				t.Fatalf("unload returned (%v) while a stream ran", err)
			case <-time.After(20 * time.Millisecond):
			}
			if fs.engine("a").closed.Load() {
				t.Fatal("engine closed while a stream ran")
			}
			if tc.finish {
				fs.engine("a").finish()
				drain(t, st)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !tc.finish {
				if took := time.Since(start); took < tc.grace {
					t.Errorf("unload took %v, less than the grace %v", took, tc.grace)
				}
				// The client did not cancel: the stream says why it ends.
				if _, err := engine.Recv(st); !errors.Is(err, engine.ErrModelUnloaded) || errors.Is(err, context.Canceled) {
					t.Errorf("cut stream ended with %v, want engine.ErrModelUnloaded and not context.Canceled", err)
				}
			}
			if !fs.engine("a").closed.Load() || states(c)["a"] != engine.StateUnloaded {
				t.Error("model not unloaded")
			}
			if got := c.Lifecycle()[0].Unloads[engine.UnloadOperator]; got != 1 {
				t.Errorf("operator unloads = %d, want 1", got)
			}
			run(t, c, fs, "a") // and it loads again
			if fs.opens["a"] != 2 {
				t.Errorf("opens = %d, want 2", fs.opens["a"])
			}
		})
	}
}

func TestWaitingRequestHonoursItsContext(t *testing.T) {
	fs := newFakes()
	fs.delay = 200 * time.Millisecond
	c := fs.catalog(t, Options{}, Model{ID: "a"})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Generate(ctx, &engine.Request{Model: "a", Prompt: "hi"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the context's", err)
	}
	// The load goes on for later requests.
	eventually(t, "the load", func() bool { return states(c)["a"] == engine.StateLoaded })
	if fs.opens["a"] != 1 {
		t.Errorf("opens = %d, want 1", fs.opens["a"])
	}
}
