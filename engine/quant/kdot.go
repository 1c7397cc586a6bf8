package quant

import "encoding/binary"

// Dot products of K-quant weights with Q8_K activations.
//
// ggml's generic kernels accumulate the integer products of a super-block
// in eight lanes (element k goes to lane k%8), scale each lane by
// d = dw*dx into eight float32 running sums, and add the eight sums in lane
// order at the very end. The integer lane sums are exact in any order; the
// float steps are reproduced here in ggml's order so the results agree to
// the bit with an unfused build of ggml's generic code.

// DotQ4_K returns the dot product of n elements (a multiple of 256) of Q4_K
// weights w with Q8_K activations x, as ggml_vec_dot_q4_K_q8_K_generic
// computes it: per super-block, lane sums of sc*q*qx scaled by dw*dx, minus
// dmin*dx times the sum over 16-element groups of bsums*m. See DotF32 for
// the kernel contract.
func DotQ4_K(n int, w, x []byte) float32 {
	nb := checkDot("DotQ4_K", n, qkK, q4_KBytes, q8_KBytes, w, x)
	var sums [8]float32
	var sumf float32
	for i := range nb {
		wb := (*[q4_KBytes]byte)(w[i*q4_KBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		sc, m := q4KScales((*[12]byte)(wb[4:]))

		var aux [8]int32
		for c := range 4 {
			qs := (*[32]byte)(wb[16+32*c:])
			lo := (*[32]byte)(xb[4+64*c:])
			hi := (*[32]byte)(xb[4+64*c+32:])
			slo, shi := int32(sc[2*c]), int32(sc[2*c+1])
			for k := range 8 {
				var tl, th int32
				for g := k; g < 32; g += 8 {
					q := qs[g]
					tl += int32(q&0x0f) * int32(int8(lo[g]))
					th += int32(q>>4) * int32(int8(hi[g]))
				}
				aux[k] += slo*tl + shi*th
			}
		}
		var sumi int32
		for j := range 16 {
			bsum := int32(int16(binary.LittleEndian.Uint16(xb[260+2*j:])))
			sumi += bsum * int32(m[j/2])
		}

		dx := f32At(xb[:], 0)
		d := f16At(wb[:], 0) * dx
		for k, v := range aux {
			sums[k] += float32(d * float32(v))
		}
		dmin := f16At(wb[:], 2) * dx
		sumf -= float32(dmin * float32(sumi))
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

// DotQ6_K returns the dot product of n elements (a multiple of 256) of Q6_K
// weights w with Q8_K activations x, as ggml_vec_dot_q6_K_q8_K_generic
// computes it: per super-block, lane sums of scale*(q-32)*qx scaled by
// dw*dx. See DotF32 for the kernel contract.
func DotQ6_K(n int, w, x []byte) float32 {
	nb := checkDot("DotQ6_K", n, qkK, q6_KBytes, q8_KBytes, w, x)
	var sums [8]float32
	var a [qkK]int8
	for i := range nb {
		wb := (*[q6_KBytes]byte)(w[i*q6_KBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		q6Decode(wb, &a)

		var aux [8]int32
		for s := range 16 {
			scale := int32(int8(wb[192+s]))
			as := (*[16]int8)(a[16*s:])
			q8 := (*[16]byte)(xb[4+16*s:])
			for k := range 8 {
				t := int32(as[k])*int32(int8(q8[k])) + int32(as[k+8])*int32(int8(q8[k+8]))
				aux[k] += scale * t
			}
		}

		d := f16At(wb[:], 208) * f32At(xb[:], 0)
		for k, v := range aux {
			sums[k] += float32(d * float32(v))
		}
	}
	var sumf float32
	for _, s := range sums {
		sumf += s
	}
	return sumf
}
