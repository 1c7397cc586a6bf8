package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The value updates of AttendF16 (see values in attnkernels.go):
//
//	vaccZ<nh>x<nz>(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
//	vacc<nh>x<nc>AVX(... the same)
//
// nh consecutive heads of one block of 8 (ms at 4*i, vs at 32+4*i of a
// weight row w + p*wstride) by chunks of 16 (Z, AVX-512) or 8 (AVX2)
// accumulators (head i's chunk c at acc + i*astride + 4*width*c bytes; its
// values at byte voff[i] + 2*width*c of a value row v + p*vstride): 16 or 8
// chains. Per position, when flags[p] is set, a = h(a*ms); then
// a = h(fma(v, vs, a)), h rounding to half precision and back. Every
// element's updates are one chain of dependent roundings, so a kernel runs
// as many chains as the registers hold; the per-element steps are the same
// in all of them. n >= 1.
//
// vaccZS<nh>x<nz> is vaccZ for heads that share their values (the query
// heads of one KV head, voff[i] all equal): each value chunk is converted
// once for all of them.
// attnSuffix is appended to the names of the AVX2 attention kernels.
var attnSuffix = ""

func attnZ() {
	for _, s := range [][2]int{{4, 4}, {2, 8}, {1, 16}} {
		vaccGen(true, s[0], s[1], false)
	}
	for _, s := range [][2]int{{4, 4}, {2, 8}} {
		vaccGen(true, s[0], s[1], true)
	}
	for _, s := range [][2]int{{1, 8}, {2, 4}, {4, 2}, {8, 1}} {
		vaccGen(false, s[0], s[1], false)
	}
	vaccChains()
}

