//go:build amd64

package cpu

// Attention kernels in attention_amd64.s and attnvalues_amd64.s. The
// wrappers check that the assembly stays inside its slices (a violation is
// a bug in this package, so it panics) and handle lengths that are not
// whole vectors.

//go:noescape
func roundF16ToF64AVX(dst *float64, src *float32, n int)

//go:noescape
func halfToF64AVX(dst *float64, src *uint16, n int)

//go:noescape
func scoresAVX(s *float32, q, k *float64, n, rd int, scale float32)

//go:noescape
func weightsAVX(sc, w *float32, flags *uint8, m, s *float32, n, wstride, lanes int)

//go:noescape
func vaccAVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride int, ch *vaccChains)

//go:noescape
func vacc1x8AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)

//go:noescape
func vacc2x4AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)

//go:noescape
func vacc4x2AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)

//go:noescape
func vacc8x1AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)

//go:noescape
func expF64AVX(x *float32, n int)

// roundF16ToF64SIMD: len(dst) == len(src), a multiple of 8.
func roundF16ToF64SIMD(dst []float64, src []float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	if n%8 != 0 || len(src) != n {
		panic("cpu: roundF16ToF64SIMD: bad lengths")
	}
	roundF16ToF64AVX(&dst[0], &src[0], n)
}

// halfToF64SIMD: len(dst) == len(src), a multiple of 8.
func halfToF64SIMD(dst []float64, src []uint16) {
	n := len(dst)
	if n == 0 {
		return
	}
	if n%8 != 0 || len(src) != n {
		panic("cpu: halfToF64SIMD: bad lengths")
	}
	halfToF64AVX(&dst[0], &src[0], n)
}

// scoresSIMD: q has rd values (a multiple of 8), k n rows of rd, s
// 8*(n-1)+1 values.
func scoresSIMD(s []float32, q, k []float64, n, rd int, scale float32) {
	if n <= 0 {
		return
	}
	if rd <= 0 || rd%8 != 0 || len(q) != rd || len(k) != n*rd || len(s) < 8*(n-1)+1 {
		panic("cpu: scoresSIMD: bad lengths")
	}
	scoresAVX(&s[0], &q[0], &k[0], n, rd, scale)
}

// weightsSIMD: see weights.
func weightsSIMD(sc, w []float32, flags []uint8, m, s []float32, cnt, ws int, lanes uint) {
	if cnt <= 0 {
		return
	}
	if ws < 16 || len(sc) < 8*cnt || len(w) < (cnt-1)*ws+16 || len(flags) < cnt || len(m) < 8 || len(s) < 8 {
		panic("cpu: weightsSIMD: bad lengths")
	}
	weightsAVX(&sc[0], &w[0], &flags[0], &m[0], &s[0], cnt, 4*ws, int(lanes))
}

// vaccChains describes four slices of 8 accumulator lanes for vaccAVX:
// byte offsets of each slice in the accumulators, in a value row, and of
// its head's ms in a weight row (vs is 32 bytes further).
type vaccChains [12]int

// vaccZ are the AVX-512 value kernels by chunks of 16 per head: vaccZ[nz]
// runs 16/nz heads of nz chunks (internal/gen/attnz.go).
var vaccZ = map[int]func(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int){
	4: vaccZ4x4, 8: vaccZ2x8, 16: vaccZ1x16,
}

// vaccZS are the same for heads that share their value rows (the query
// heads of one KV head): each value chunk is converted once for them all.
var vaccZS = map[int]func(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int){
	4: vaccZS4x4, 8: vaccZS2x8, 16: vaccZ1x16,
}

