package cpu

import (
	"fmt"
	"runtime"
	"syscall"
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

// BenchmarkAttentionDepth measures attention at the depths of long prompts
// on the 245M benchmark model's shape (16 query heads, 4 KV heads, head
// size 64), one thread: "prefill" is one tiled job, tiledChunk prompt
// tokens of one KV head (its 4 query heads each) from position depth on
// (float32; "prefill-bf16" on bf16 dot products, with AVX512_BF16),
// "decode" one token's AttendF16 over all KV heads at position depth. The
// ns/pair metric is ns per (query head, key) pair, comparable across
// depths: work grows with depth, a flat figure means it scales.
func BenchmarkAttentionDepth(b *testing.B) {
	const heads, kv, hd = 16, 4, 64
	group := heads / kv
	for _, depth := range []int{512, 8192, 32768} {
		r := newRand(b, uint64(depth))
		f := newAttnFixture(b, r, attnCase{hd: hd, group: group, kvHeads: kv, n: depth + tiledChunk, bs: 16}, kv, 1)
		if chunk := tiledChunk; hasAVX512 {
			q := randFloats(r, chunk*heads*hd, 1)
			out := make([]float32, len(q))
			start, n := make([]int32, chunk), make([]int32, chunk)
			for t := range n {
				n[t] = int32(depth + t + 1)
			}
			for _, bf16 := range tiledArithmetics() {
				name := "prefill"
				if bf16 {
					name = "prefill-bf16"
				}
				b.Run(fmt.Sprintf("%s/depth=%d", name, depth), func(b *testing.B) {
					tq := tiledQueries{out: out, q: q, stride: heads * hd, gn: group, kvh: 1, table: f.table,
						start: start, n: n, scale: f.scale, assembler: true, bf16: bf16}
					cpu := threadCPU(b)
					for b.Loop() {
						attendTiled(&tq, f.k16, f.v16, f.l)
					}
					pairs := float64(b.N) * float64(chunk*group*(depth+chunk/2))
					b.ReportMetric(b.Elapsed().Seconds()*1e9/pairs, "ns/pair")
					b.ReportMetric(cpu()/pairs, "cpu-ns/pair")
				})
			}
		}
		out := make([]float32, len(f.q))
		b.Run(fmt.Sprintf("decode/depth=%d", depth), func(b *testing.B) {
			cpu := threadCPU(b)
			for b.Loop() {
				attendF16(out, f.q, f.k16, f.v16, f.l, 0, group, f.table, depth+1, f.scale, attnLevel())
			}
			pairs := float64(b.N) * float64(heads*(depth+1))
			b.ReportMetric(b.Elapsed().Seconds()*1e9/pairs, "ns/pair")
			b.ReportMetric(cpu()/pairs, "cpu-ns/pair")
		})
	}
}

// threadCPU locks the benchmark to its thread and returns a function that
// reports the thread's CPU time (ns) since the call: on a shared machine
// time spent waiting for a core does not count, so ratios between runs
// hold better than wall-clock ones.
func threadCPU(b *testing.B) func() float64 {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	now := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
			b.Fatal(err)
		}
		return float64(ru.Utime.Nano() + ru.Stime.Nano())
	}
	t0 := now()
	return func() float64 { return now() - t0 }
}
