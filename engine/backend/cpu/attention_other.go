//go:build !amd64

package cpu

// Without amd64 assembly the attention kernels are the generic ones; these
// are never called (useSIMD is false) but keep the dispatch compiling.

func roundF16ToF64SIMD(dst []float64, src []float32) { roundQuery(dst, src, false) }
func halfToF64SIMD(dst []float64, src []uint16)      { halfToF64(dst, src, false) }
func scoresSIMD(s []float32, q, k []float64, n, rd int, scale float32) {
	scores(s, q, k, n, rd, scale, false)
}
func weightsSIMD(sc, w []float32, flags []uint8, m, s []float32, cnt, ws int, lanes uint) {
	weights(sc, w, flags, m, s, cnt, ws, lanes, false)
}
func valuesSIMD(acc []float32, v []uint16, w []float32, flags []uint8, voff []int, cnt, rd, gn int, _ bool) {
	values(acc, v, w, flags, voff, cnt, rd, gn, false)
}
func expF64SIMD(x []float32) { expF32s(x, false) }

func halfToF64Pairs(dst []float64, src []uint16, n, rd int) { panic("cpu: no AVX-512 here") }

func scoresPairs(s []float32, q, k []float64, n, rd int, scale float32) {
	panic("cpu: no AVX-512 here")
}

func halfTileSIMD(dst []float32, src []uint16, cnt, rd, rd16 int, transposed bool) {
	panic("cpu: no AVX-512 here")
}
func tileScoresSIMD(s, q, k []float32, blocks, rd16 int, scale float32) {
	panic("cpu: no AVX-512 here")
}
func tileSoftmaxSIMD(s, v, acc, ms []float32, rng []int32, masks []uint16, tokens, gn, rd16 int) {
	panic("cpu: no AVX-512 here")
}

func tileScoresBF16SIMD(s []float32, q, k []uint32, blocks, rd16 int, nk, nv []uint16) {
	panic("cpu: no AVX-512 here")
}
func tileSoftmaxBF16SIMD(s []float32, v []uint32, acc, ms, sv []float32, masks, wb []uint16, rows, rd16 int) {
	panic("cpu: no AVX-512 here")
}
func keyPairsBF16SIMD(dst []uint32, src []uint16, cnt, rd, rd16 int)   { panic("cpu: no AVX-512 here") }
func valuePairsBF16SIMD(dst []uint32, src []uint16, cnt, rd, rd16 int) { panic("cpu: no AVX-512 here") }
func queryPairsBF16SIMD(qs []uint32, r0, rd16 int, q []float32, hd int, scale float32) {
	panic("cpu: no AVX-512 here")
}
