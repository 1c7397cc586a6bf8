package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"rill/engine/quant"
)

// refF16Window is refF16 over positions start..n-1 with the scores
// soft-capped as AttendF16Window documents: computed with scale/softCap,
// then softCap*tanh.
func (f *attnFixture) refF16Window(start, n int, softCap float32) []float32 {
	hd, bs := f.l.HeadDim, f.l.BlockSize
	scale := f.scale
	if softCap != 0 {
		scale /= softCap
	}
	out := make([]float32, len(f.q))
	for i := range len(f.q) / hd {
		q := make([]float32, hd)
		for d := range q {
			q[d] = quant.RoundF16(f.q[i*hd+d])
		}
		acc := make([]float32, hd)
		m, s := float32(math.Inf(-1)), float32(0)
		for p := start; p < n; p++ {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			var lanes [4]float64
			for d := range hd {
				lanes[d%4] += float64(q[d]) * float64(quant.F16ToF32(f.k16[row+d]))
			}
			sc := float32((lanes[0]+lanes[1])+(lanes[2]+lanes[3])) * scale
			if softCap != 0 {
				sc = softCap * float32(math.Tanh(float64(sc)))
			}
			ms, vs := float32(1), float32(1)
			if sc > m {
				ms = expF64Generic(m - sc)
				m = sc
				for d := range acc {
					acc[d] = quant.RoundF16(acc[d] * ms)
				}
			} else {
				vs = expF64Generic(sc - m)
			}
			for d := range acc {
				acc[d] = quant.RoundF16(fmaF32(quant.F16ToF32(f.v16[row+d]), vs, acc[d]))
			}
			s = float32(s*ms) + vs
		}
		for d := range acc {
			out[i*hd+d] = acc[d] * (1 / s)
		}
	}
	return out
}

// refF32Window is exact softmax attention over positions start..n-1 of the
// float32 cache with soft-capped scores, in float64.
func (f *attnFixture) refF32Window(start, n int, softCap float32) []float64 {
	hd, bs := f.l.HeadDim, f.l.BlockSize
	out := make([]float64, len(f.q))
	for i := range len(f.q) / hd {
		sc := make([]float64, n)
		m := math.Inf(-1)
		for p := start; p < n; p++ {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			for d := range hd {
				sc[p] += float64(f.q[i*hd+d]) * float64(f.k32[row+d])
			}
			sc[p] *= float64(f.scale)
			if softCap != 0 {
				sc[p] = float64(softCap) * math.Tanh(sc[p]/float64(softCap))
			}
			m = max(m, sc[p])
		}
		var sum float64
		for p := start; p < n; p++ {
			sc[p] = math.Exp(sc[p] - m)
			sum += sc[p]
		}
		for p := start; p < n; p++ {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			for d := range hd {
				out[i*hd+d] += sc[p] / sum * float64(f.v32[row+d])
			}
		}
	}
	return out
}

// windowCases are windows of attnCases: starting at 0, inside the first
// block, at a block boundary, and one position before the end.
func windowCases(n, bs int) []int {
	starts := []int{0, 1, n - 1}
	if n > bs {
		starts = append(starts, bs, n-bs+3)
	}
	var out []int
	for _, s := range starts {
		if s >= 0 && s < n {
			out = append(out, s)
		}
	}
	return out
}

// TestAttendF16Window checks the windowed, soft-capped F16 kernel against
// its definition bit for bit, on the generic and the SIMD path, and that
// with the whole context and no cap it is AttendF16.
func TestAttendF16Window(t *testing.T) {
	t.Parallel()
	for ci, c := range attnCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			r := newRand(t, uint64(300+ci))
			f := newAttnFixture(t, r, c, 3, 4)
			for _, start := range windowCases(c.n, c.bs) {
				for _, softCap := range []float32{0, 1.5, 50} {
					what := fmt.Sprintf("start %d cap %g", start, softCap)
					out := make([]float32, len(f.q))
					if err := AttendF16Window(out, f.q, f.k16, f.v16, f.l, f.head, f.kvHeads, f.table, start, c.n, f.scale, softCap, nil); err != nil {
						t.Fatal(err)
					}
					sameBits(t, what, out, f.refF16Window(start, c.n, softCap))
					generic := make([]float32, len(f.q))
					attendF16Window(generic, f.q, f.k16, f.v16, f.l, f.head, f.group(), f.table, start, c.n, f.scale, softCap, nil, false)
					sameBits(t, what+" generic", generic, out)
					if start == 0 && softCap == 0 {
						sameBits(t, "whole context", out, f.f16(c.n, hasSIMD))
					}
				}
			}
		})
	}
}

// TestAttendF32Window checks the windowed, soft-capped float32 kernel
// against exact attention (the tolerance of TestAttendF32), and that with
// the whole context and no cap it is AttendF32 bit for bit.
func TestAttendF32Window(t *testing.T) {
	t.Parallel()
	for ci, c := range attnCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			r := newRand(t, uint64(400+ci))
			f := newAttnFixture(t, r, c, 2, 2)
			for _, start := range windowCases(c.n, c.bs) {
				for _, softCap := range []float32{0, 1.5} {
					out := make([]float32, len(f.q))
					if err := AttendF32Window(out, f.q, f.k32, f.v32, f.l, f.head, f.kvHeads, f.table, start, c.n, f.scale, softCap, nil); err != nil {
						t.Fatal(err)
					}
					want := f.refF32Window(start, c.n, softCap)
					for i := range want {
						if d := math.Abs(float64(out[i]) - want[i]); d > 1e-5*max(1, math.Abs(want[i])) {
							t.Fatalf("start %d cap %g: out[%d] = %g, exact %g", start, softCap, i, out[i], want[i])
						}
					}
					if start == 0 && softCap == 0 {
						sameBits(t, "whole context", out, f.f32(c.n, useSIMD))
					}
				}
			}
		})
	}
}

// TestAttendWindowErrors: a window outside the positions and a negative
// cap are errors; the checks of AttendF16 apply too.
func TestAttendWindowErrors(t *testing.T) {
	t.Parallel()
	r := newRand(t, 5)
	f := newAttnFixture(t, r, attnCase{8, 2, 1, 20, 16}, 1, 1)
	out := make([]float32, len(f.q))
	for _, c := range []struct {
		start, n int
		softCap  float32
		want     string
	}{
		{-1, 20, 0, "window starts"},
		{20, 20, 0, "window starts"},
		{0, 20, -1, "soft cap"},
		{0, 0, 0, "no positions"},
	} {
		err16 := AttendF16Window(out, f.q, f.k16, f.v16, f.l, f.head, f.kvHeads, f.table, c.start, c.n, f.scale, c.softCap, nil)
		err32 := AttendF32Window(out, f.q, f.k32, f.v32, f.l, f.head, f.kvHeads, f.table, c.start, c.n, f.scale, c.softCap, nil)
		for _, err := range []error{err16, err32} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("start %d n %d cap %g: err = %v, want %q", c.start, c.n, c.softCap, err, c.want)
			}
		}
	}
}
