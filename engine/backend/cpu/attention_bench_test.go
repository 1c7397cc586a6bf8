package cpu

import (
	"fmt"
	"testing"
)

// attnBenchShapes are attention shapes of real models: query heads, KV
// heads, head size.
var attnBenchShapes = []struct {
	name          string
	heads, kv, hd int
}{
	{"stories260K", 8, 4, 8},
	{"tinyllama-1.1B", 32, 4, 64},
	{"llama3-8B", 32, 8, 128},
}

// BenchmarkAttention measures one token's attention over one layer (every
// KV head and its query heads, in one call on one thread) at context
// lengths 128, 1024 and 4096, in blocks of 16: ns/op is ns per token per
// layer. "generic" is the pure-Go path (RILL_CPU_NOSIMD=1), run up to 1024
// positions.
func BenchmarkAttention(b *testing.B) {
	for _, s := range attnBenchShapes {
		for _, ctx := range []int{128, 1024, 4096} {
			r := newRand(b, uint64(ctx))
			group := s.heads / s.kv
			f := newAttnFixture(b, r, attnCase{hd: s.hd, group: group, kvHeads: s.kv, n: ctx, bs: 16}, s.kv, 1)
			out := make([]float32, len(f.q))
			for _, k := range []struct {
				name string
				simd bool
				f32  bool
			}{{"f16", true, false}, {"f16-generic", false, false}, {"f32", true, true}} {
				if (k.simd && !hasSIMD) || (!k.simd && ctx > 1024) {
					continue
				}
				b.Run(fmt.Sprintf("%s/ctx=%d/%s", s.name, ctx, k.name), func(b *testing.B) {
					for b.Loop() {
						if k.f32 {
							attendF32(out, f.q, f.k32, f.v32, f.l, 0, group, f.table, ctx, f.scale, k.simd)
						} else {
							level := attnGeneric
							if k.simd {
								level = attnLevel()
							}
							attendF16(out, f.q, f.k16, f.v16, f.l, 0, group, f.table, ctx, f.scale, level)
						}
					}
				})
			}
		}
	}
}
