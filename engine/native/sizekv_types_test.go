package native

import (
	"fmt"
	"testing"

	"rill/engine/model"
)

// TestSizeKVTypes: a budget holds as many tokens as its bytes divided by
// a token's keys and values of every layer, at 4 bytes a value for f32,
// 2 for f16, 34 per 32 for q8_0 and 18 per 32 for q4_0; and it logs the
// tokens each GiB holds per type (go test -v), the table of the
// documentation.
func TestSizeKVTypes(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	configs := []struct {
		name string
		c    model.Config
	}{
		{"rill-bench-245m", model.Config{Layers: 22, HeadsKV: 4, HeadDim: 64}},
		{"Llama-3.2-1B", model.Config{Layers: 16, HeadsKV: 8, HeadDim: 64}},
		{"Llama-3.1-8B", model.Config{Layers: 32, HeadsKV: 8, HeadDim: 128}},
	}
	types := []struct {
		typ        model.KVType
		num, denom int64 // bytes per value: num/denom
	}{
		{model.KVF32, 4, 1}, {model.KVF16, 2, 1}, {model.KVQ8_0, 34, 32}, {model.KVQ4_0, 18, 32},
	}
	for _, cfg := range configs {
		row := "| " + cfg.name + " |"
		for _, ty := range types {
			o := Options{KVCacheBytes: gib, BlockSize: 16, MaxBatchTokens: 512, MaxSeqs: 64, KVType: ty.typ}
			per := model.KVBytesPerBlock(&cfg.c, o.KVType, o.BlockSize)
			values := int64(cfg.c.Layers) * 2 * int64(cfg.c.HeadsKV) * int64(cfg.c.HeadDim) // one token's
			if want := values * ty.num / ty.denom * 16; per != want {
				t.Errorf("%s %v: %d bytes per block, want %d", cfg.name, ty.typ, per, want)
			}
			got := sizeKV(&cfg.c, &o, per)
			if got.blocks != int(gib/per) {
				t.Errorf("%s %v: %d blocks in 1 GiB, want %d", cfg.name, ty.typ, got.blocks, gib/per)
			}
			row += fmt.Sprintf(" %d |", got.blocks*16)
		}
		t.Log(row)
	}
}
