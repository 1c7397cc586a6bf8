package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestLayerNorm(t *testing.T) {
	// Row [1 2 3 4]: mean 2.5, variance 1.25.
	inv := 1 / math.Sqrt(1.25+1e-5)
	for _, tc := range []struct {
		name    string
		x, w, b []float32
		want    []float64
	}{
		{"unit weight, no bias", []float32{1, 2, 3, 4}, []float32{1, 1, 1, 1}, nil,
			[]float64{-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv}},
		{"weight and bias", []float32{1, 2, 3, 4}, []float32{2, 1, 1, 0}, []float32{0, 1, 0, 7},
			[]float64{-3 * inv, 1 - 0.5*inv, 0.5 * inv, 7}},
		{"two rows normalised apart", []float32{1, 2, 3, 4, 10, 20, 30, 40}, []float32{1, 1, 1, 1}, []float32{0, 0, 0, 0},
			[]float64{-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv, -15 / math.Sqrt(125+1e-5), -5 / math.Sqrt(125+1e-5), 5 / math.Sqrt(125+1e-5), 15 / math.Sqrt(125+1e-5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float32, len(tc.x))
			LayerNorm(got, tc.x, tc.w, tc.b, 1e-5)
			for i := range got {
				if math.Abs(float64(got[i])-tc.want[i]) > 1e-5 {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestGELU(t *testing.T) {
	for _, tc := range []struct {
		x, want, tol float64
	}{
		{0, 0, 0}, {-12, 0, 0}, {12, 12, 0},
		// 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x³))), rounded to half.
		{1, 0.8411920, 1e-3}, {-1, -0.1588080, 1e-3}, {2.5, 2.4844, 2e-3},
	} {
		got := make([]float32, 1)
		GELU(got, []float32{float32(tc.x)})
		if math.Abs(float64(got[0])-tc.want) > tc.tol {
			t.Errorf("gelu(%g) = %g, want %g", tc.x, got[0], tc.want)
		}
	}
}

// refEncoderAttention is attention written from its definition.
func refEncoderAttention(q, k, v []float32, seqStart []int32, heads, headsKV, headDim int, scale float32) []float64 {
	T := int(seqStart[len(seqStart)-1])
	out := make([]float64, T*heads*headDim)
	for s := 0; s+1 < len(seqStart); s++ {
		for t := int(seqStart[s]); t < int(seqStart[s+1]); t++ {
			for h := 0; h < heads; h++ {
				kh := h / (heads / headsKV)
				var w []float64
				var sum float64
				for u := int(seqStart[s]); u < int(seqStart[s+1]); u++ {
					var d float64
					for i := 0; i < headDim; i++ {
						d += float64(q[(t*heads+h)*headDim+i]) * float64(k[(u*headsKV+kh)*headDim+i])
					}
					e := math.Exp(d * float64(scale))
					w = append(w, e)
					sum += e
				}
				for j, u := 0, int(seqStart[s]); u < int(seqStart[s+1]); j, u = j+1, u+1 {
					for i := 0; i < headDim; i++ {
						out[(t*heads+h)*headDim+i] += w[j] / sum * float64(v[(u*headsKV+kh)*headDim+i])
					}
				}
			}
		}
	}
	return out
}

func TestEncoderAttention(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name                    string
		seqStart                []int32
		heads, headsKV, headDim int
	}{
		{"one token", []int32{0, 1}, 2, 2, 4},
		{"one sequence", []int32{0, 7}, 4, 4, 8},
		{"three sequences", []int32{0, 3, 4, 9}, 4, 2, 16},
		{"grouped heads", []int32{0, 5, 11}, 6, 2, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			T := int(tc.seqStart[len(tc.seqStart)-1])
			fill := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			q, k, v := fill(T*tc.heads*tc.headDim), fill(T*tc.headsKV*tc.headDim), fill(T*tc.headsKV*tc.headDim)
			scale := float32(1 / math.Sqrt(float64(tc.headDim)))
			out := make([]float32, len(q))
			b.EncoderAttention(out, q, k, v, tc.seqStart, tc.heads, tc.headsKV, tc.headDim, scale)
			want := refEncoderAttention(q, k, v, tc.seqStart, tc.heads, tc.headsKV, tc.headDim, scale)
			for i := range out {
				if math.Abs(float64(out[i])-want[i]) > 1e-5 {
					t.Fatalf("out[%d] = %g, want %g", i, out[i], want[i])
				}
			}
			if T == 1 {
				// A lone token attends only to itself: its values.
				for i := range out {
					if out[i] != v[i%(tc.headsKV*tc.headDim)] {
						t.Fatalf("lone token: out %v, want its values %v", out, v)
					}
				}
			}
		})
	}
}
