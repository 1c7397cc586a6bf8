package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// BenchmarkMoELayer measures one mixture-of-experts feed-forward of the
// benchmark model's shape (testmodel.BenchMoE: width 1024, 64 experts of
// hidden size 256, 8 used per token) on normalised random rows: a decode
// step (1 token, 8 experts read) and a prompt chunk (128 tokens, every
// expert read once for all its rows). tokens/s is reported. The layer's
// experts (53 MB in Q8_0) may partly stay in a large cache between steps,
// which a whole model's would not.
func BenchmarkMoELayer(b *testing.B) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		s := testmodel.BenchMoE(typ)
		s.Layers = 1
		data, err := testmodel.Bytes(s)
		if err != nil {
			b.Fatal(err)
		}
		f, err := gguf.Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		m, err := Load(f)
		if err != nil {
			b.Fatal(err)
		}
		const maxT = 128
		r := NewRunner(m, be, maxT)
		E := m.Config.Embd
		rng := rand.New(rand.NewPCG(1, 2))
		xn := make([]float32, maxT*E)
		for i := range xn {
			xn[i] = float32(rng.NormFloat64())
		}
		dst := make([]float32, maxT*E)
		for _, T := range []int{1, maxT} {
			b.Run(fmt.Sprintf("%s/T=%d", typ, T), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					// Decode steps take the rows in turn, so that they
					// choose other experts, as a model's tokens do,
					// rather than finding the last step's in cache.
					lo := i % (maxT / T) * T * E
					r.mixture(dst[:T*E], m.layers[0].moe, xn[lo:lo+T*E], T)
					i++
				}
				b.ReportMetric(float64(T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
