package native

import (
	"fmt"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/quant"
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
