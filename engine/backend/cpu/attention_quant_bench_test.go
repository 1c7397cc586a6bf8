package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// BenchmarkAttentionQuant measures attention over F16, Q8_0 and Q4_0
// caches on one thread, at the 245M bench model's shape (16 query heads
// over 4 KV heads of 64) in blocks of 16: "decode" is one token at depth
// 2048 or 8192 (ns/op per token per layer), "prompt" is a 512-token
// prompt (ns/op per prompt per layer).
func BenchmarkAttentionQuant(b *testing.B) {
	const heads, kvh, hd, bs = 16, 4, 64, 16
	be := New(Options{Threads: 1})
	defer be.Close()
	for _, c := range []struct {
		name   string
		depth  int
		prompt int
	}{{"decode/depth=2048", 2048, 1}, {"decode/depth=8192", 8192, 1}, {"prompt/n=512", 0, 512}} {
		n := c.depth + c.prompt
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		randn := func(m int) []float32 {
			x := make([]float32, m)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			return x
		}
		l := tensor.KVLayout{Blocks: (n + bs - 1) / bs, BlockSize: bs, Heads: kvh, HeadDim: hd}
		table := make([]int32, l.Blocks)
		for i := range table {
			table[i] = int32(i)
		}
		pos, seq := make([]int32, n), make([]int32, n)
		for i := range pos {
			pos[i] = int32(i)
		}
		all := tensor.Paging{Pos: pos, Seq: seq, Tables: [][]int32{table}, Prompt: []int32{int32(n)}}
		k, v := randn(n*kvh*hd), randn(n*kvh*hd)
		q := randn(c.prompt * heads * hd)
		out := make([]float32, len(q))
		pg := tensor.Paging{Pos: pos[c.depth:], Seq: seq[c.depth:], Tables: all.Tables, Prompt: []int32{int32(n)}}
		at := tensor.Attention{Heads: heads, Scale: float32(1 / math.Sqrt(hd))}
		for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0} {
			kv, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: typ, Layout: l})
			if err != nil {
				b.Fatal(err)
			}
			if err := be.StoreKV(kv, 0, k, v, all); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s", c.name, typ), func(b *testing.B) {
				for b.Loop() {
					if err := be.Attention(out, q, kv, 0, at, pg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