// vaccChains generates
//
//	vaccAVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride int, ch *vaccChains)
//
// the value updates of four slices of 8 accumulators at arbitrary
// offsets: ch holds the byte offsets of each slice in acc, in a value row,
// and of its ms in a weight row (its vs is 32 bytes further). It takes the
// slices the other kernels' shapes leave over.
func vaccChains() {
	name := "vaccAVX" + attnSuffix
	text(name, NOSPLIT, "func(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride int, ch *[12]int)")
	Doc(name + " runs the ordered value updates of four slices of 8 accumulators at arbitrary offsets (see internal/gen/attnz.go).")
	voffs := []GPPhysical{R8, R9, R10, R11}
	woffs := []GPPhysical{R12, R13, RDI, RAX}
	Load(Param("ch"), RAX)
	Load(Param("acc"), RBX)
	for i := 0; i < 4; i++ {
		MOVQ(Mem{Base: RAX, Disp: 8 * i}, R8)
		VMOVUPS(Mem{Base: RBX, Index: R8, Scale: 1}, yreg(i))
	}
	for i := 0; i < 4; i++ {
		MOVQ(Mem{Base: RAX, Disp: 32 + 8*i}, voffs[i])
	}
	for i := 0; i < 4; i++ {
		MOVQ(Mem{Base: RAX, Disp: 64 + 8*i}, woffs[i]) // RAX last
	}
	Load(Param("v"), RSI)
	Load(Param("w"), RDX)
	Load(Param("flags"), RBX)
	Load(Param("n"), RCX)
	round := func(r VecPhysical) {
		VCVTPS2PH(U8(0), r, r.AsX())
		VCVTPH2PS(r.AsX(), r)
	}
	loop, upd := name+"_pos", name+"_upd"
	Label(loop)
	CMPB(Mem{Base: RBX}, U8(0))
	JE(LabelRef(upd))
	for i := 0; i < 4; i++ {
		VBROADCASTSS(Mem{Base: RDX, Index: woffs[i], Scale: 1}, yreg(4+i))
	}
	for i := 0; i < 4; i++ {
		VMULPS(yreg(4+i), yreg(i), yreg(i))
	}
	for i := 0; i < 4; i++ {
		round(yreg(i))
	}
	Label(upd)
	for i := 0; i < 4; i++ {
		VCVTPH2PS(Mem{Base: RSI, Index: voffs[i], Scale: 1}, yreg(4+i))
	}
	for i := 0; i < 4; i++ {
		VBROADCASTSS(Mem{Base: RDX, Index: woffs[i], Scale: 1, Disp: 32}, yreg(8+i))
	}
	for i := 0; i < 4; i++ {
		VFMADD231PS(yreg(8+i), yreg(4+i), yreg(i))
	}
	for i := 0; i < 4; i++ {
		round(yreg(i))
	}
	ADDQ(NewParamAddr("vstride", 40), RSI)
	ADDQ(NewParamAddr("wstride", 48), RDX)
	INCQ(RBX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	Load(Param("ch"), RAX)
	Load(Param("acc"), RBX)
	for i := 0; i < 4; i++ {
		MOVQ(Mem{Base: RAX, Disp: 8 * i}, R8)
		VMOVUPS(yreg(i), Mem{Base: RBX, Index: R8, Scale: 1})
	}
	VZEROUPPER()
	RET()
}

// vaccGen generates one value kernel: 512-bit (wide) or 256-bit vectors,
// nh heads by nc chunks.
func vaccGen(wide bool, nh, nc int, shared bool) {
	var name string
	switch {
	case !wide:
		name = fmt.Sprintf("vacc%dx%dAVX%s", nh, nc, attnSuffix)
	case shared:
		name = fmt.Sprintf("vaccZS%dx%d", nh, nc)
	default:
		name = fmt.Sprintf("vaccZ%dx%d", nh, nc)
	}
	width, vreg := 16, zreg
	if !wide {
		width, vreg = 8, yreg
	}
	text(name, NOSPLIT, "func(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)")
	Doc(fmt.Sprintf("%s runs the ordered value updates of %d heads by %d chunks of %d accumulators (see internal/gen/attnz.go).", name, nh, nc, width))
	a := func(i, c int) VecPhysical { return vreg(i*nc + c) }
	// Registers past the accumulators: broadcast weights and converted
	// values, used in rotation.
	var msr, vsr, tmp []VecPhysical
	if wide {
		msr, vsr, tmp = []VecPhysical{Z28, Z29, Z30, Z31}, []VecPhysical{Z16, Z17, Z18, Z19}, []VecPhysical{Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27}
	} else {
		msr, vsr, tmp = []VecPhysical{Y8, Y9}, []VecPhysical{Y13, Y14}, []VecPhysical{Y9, Y10, Y11, Y12}
	}
	vp := []GPPhysical{R8, R9, R10, R11, R13, RAX, RSI, RDI}[:nh]
	Load(Param("acc"), R12)
	Load(Param("astride"), RBX)
	for i := 0; i < nh; i++ {
		for c := 0; c < nc; c++ {
			VMOVUPS(Mem{Base: R12, Disp: 4 * width * c}, a(i, c))
		}
		if i < nh-1 {
			ADDQ(RBX, R12)
		}
	}
	Load(Param("v"), R12)
	Load(Param("voff"), RBX)
	for i := nh - 1; i >= 0; i-- {
		MOVQ(Mem{Base: RBX, Disp: 8 * i}, vp[i])
		ADDQ(R12, vp[i])
	}
	Load(Param("w"), RDX)
	Load(Param("flags"), RBX)
	Load(Param("n"), RCX)
	Load(Param("vstride"), R12)
	half := func(r VecPhysical) VecPhysical {
		if wide {
			return r.AsY().(VecPhysical)
		}
		return r.AsX().(VecPhysical)
	}
	round := func(r VecPhysical) {
		VCVTPS2PH(U8(0), r, half(r))
		VCVTPH2PS(half(r), r)
	}

	loop, upd := name+"_pos", name+"_upd"
	Label(loop)
	CMPB(Mem{Base: RBX}, U8(0))
	JE(LabelRef(upd))
	for i := 0; i < nh; i++ {
		ms := msr[i%len(msr)]
		VBROADCASTSS(Mem{Base: RDX, Disp: 4 * i}, ms)
		for c := 0; c < nc; c++ {
			VMULPS(ms, a(i, c), a(i, c))
			round(a(i, c))
		}
	}
	Label(upd)
	k := 0
	if shared {
		for i := 0; i < nh; i++ {
			VBROADCASTSS(Mem{Base: RDX, Disp: 32 + 4*i}, vsr[i])
		}
		for c := 0; c < nc; c++ {
			t := tmp[c%len(tmp)]
			VCVTPH2PS(Mem{Base: vp[0], Disp: 2 * width * c}, t)
			for i := 0; i < nh; i++ {
				VFMADD231PS(t, vsr[i], a(i, c))
				round(a(i, c))
			}
		}
	}
	for i := 0; i < nh && !shared; i++ {
		vs := vsr[i%len(vsr)]
		VBROADCASTSS(Mem{Base: RDX, Disp: 32 + 4*i}, vs)
		for c := 0; c < nc; c++ {
			t := tmp[k%len(tmp)]
			k++
			VCVTPH2PS(Mem{Base: vp[i], Disp: 2 * width * c}, t)
			VFMADD231PS(t, vs, a(i, c))
			round(a(i, c))
		}
	}
	for i := 0; i < nh; i++ {
		ADDQ(R12, vp[i])
	}
	ADDQ(NewParamAddr("wstride", 48), RDX)
	INCQ(RBX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	Load(Param("acc"), R12)
	Load(Param("astride"), RBX)
	for i := 0; i < nh; i++ {
		for c := 0; c < nc; c++ {
			VMOVUPS(a(i, c), Mem{Base: R12, Disp: 4 * width * c})
		}
		if i < nh-1 {
			ADDQ(RBX, R12)
		}
	}
	VZEROUPPER()
	RET()
}

// Scores with AVX-512 (see scores in attnkernels.go): each position's dot
// keeps four float64 lanes, lane j summing elements j, j+4, ... in order,
// added as (l0+l1)+(l2+l3); a 512-bit register holds the lanes of two
// positions, so the keys are converted into position pairs, chunk-major:
//
//	halfToF64PairsZ(dst *float64, src *uint16, n, rd int)
//	    n rows of rd halves (contiguous) to float64: with np = ceil(n/2)
//	    pairs, chunk c (4 elements) of pair j at dst + (c*np + j)*8
//	    doubles, row 2j's 4 values then row 2j+1's (zeros past the last
//	    row when n is odd);
//	scoresZ(s *float32, q, k *float64, n, rd int, scale float32)
//	    s[8*p] = float32(q . k_p) * scale for p < n, k in that layout.
func attnScoresZ() {
	text("halfToF64PairsZ", NOSPLIT, "func(dst *float64, src *uint16, n, rd int)")
	Doc("halfToF64PairsZ converts rows of halves to float64 in position pairs (see internal/gen/attnz.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	Load(Param("rd"), RDX)
	MOVQ(RDX, R8)
	SHLQ(U8(1), R8)  // bytes per row of halves
	SHRQ(U8(2), RDX) // chunks per row
	MOVQ(RCX, R10)
	INCQ(R10)
	SHRQ(U8(1), R10)
	SHLQ(U8(6), R10) // bytes from one chunk to the next: np*64
	pairs, odd, done := "h2pz_pairs", "h2pz_odd", "h2pz_done"
	Label(pairs)
	CMPQ(RCX, U8(2))
	JL(LabelRef(odd))
	MOVQ(RDX, RAX)
	MOVQ(RSI, R9)
	MOVQ(RDI, R11)
	inner := "h2pz_chunk"
	Label(inner)
	VMOVQ(Mem{Base: R9}, X0)
	VPINSRQ(U8(1), Mem{Base: R9, Index: R8, Scale: 1}, X0, X0)
	VCVTPH2PS(X0, Y0)
	VCVTPS2PD(Y0, Z0)
	VMOVUPD(Z0, Mem{Base: R11})
	ADDQ(R10, R11)
	ADDQ(U8(8), R9)
	DECQ(RAX)
	JNZ(LabelRef(inner))
	LEAQ(Mem{Base: RSI, Index: R8, Scale: 2}, RSI)
	ADDQ(U8(64), RDI)
	SUBQ(U8(2), RCX)
	JMP(LabelRef(pairs))
	Label(odd)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	inner1 := "h2pz_chunk1"
	Label(inner1)
	VMOVQ(Mem{Base: RSI}, X0)
	VCVTPH2PS(X0, Y0)
	VCVTPS2PD(Y0, Z0)
	VMOVUPD(Z0, Mem{Base: RDI})
	ADDQ(R10, RDI)
	ADDQ(U8(8), RSI)
	DECQ(RDX)
	JNZ(LabelRef(inner1))
	Label(done)
	VZEROUPPER()
	RET()

	text("scoresZ", NOSPLIT, "func(s *float32, q, k *float64, n, rd int, scale float32)")
	Doc("scoresZ computes the scores of n positions from keys in position pairs (see internal/gen/attnz.go).")
	Load(Param("s"), RDI)
	Load(Param("q"), RSI)
	Load(Param("k"), RDX)
	Load(Param("n"), RCX)
	Load(Param("rd"), R8)
	VBROADCASTSS(NewParamAddr("scale", 40), Y31)
	SHRQ(U8(2), R8) // chunks per row
	MOVQ(RCX, R9)
	INCQ(R9)
	SHRQ(U8(1), R9)
	SHLQ(U8(6), R9) // bytes from one chunk to the next
	// Groups of up to 8 pairs share each broadcast chunk of q; the last
	// pair may hold one position.
	for _, g := range []int{8, 4, 2, 1} {
		lbl, next := fmt.Sprintf("scz_g%d", g), fmt.Sprintf("scz_after%d", g)
		Label(lbl)
		if g > 1 {
			CMPQ(RCX, U8(2*g))
		} else {
			CMPQ(RCX, U8(1))
		}
		JL(LabelRef(next))
		for j := 0; j < g; j++ {
			VPXORQ(zreg(j), zreg(j), zreg(j))
		}
		MOVQ(RSI, R10)
		MOVQ(RDX, R11)
		MOVQ(R8, RAX)
		loop := fmt.Sprintf("scz_d%d", g)
		Label(loop)
		VBROADCASTF64X4(Mem{Base: R10}, Z16)
		for j := 0; j < g; j++ {
			VFMADD231PD(Mem{Base: R11, Disp: 64 * j}, Z16, zreg(j))
		}
		ADDQ(U8(32), R10)
		ADDQ(R9, R11)
		DECQ(RAX)
		JNZ(LabelRef(loop))
		for j := 0; j < g; j++ {
			a := zreg(j)
			VPERMILPD(U8(0x55), a, Z17)
			VADDPD(Z17, a, a)
			VPERMPD(U8(0x4e), a, Z17)
			VADDPD(Z17, a, a)
			VCVTPD2PS(a, a.AsY())
			VMULPS(Y31, a.AsY(), a.AsY())
			VMOVSS(a.AsX(), Mem{Base: RDI, Disp: 64 * j})
			if g == 1 {
				CMPQ(RCX, U8(2))
				JL(LabelRef("scz_done"))
			}
			VEXTRACTF32X4(U8(1), a.AsY(), X17)
			VMOVSS(X17, Mem{Base: RDI, Disp: 64*j + 32})
		}
		ADDQ(U32(64*g), RDI)
		ADDQ(U32(64*g), RDX)
		SUBQ(U8(2*g), RCX)
		JMP(LabelRef(lbl))
		Label(next)
	}
	Label("scz_done")
	VZEROUPPER()
	RET()
}
