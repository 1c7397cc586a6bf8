package cpu

import (
	"math"

	"rill/engine/quant"
)

// The pieces of AttendF16 in plain Go, the reference the assembly ones
// (attention_amd64.s, internal/gen/attnz.go) are tested against bit for bit,
// and AttendF32.

// roundQuery writes q rounded to half precision as float64 into dst, zero
// past len(q). len(dst) is a multiple of 8 and at least len(q).
func roundQuery(dst []float64, q []float32, simd bool) {
	if simd && len(q) == len(dst) {
		roundF16ToF64SIMD(dst, q)
		return
	}
	for d := range dst {
		var x float32
		if d < len(q) {
			x = quant.RoundF16(q[d])
		}
		dst[d] = float64(x)
	}
}

// halfToF64 converts halves to float64 (exact); len(dst) == len(src), a
// multiple of 8.
func halfToF64(dst []float64, src []uint16, simd bool) {
	if simd {
		halfToF64SIMD(dst, src)
		return
	}
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = float64(quant.F16ToF32(h))
	}
}

// scores sets s[8*p] = float32(q . k_p) * scale for the n rows k_p of rd
// values in k. The dot product keeps four float64 lanes, lane j summing
// elements j, j+4, j+8, ... in order, and adds them as (l0+l1)+(l2+l3).
func scores(s []float32, q, k []float64, n, rd int, scale float32, simd bool) {
	s, q, k = s[:8*(n-1)+1], q[:rd], k[:n*rd]
	if simd {
		scoresSIMD(s, q, k, n, rd, scale)
		return
	}
	for p := range n {
		row := k[p*rd : (p+1)*rd]
		var l0, l1, l2, l3 float64
		for d := 0; d < rd; d += 4 {
			// Products of halves are exact in float64, so whether the
			// compiler fuses them with the add changes nothing.
			l0 += q[d] * row[d]
			l1 += q[d+1] * row[d+1]
			l2 += q[d+2] * row[d+2]
			l3 += q[d+3] * row[d+3]
		}
		s[8*p] = float32((l0+l1)+(l2+l3)) * scale
	}
}

// weights is the softmax bookkeeping of one tile for a block of 8 heads,
// in position order: with x the score (sc[8*p+l] for head l), M the
// running maximum m[l] and S the running sum s[l],
//
//	if x > M: ms = exp(M-x), vs = 1, M = x
//	else:     ms = 1, vs = exp(x-M)
//	S = S*ms + vs
//
// The weight row of position p, w[p*ws:], gets the 8 heads' ms and then
// their vs; flags[p] is set to 1 when a head whose bit is set in lanes has
// a new maximum (others may hold padding).
func weights(sc, w []float32, flags []uint8, m, s []float32, cnt, ws int, lanes uint, simd bool) {
	sc, w, flags, m, s = sc[:8*cnt], w[:(cnt-1)*ws+16], flags[:cnt], m[:8], s[:8]
	if simd {
		weightsSIMD(sc, w, flags, m, s, cnt, ws, lanes)
		return
	}
	for l := range 8 {
		mi, si := m[l], s[l]
		for p := range cnt {
			x, row := sc[8*p+l], w[p*ws:p*ws+16]
			ms, vs := float32(1), float32(1)
			if x > mi {
				ms, mi = expF64Generic(mi-x), x
				if lanes>>l&1 != 0 {
					flags[p] = 1
				}
			} else {
				vs = expF64Generic(x - mi)
			}
			row[l], row[8+l] = ms, vs
			si = float32(si*ms) + vs
		}
		m[l], s[l] = mi, si
	}
}

