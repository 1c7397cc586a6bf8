package native

import (
	"testing"

	"rill/engine/model"
)

// TestSizeKV checks how the KV budget is split for models with sliding
// layers: within the budget (the window pool's hole block included),
// never fewer full-layer blocks than one pool of all layers holds, the
// window pool no larger than the full one nor than its sequences need;
// and it logs the tokens each GiB holds (go test -v), the table of the
// documentation.
func TestSizeKV(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	configs := []struct {
		name string
		c    model.Config
	}{
		{"gemma3 1B", model.Config{Layers: 26, HeadsKV: 1, HeadDim: 256, SlidingWindow: 512, SlidingPeriod: 6}},
		{"gemma3 4B", model.Config{Layers: 34, HeadsKV: 4, HeadDim: 256, SlidingWindow: 1024, SlidingPeriod: 6}},
		{"gemma3 27B", model.Config{Layers: 62, HeadsKV: 16, HeadDim: 128, SlidingWindow: 1024, SlidingPeriod: 6}},
		{"gemma2 2B", model.Config{Layers: 26, HeadsKV: 4, HeadDim: 256, SlidingWindow: 4096, SlidingPeriod: 2}},
		{"gpt-oss 20B", model.Config{Layers: 24, HeadsKV: 8, HeadDim: 64, SlidingWindow: 128, SlidingPeriod: 2}},
		{"no window", model.Config{Layers: 16, HeadsKV: 8, HeadDim: 64}},
	}
	for _, cfg := range configs {
		for _, budget := range []int64{gib, 8 * gib} {
			for _, seqs := range []int{64, 4} {
				o := Options{KVCacheBytes: budget, BlockSize: 16, MaxBatchTokens: 512, MaxSeqs: seqs, KVType: model.KVF16}
				per := model.KVBytesPerBlock(&cfg.c, o.KVType, o.BlockSize)
				old := sizeKV(&cfg.c, &Options{KVCacheBytes: budget, FullSlidingKV: true}, per)
				got := sizeKV(&cfg.c, &o, per)
				used := int64(got.blocks) * got.perBlock
				if got.windowBlocks > 0 {
					used += int64(got.windowBlocks+1) * got.windowPerBlock
				}
				split := got.windowBlocks > 0
				switch {
				case used > budget:
					t.Errorf("%s: %d bytes of a budget of %d", cfg.name, used, budget)
				case got.blocks < old.blocks:
					t.Errorf("%s: %d full blocks, fewer than %d in one pool", cfg.name, got.blocks, old.blocks)
				case split && (got.windowBlocks > got.blocks || got.blocks == old.blocks):
					t.Errorf("%s: %d window blocks for %d full ones (one pool: %d)", cfg.name, got.windowBlocks, got.blocks, old.blocks)
				case !split && got != old:
					t.Errorf("%s: not split, but sized %+v rather than %+v", cfg.name, got, old)
				case old.blocks != int(budget/per):
					t.Errorf("%s: FullSlidingKV holds %d blocks, want %d", cfg.name, old.blocks, budget/per)
				}
				t.Logf("| %s | %d GiB | %d | %d | %d | %d |", cfg.name, budget/gib, seqs, old.blocks*16, got.blocks*16, got.windowBlocks*16)
			}
		}
	}
}