// valuesSIMD implements values. With z (AVX-512), heads whose rows are 4,
// 8 or 16 chunks of 16 elements go 16/C at a time to the 16-chain kernels.
// Otherwise slices (head i, chunk c of 8 elements) go to the eight-slice
// kernels where the shape allows: runs of 8 chunks of one head when a head
// has 8 chunks or more, else 8/C heads of C chunks when C, the chunks per
// head, is 1, 2 or 4. The rest go to vaccAVX four at a time. Every kernel
// does the same per-element steps, so the choice changes no bits.
func valuesSIMD(acc []float32, v []uint16, w []float32, flags []uint8, voff []int, cnt, rd, gn int, z bool) {
	if cnt == 0 || gn == 0 {
		return
	}
	if rd <= 0 || rd%8 != 0 || len(acc) < gn*rd || len(flags) < cnt || len(voff) < gn {
		panic("cpu: valuesSIMD: bad lengths")
	}
	for _, o := range voff[:gn] {
		if o < 0 || o%2 != 0 || o/2+cnt*rd > len(v) {
			panic("cpu: valuesSIMD: value rows out of range")
		}
	}
	nb := (gn + 7) / 8
	if len(w) < cnt*16*nb {
		panic("cpu: valuesSIMD: bad lengths")
	}
	nc := rd / 8
	vs, ws, as := 2*rd, 64*nb, 4*rd
	wo := func(i int) int { return 16*(i/8) + i%8 } // head i's ms in a weight row
	blockChunks, blockHeads := 0, 0                 // slices (i, c) with i < blockHeads and c < blockChunks go to the kernels below
	kz := vaccZ[rd/16]
	switch {
	case z && rd%16 == 0 && kz != nil:
		// 16/C heads at a time, starting at multiples of 16/C: never
		// across blocks of 8 heads.
		nh := 16 / (rd / 16)
		blockChunks, blockHeads = nc, gn-gn%nh
		for i := 0; i < blockHeads; i += nh {
			k := kz
			if sharedRows(voff[i : i+nh]) {
				k = vaccZS[rd/16]
			}
			k(&acc[i*rd], &v[0], &w[wo(i)], &flags[0], cnt, vs, ws, as, &voff[i])
		}
	case nc >= 8:
		blockChunks, blockHeads = nc&^7, gn
		for i := range gn {
			for c := 0; c < blockChunks; c += 8 {
				vacc1x8AVX(&acc[i*rd+8*c], &v[8*c], &w[wo(i)], &flags[0], cnt, vs, ws, as, &voff[i])
			}
		}
	case nc == 4 || nc == 2 || nc == 1:
		// nh heads at a time, starting at multiples of nh: never across
		// blocks of 8 heads.
		nh := 8 / nc
		blockChunks, blockHeads = nc, gn-gn%nh
		for i := 0; i < blockHeads; i += nh {
			a, wi, vo := &acc[i*rd], &w[wo(i)], &voff[i]
			switch nh {
			case 2:
				vacc2x4AVX(a, &v[0], wi, &flags[0], cnt, vs, ws, as, vo)
			case 4:
				vacc4x2AVX(a, &v[0], wi, &flags[0], cnt, vs, ws, as, vo)
			default:
				vacc8x1AVX(a, &v[0], wi, &flags[0], cnt, vs, ws, as, vo)
			}
		}
	}
	var ch vaccChains
	k := 0
	for i := range gn {
		for c := range nc {
			if i < blockHeads && c < blockChunks {
				continue
			}
			ch[k], ch[4+k], ch[8+k] = 4*(i*rd+8*c), voff[i]+16*c, 4*wo(i)
			if k++; k == 4 {
				vaccAVX(&acc[0], &v[0], &w[0], &flags[0], cnt, vs, ws, &ch)
				k = 0
			}
		}
	}
	if k > 0 {
		for x := k; x < 4; x++ { // repeat the last slice: it computes the same values again
			ch[x], ch[4+x], ch[8+x] = ch[k-1], ch[4+k-1], ch[8+k-1]
		}
		vaccAVX(&acc[0], &v[0], &w[0], &flags[0], cnt, vs, ws, &ch)
	}
}

// expF64SIMD replaces x[i] by e^x[i]; the tail goes through the same
// kernel, so every element is computed alike.
func expF64SIMD(x []float32) {
	body := len(x) &^ 3
	if body > 0 {
		expF64AVX(&x[0], body)
	}
	if body < len(x) {
		var buf [4]float32
		copy(buf[:], x[body:])
		expF64AVX(&buf[0], 4)
		copy(x[body:], buf[:])
	}
}

// halfToF64Pairs converts n rows of rd halves into the position-pair layout
// of scoresPairs (internal/gen/attnz.go), with AVX-512. len(dst) is
// ceil(n/2)*2*rd, rd a multiple of 8.
func halfToF64Pairs(dst []float64, src []uint16, n, rd int) {
	if n <= 0 {
		return
	}
	if rd <= 0 || rd%8 != 0 || len(src) != n*rd || len(dst) != (n+1)/2*2*rd {
		panic("cpu: halfToF64Pairs: bad lengths")
	}
	halfToF64PairsZ(&dst[0], &src[0], n, rd)
}

// scoresPairs is scores (the same bits) over keys in the position-pair
// layout, with AVX-512.
func scoresPairs(s []float32, q, k []float64, n, rd int, scale float32) {
	if n <= 0 {
		return
	}
	if rd <= 0 || rd%8 != 0 || len(q) != rd || len(k) != (n+1)/2*2*rd || len(s) < 8*(n-1)+1 {
		panic("cpu: scoresPairs: bad lengths")
	}
	scoresZ(&s[0], &q[0], &k[0], n, rd, scale)
}

// sharedRows reports whether every head of voff reads the same value rows.
func sharedRows(voff []int) bool {
	for _, o := range voff[1:] {
		if o != voff[0] {
			return false
		}
	}
	return true
}