// values runs the ordered value updates of one tile of cnt positions on
// the accumulators acc (gn rows of rd): per position p and head i, when
// flags[p] marks a new maximum of some head, a = h(a*ms); then
// a = h(fma(v, vs, a)), the fused multiply-add rounded once to float32 and
// h rounding to half precision. Head i's values are cnt rows of rd halves
// from v[voff[i]/2:]; its ms and vs are in the weight rows (see weights),
// at w[p*16*nb + 16*(i/8) + i%8] and 8 further, nb = ceil(gn/8). A head
// without a new maximum has ms = 1, and h(a*1) = a.
//
// Every element's updates form one chain of dependent roundings, so the
// SIMD path interleaves eight slices of 8 elements (or four, for shapes
// the eight-slice kernels do not cover) to overlap their latencies.
func values(acc []float32, v []uint16, w []float32, flags []uint8, voff []int, cnt, rd, gn int, simd bool) {
	ws := 16 * ((gn + 7) / 8)
	w, flags, voff = w[:cnt*ws], flags[:cnt], voff[:gn]
	if simd {
		valuesSIMD(acc, v, w, flags, voff, cnt, rd, gn, false)
		return
	}
	for i := range gn {
		a := acc[i*rd : (i+1)*rd]
		vh := v[voff[i]/2:]
		wo := 16*(i/8) + i%8
		for p := range cnt {
			if flags[p] != 0 {
				ms := w[p*ws+wo]
				for d := range a {
					a[d] = quant.RoundF16(a[d] * ms)
				}
			}
			vs := w[p*ws+wo+8]
			row := vh[p*rd : (p+1)*rd]
			for d := range a {
				a[d] = quant.RoundF16(fmaF32(quant.F16ToF32(row[d]), vs, a[d]))
			}
		}
	}
}

// attendF32 implements AttendF32, one query head at a time.
func attendF32(out, q []float32, k, v []float32, l KVLayout, head, group int, table []int32, n int, scale float32, simd bool) {
	hd, rd := l.HeadDim, l.RowDim()
	tile := min(attnTile, l.BlockSize)
	sc := getAttnScratch()
	defer putAttnScratch(sc)
	acc := sc.acc[:hd]
	vec := simd && hd >= simdMin
	for i := range len(q) / hd {
		kvh := head + i/group
		qi := q[i*hd : (i+1)*hd]
		runMax := float32(math.Inf(-1))
		var sum float32
		clear(acc)
		for p0 := 0; p0 < n; {
			slot := p0 % l.BlockSize
			cnt := min(tile, l.BlockSize-slot, n-p0)
			row := l.Row(int(table[p0/l.BlockSize]), kvh, slot)
			s := sc.sc[:cnt]
			tileMax := float32(math.Inf(-1))
			for p := range s {
				kp := k[row+p*rd:][:hd]
				if vec {
					s[p] = dotF32SIMD(qi, kp) * scale
				} else {
					s[p] = dotF32Generic(qi, kp) * scale
				}
				tileMax = max(tileMax, s[p])
			}
			if tileMax > runMax {
				c := sc.w[:1]
				c[0] = runMax - tileMax
				expF32s(c, simd)
				if vec {
					scaleSIMD(acc, c[0])
				} else {
					scaleGeneric(acc, c[0])
				}
				sum *= c[0]
				runMax = tileMax
			}
			for p := range s {
				s[p] -= runMax
			}
			expF32s(s, simd)
			for p, wt := range s {
				sum += wt
				vp := v[row+p*rd:][:hd]
				if vec {
					axpySIMD(acc, wt, vp)
				} else {
					axpyGeneric(acc, wt, vp)
				}
			}
			p0 += cnt
		}
		inv := 1 / sum
		o := out[i*hd : (i+1)*hd]
		for d := range o {
			o[d] = acc[d] * inv
		}
	}
}

// fmaF32 returns a*b+c rounded once to float32, as VFMADD231PS does. The
// product is exact in float64; the sum is rounded to float64 with its
// exact error (TwoSum), then to odd (an inexact result gets an odd last
// bit), which makes the final rounding to float32 a correct single
// rounding: float64 has more than twice float32's precision plus two bits.
func fmaF32(a, b, c float32) float32 {
	p, z := float64(a)*float64(b), float64(c)
	s := p + z
	if math.IsInf(s, 0) || s != s {
		return float32(s)
	}
	bb := s - p
	e := (p - (s - bb)) + (z - bb)
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}
