package native

import (
	"fmt"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/sched"
	"rill/engine/testmodel"
)

// windowRun is what one engine answered to the requests of
// TestSlidingWindowCache, in a comparable form.
type windowRun struct {
	texts  []string
	cached []float64
	prompt []int
}

// TestSlidingWindowCache checks that a model with sliding-window layers
// (windows of 8 tokens, prompts of over ten windows) answers the same with
// its sliding layers in a window pool as with every position kept, in
// one step or in chunks, on cold prompts, on prefix hits after and before
// the window and with choices that fork, and that cached_tokens counts
// what was reused: all full blocks of a repeated prompt, the shared
// blocks of a prefix.
func TestSlidingWindowCache(t *testing.T) {
	t.Parallel()
	base := strings.Repeat("The river sang a quiet song to the stones. ", 6)
	other := base[:60] + "and then the wind came over the hills with rain."
	for _, spec := range []testmodel.Spec{testmodel.Gemma3(quant.F32), testmodel.GptOss(quant.F32)} {
		for _, budget := range []int{512, 12} {
			t.Run(fmt.Sprintf("%s/budget=%d", spec.Name, budget), func(t *testing.T) {
				t.Parallel()
				run := func(full bool) (windowRun, *Engine) {
					e := startOn(t, loadSpec(t, spec), Options{MaxBatchTokens: budget, FullSlidingKV: full})
					if (e.window != nil) == full {
						t.Fatalf("FullSlidingKV %v: window pool %v", full, e.window != nil)
					}
					id := e.Models()[0].ID
					reqs := []*engine.Request{
						{Model: id, Prompt: base, MaxTokens: 24, IgnoreEOS: true},
						{Model: id, Prompt: base, MaxTokens: 24, IgnoreEOS: true},
						{Model: id, Prompt: other, MaxTokens: 24, IgnoreEOS: true},
						{Model: id, Prompt: base + "Again:", MaxTokens: 20, N: 3, IgnoreEOS: true,
							Sampling: engine.Sampling{Temperature: 1, Seed: seed(5)}},
					}
					var r windowRun
					for _, req := range reqs {
						res := collect(t, e, req)
						r.texts = append(r.texts, res.text...)
						for _, f := range res.final {
							r.cached = append(r.cached, *f.Stats.CachedTokens)
							r.prompt = append(r.prompt, f.Stats.PromptTokens)
						}
					}
					return r, e
				}
				win, e := run(false)
				full, _ := run(true)
				for i := range win.texts {
					if win.texts[i] != full.texts[i] {
						t.Errorf("answer %d with the window pool %q, with full KV %q", i, win.texts[i], full.texts[i])
					}
					if win.cached[i] != full.cached[i] {
						t.Errorf("answer %d: cached %v with the window pool, %v with full KV", i, win.cached[i], full.cached[i])
					}
				}
				p := win.prompt[0]
				if want := float64((p - 1) / 16 * 16); win.cached[1] != want || win.cached[0] != 0 {
					t.Errorf("cached %v then %v of a %d-token prompt, want 0 then %v", win.cached[0], win.cached[1], p, want)
				}
				if win.cached[2] == 0 || win.cached[2] >= win.cached[1] {
					t.Errorf("a prompt sharing the first 60 bytes cached %v tokens", win.cached[2])
				}
				st := e.Stats()
				if st.WindowCache.BlocksUsed != 0 || st.Cache.BlocksUsed != 0 {
					t.Errorf("blocks in use after every request ended: %d and %d in the window pool", st.Cache.BlocksUsed, st.WindowCache.BlocksUsed)
				}
			})
		}
	}
}

// TestSlidingWindowMemory measures the KV memory one long sequence of the
// gemma3 test model (5 of 6 layers sliding over 8 tokens) holds at its
// most, computed in chunks of 16: with the window pool, its sliding layers
// hold at most the 3 blocks of 16 that a chunk and the 7 positions before
// it span, so it holds under half the bytes of full KV (1/6 of the layers
// keep every position, the rest 3 blocks).
func TestSlidingWindowMemory(t *testing.T) {
	t.Parallel()
	spec := testmodel.Gemma3(quant.F32)
	prompt := strings.Repeat("The river sang a quiet song to the stones. ", 12)
	peak := func(full bool) (bytes int64, windowBlocks int) {
		e := startOn(t, loadSpec(t, spec), Options{MaxBatchTokens: 16, FullSlidingKV: full})
		c := &e.model.Config
		per := model.KVBytesPerBlock(c, e.opts.KVType, e.opts.BlockSize)
		fullPer, winPer := model.KVSplitBytesPerBlock(c, e.opts.KVType, e.opts.BlockSize)
		if !full {
			per = fullPer
		}
		e.beforeForward = func(*sched.Plan) {
			b := int64(e.cache.Stats().BlocksUsed) * per
			if e.window != nil {
				w := e.window.Stats().BlocksUsed
				b += int64(w) * winPer
				windowBlocks = max(windowBlocks, w)
			}
			bytes = max(bytes, b)
		}
		collect(t, e, &engine.Request{Model: e.Models()[0].ID, Prompt: prompt, MaxTokens: 40, IgnoreEOS: true})
		return bytes, windowBlocks
	}
	fullBytes, _ := peak(true)
	winBytes, winBlocks := peak(false)
	t.Logf("peak KV bytes of one sequence: %d with full KV, %d with the window pool (%d window blocks)", fullBytes, winBytes, winBlocks)
	if winBlocks == 0 || winBlocks > 3 {
		t.Errorf("the window pool held up to %d blocks, want 1 to 3", winBlocks)
	}
	if 2*winBytes >= fullBytes {
		t.Errorf("peak %d bytes with the window pool, %d with full KV: want under half", winBytes, fullBytes)
	}
}
