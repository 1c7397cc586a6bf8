package quant

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// Hand-worked blocks. Every block is written out byte by byte (repeated
// patterns with bytes.Repeat); scales are powers of two or small integers so
// that the expected values and dot products below were worked out by hand
// and are exact in float32.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func rep(pattern []byte, n int) []byte { return bytes.Repeat(pattern, n) }

func i8s(v ...int8) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

// nib16 is a 16-byte pattern whose byte j has low nibble j and high nibble 15-j.
var nib16 = []byte{0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f}

var (
	// F32 [1, 2, 3, 4] and [0.5, -1, 0.25, 2].
	f32W = []byte{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40}
	f32X = []byte{0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0xbf, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0x40}
	// F16 [1, -2, 0.5, 65504] and [3, 0.25, -4, 2^-24].
	f16W = []byte{0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b}
	f16X = []byte{0x00, 0x42, 0x00, 0x34, 0x00, 0xc4, 0x01, 0x00}
	// BF16 [1, -2, 0.5, 3] and [1.5, 4, 2^-8, -0.125].
	bf16W = []byte{0x80, 0x3f, 0x00, 0xc0, 0x00, 0x3f, 0x40, 0x40}
	bf16X = []byte{0xc0, 0x3f, 0x80, 0x40, 0x80, 0x3b, 0x00, 0xbe}

	// Q8_0: d = 0.5, q[j] = j-16.
	q80W1 = cat([]byte{0x00, 0x38}, i8s(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
	// Q8_0: d = -2, q = 127 everywhere.
	q80W2 = cat([]byte{0x00, 0xc0}, rep([]byte{0x7f}, 32))
	// Q8_0 activations: d = 0.25, q alternating 2, -1; d = 1, q = -128.
	q80X1 = cat([]byte{0x00, 0x34}, rep([]byte{0x02, 0xff}, 16))
	q80X2 = cat([]byte{0x00, 0x3c}, rep([]byte{0x80}, 32))

	// Q4_0: d = 2, nibbles nib16; d = -1, same nibbles.
	q40W1 = cat([]byte{0x00, 0x40}, nib16)
	q40W2 = cat([]byte{0x00, 0xbc}, nib16)
	// Q8_0 activations: d = 0.5, q alternating 2, -1; d = 0.25, q = 3.
	q40X1 = cat([]byte{0x00, 0x38}, rep([]byte{0x02, 0xff}, 16))
	q40X2 = cat([]byte{0x00, 0x34}, rep([]byte{0x03}, 32))

	// Q8_K: d = 0.5, q[k] = k%16 - 8, bsums -8.
	q8KBlock = cat([]byte{0x00, 0x00, 0x00, 0x3f},
		rep(i8s(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7), 16),
		rep([]byte{0xf8, 0xff}, 16))
	// Q8_K activations: d = 0.25, q alternating 2, -1, bsums 8.
	q8KX = cat([]byte{0x00, 0x00, 0x80, 0x3e}, rep([]byte{0x02, 0xff}, 128), rep([]byte{0x08, 0x00}, 16))

	// Q4_K: d = 1, dmin = 0.5, scales sc = [1 2 3 4 5 6 7 40] and
	// mins m = [0 2 4 6 8 10 50 14] (40 and 50 use the top bits), nibbles nib16.
	q4KBlock = cat([]byte{0x00, 0x3c, 0x00, 0x38},
		[]byte{0x01, 0x02, 0x03, 0x84, 0x00, 0x02, 0xc4, 0x06, 0x85, 0xa6, 0x27, 0xe8},
		rep(nib16, 8))

	// Q4_1: d = 2, m = -1, nibbles nib16.
	q41Block = cat([]byte{0x00, 0x40, 0x00, 0xbc}, nib16)
	// Q5_0: d = 1, fifth bits set for elements 16-31, nibbles nib16.
	q50Block = cat([]byte{0x00, 0x3c, 0x00, 0x00, 0xff, 0xff}, nib16)
	// Q5_1: d = 0.5, m = 1, fifth bits set for elements 0-15, nibbles nib16.
	q51Block = cat([]byte{0x00, 0x38, 0x00, 0x3c, 0xff, 0xff, 0x00, 0x00}, nib16)
	// IQ4_NL: d = 0.5, nibbles nib16.
	iq4NLBlock = cat([]byte{0x00, 0x38}, nib16)
	// Q2_K: scales[s] = s | 1<<4 (sc = s, m = 1), every byte of qs 0xe4
	// (quarter p holds q = p), d = 1, dmin = 0.5.
	q2KBlock = cat([]byte{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f},
		rep([]byte{0xe4}, 64), []byte{0x00, 0x3c, 0x00, 0x38})
	// Q3_K: hmask 0x0f (high bit set in the first half only), qs 0xe4, every
	// scale 33 (low nibbles 1, top bits 2), d = 2.
	q3KBlock = cat(rep([]byte{0x0f}, 32), rep([]byte{0xe4}, 64), rep([]byte{0x11}, 8), rep([]byte{0xaa}, 4),
		[]byte{0x00, 0x40})
	// Q5_K: Q4_K's block with a fifth bit for sub-blocks 0, 2, 4, 6 (qh 0x55).
	q5KBlock = cat(q4KBlock[:16], rep([]byte{0x55}, 32), q4KBlock[16:])
	// IQ4_XS: d = 0.5, scales 33 for even and 34 for odd sub-blocks, nibbles nib16.
	iq4XSBlock = cat([]byte{0x00, 0x38, 0xaa, 0xaa}, rep([]byte{0x21}, 4), rep(nib16, 8))

	// Q6_K: ql nib16, qh 0xe4 (high bits 0, 1, 2, 3 for the four quarters),
	// scales 1..15 and -16, d = 0.5.
	q6KBlock = cat(rep(nib16, 8), rep([]byte{0xe4}, 64),
		[]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0xf0},
		[]byte{0x00, 0x38})
)

func TestDequantizeHandWorked(t *testing.T) {
	t.Parallel()
	type spot struct {
		i    int
		want float32
	}
	tests := []struct {
		name  string
		t     Type
		data  []byte
		n     int
		all   []float32 // every element, or nil
		spots []spot
	}{
		{name: "F32", t: F32, data: f32W, n: 4, all: []float32{1, 2, 3, 4}},
		{name: "F16", t: F16, data: f16W, n: 4, all: []float32{1, -2, 0.5, 65504}},
		{name: "F16 subnormal", t: F16, data: f16X, n: 4, all: []float32{3, 0.25, -4, 0x1p-24}},
		{name: "BF16", t: BF16, data: bf16X, n: 4, all: []float32{1.5, 4, 0.00390625, -0.125}},
		{name: "Q8_0", t: Q8_0, data: cat(q80W1, q80W2), n: 64, all: []float32{
			-8, -7.5, -7, -6.5, -6, -5.5, -5, -4.5, -4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5,
			0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5,
			-254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254,
			-254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254, -254,
		}},
		{name: "Q4_0", t: Q4_0, data: cat(q40W1, q40W2), n: 64, all: []float32{
			-16, -14, -12, -10, -8, -6, -4, -2, 0, 2, 4, 6, 8, 10, 12, 14,
			14, 12, 10, 8, 6, 4, 2, 0, -2, -4, -6, -8, -10, -12, -14, -16,
			8, 7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7,
			-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8,
		}},
		{name: "Q4_1", t: Q4_1, data: q41Block, n: 32, spots: []spot{{0, -1}, {5, 9}, {16, 29}, {31, -1}}},
		{name: "Q5_0", t: Q5_0, data: q50Block, n: 32, spots: []spot{{0, -16}, {3, -13}, {16, 15}, {31, 0}}},
		{name: "Q5_1", t: Q5_1, data: q51Block, n: 32, spots: []spot{{0, 9}, {15, 16.5}, {16, 8.5}, {31, 1}}},
		{name: "IQ4_NL", t: IQ4_NL, data: iq4NLBlock, n: 32, spots: []spot{{0, -63.5}, {8, 0.5}, {16, 56.5}, {31, -63.5}}},
		{name: "Q2_K", t: Q2_K, data: q2KBlock, n: 256, spots: []spot{
			// element 128h+32p+l: sc = element/16, q = p -> sc*q - 0.5
			{0, -0.5}, {40, 1.5}, {100, 17.5}, {200, 23.5}, {255, 44.5},
		}},
		{name: "Q3_K", t: Q3_K, data: q3KBlock, n: 256, spots: []spot{
			// 2*1*(p - 4 in the second half)
			{0, 0}, {40, 2}, {127, 6}, {128, -8}, {200, -4}, {255, -2},
		}},
		{name: "Q5_K", t: Q5_K, data: q5KBlock, n: 256, spots: []spot{
			// Q4_K's values, plus 16*sc[s] in sub-blocks 0, 2, 4, 6
			{0, 16}, {5, 21}, {33, 27}, {100, 41}, {130, 86}, {255, -7},
		}},
		{name: "IQ4_XS", t: IQ4_XS, data: iq4XSBlock, n: 256, spots: []spot{
			// 0.5*(1 + s%2)*IQ4NLValues[nibble]
			{0, -63.5}, {40, 1}, {60, -65}, {255, -127},
		}},
		{name: "Q8_K", t: Q8_K, data: q8KBlock, n: 256, spots: []spot{
			{0, -4}, {8, 0}, {17, -3.5}, {100, -2}, {255, 3.5},
		}},
		{name: "Q4_K", t: Q4_K, data: q4KBlock, n: 256, spots: []spot{
			// element: sub-block s, nibble q -> sc[s]*q - 0.5*m[s]
			{0, 0}, {5, 5}, {33, 27}, {100, 41}, {130, 6}, {170, 25}, {200, 31}, {230, 353}, {255, -7},
		}},
		{name: "Q6_K", t: Q6_K, data: q6KBlock, n: 256, spots: []spot{
			// element: 0.5 * scale[k/16] * (q-32)
			{0, -16}, {17, -31}, {40, -12}, {70, 22.5}, {127, 64}, {128, -144}, {200, 45.5}, {250, -168}, {255, -128},
		}},
	}
	for _, tt := range tests {
		got := make([]float32, tt.n)
		if err := Dequantize(tt.t, got, tt.data); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for i, want := range tt.all {
			if got[i] != want {
				t.Errorf("%s: element %d = %g, want %g", tt.name, i, got[i], want)
			}
		}
		for _, s := range tt.spots {
			if got[s.i] != s.want {
				t.Errorf("%s: element %d = %g, want %g", tt.name, s.i, got[s.i], s.want)
			}
		}
	}
}

func TestDotHandWorked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		t    Type
		n    int
		w, x []byte
		dot  func(int, []byte, []byte) float32
		want float32
	}{
		// 0.5 - 2 + 0.75 + 8
		{"F32", F32, 4, f32W, f32X, DotF32, 7.25},
		// 3 - 0.5 - 2 + 65504*2^-24
		{"F16", F16, 4, f16W, f16X, DotF16, 0.5039043426513672},
		// 1.5 - 8 + 2^-9 - 0.375
		{"BF16", BF16, 4, bf16W, bf16X, DotBF16, -6.873046875},
		// block 1: sum (j-16)*x = -32, times 0.5*0.25 = -4;
		// block 2: 32*127*(-128) = -520192, times -2*1 = 1040384.
		{"Q8_0", Q8_0, 64, cat(q80W1, q80W2), cat(q80X1, q80X2), DotQ8_0, 1040380},
		// block 1: low half -16, high half 8, (-8*2)*0.5 = -8;
		// block 2: 3*(-8) + 3*(-8) = -48, (-48*-1)*0.25 = 12.
		{"Q4_0", Q4_0, 64, cat(q40W1, q40W2), cat(q40X1, q40X2), DotQ4_0, 4},
		// per block: d*dx*(96*(1+3+5+7) + 144*(2+4+6+40)) - dmin*dx*(16*94)
		// = 0.25*9024 - 0.125*1504 = 2068; two blocks.
		{"Q4_K", Q4_K, 512, cat(q4KBlock, q4KBlock), cat(q8KX, q8KX), DotQ4_K, 4136},
		// per block: the 16-element groups sum to -208, -80, 72, 200 per quarter;
		// weighted by the scales that is 2608 - 4048 = -1440, times 0.5*0.25; two blocks.
		{"Q6_K", Q6_K, 512, cat(q6KBlock, q6KBlock), cat(q8KX, q8KX), DotQ6_K, -360},
	}
	for _, tt := range tests {
		if got := tt.dot(tt.n, tt.w, tt.x); got != tt.want {
			t.Errorf("%s: Dot = %.9g, want %.9g", tt.name, got, tt.want)
		}
		got, err := VecDot(tt.t, tt.n, tt.w, tt.x)
		if err != nil || got != tt.want {
			t.Errorf("%s: VecDot = %.9g, %v, want %.9g", tt.name, got, err, tt.want)
		}
	}
}

// TestQuantizeHandWorked pins the reference quantizers' choices of d and
// their rounding: Q8_0 rounds half away from zero, Q8_K half to even with a
// negative d for a positive extreme, Q4_0 rounds half up and clips.
func TestQuantizeHandWorked(t *testing.T) {
	t.Parallel()
	pad := func(n int, v ...float32) []float32 { return append(v, make([]float32, n-len(v))...) }
	tests := []struct {
		name string
		t    Type
		src  []float32
		want []byte
	}{
		{"Q8_0 ties away from zero", Q8_0,
			cat32(pad(32, 127, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49), pad(32, -127, 63.5)),
			cat([]byte{0x00, 0x3c}, i8s(127, 1, -1, 2, 3, -3, 0), make([]byte, 25),
				[]byte{0x00, 0x3c}, i8s(-127, 64), make([]byte, 30))},
		{"Q8_0 zero block", Q8_0, make([]float32, 32), make([]byte, 34)},
		// d = -16/-8 = 2: -16 -> 0, 16 -> 16 clipped to 15, 1 -> 9, 3 -> 10,
		// -1 -> 8, -3 -> 7, 0.9 -> 8, 0 -> 8; x[16] = 7 -> 12, x[17] = -7 -> 5.
		{"Q4_0 negative extreme", Q4_0,
			pad(32, -16, 16, 1, 3, -1, -3, 0.9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, -7),
			cat([]byte{0x00, 0x40, 0xc0, 0x5f, 0x89, 0x8a, 0x88, 0x87, 0x88}, rep([]byte{0x88}, 9))},
		// The first of equal magnitudes wins: d = 16/-8 = -2; 16 -> 0, -16 -> 15.
		{"Q4_0 positive extreme", Q4_0,
			pad(32, 16, -16),
			cat([]byte{0x00, 0xc0, 0x80, 0x8f}, rep([]byte{0x88}, 14))},
		// iscale = -127/127: q = RNE(-x); d = -1; bsums[0] = -127-2-2+4 = -127.
		{"Q8_K ties to even", Q8_K,
			pad(256, 127, 0.5, 1.5, 2.5, -3.5, -0.5),
			cat([]byte{0x00, 0x00, 0x80, 0xbf}, i8s(-127, 0, -2, -2, 4, 0), make([]byte, 250),
				[]byte{0x81, 0xff}, make([]byte, 30))},
		{"Q8_K zero block", Q8_K, make([]float32, 256), make([]byte, 292)},
	}
	for _, tt := range tests {
		got := make([]byte, len(tt.want))
		if err := Quantize(tt.t, got, tt.src); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s:\n got % x\nwant % x", tt.name, got, tt.want)
		}
	}
}

func cat32(parts ...[]float32) []float32 {
	var out []float32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestVecDotType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		w, want Type
		ok      bool
	}{
		{F32, F32, true}, {F16, F16, true}, {BF16, BF16, true}, {Q8_0, Q8_0, true},
		{Q4_0, Q8_0, true}, {Q4_K, Q8_K, true}, {Q6_K, Q8_K, true},
		{Q4_1, Q8_1, true}, {Q5_0, Q8_0, true}, {Q5_1, Q8_1, true}, {IQ4_NL, Q8_0, true},
		{Q2_K, Q8_K, true}, {Q3_K, Q8_K, true}, {Q5_K, Q8_K, true}, {IQ4_XS, Q8_K, true},
		{MXFP4, Q8_0, true},
		{Q8_K, 0, false}, {Q8_1, 0, false}, {IQ2_XXS, 0, false}, {Type(999), 0, false},
	}
	for _, tt := range tests {
		got, ok := VecDotType(tt.w)
		if got != tt.want || ok != tt.ok {
			t.Errorf("VecDotType(%s) = %s, %v, want %s, %v", tt.w, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		call    func() error
		wantErr string
	}{
		{"quantize unsupported", func() error { return Quantize(Q5_K, make([]byte, 176), make([]float32, 256)) }, "unsupported"},
		{"quantize unknown", func() error { return Quantize(Type(77), nil, nil) }, "unsupported"},
		{"quantize partial block", func() error { return Quantize(Q8_0, make([]byte, 34), make([]float32, 31)) }, "multiple"},
		{"quantize short dst", func() error { return Quantize(Q4_K, make([]byte, 143), make([]float32, 256)) }, "bytes"},
		{"quantize long dst", func() error { return Quantize(F16, make([]byte, 10), make([]float32, 4)) }, "bytes"},
		{"dequantize unsupported", func() error { return Dequantize(IQ2_XXS, make([]float32, 256), make([]byte, 66)) }, "unsupported"},
		{"dequantize short src", func() error { return Dequantize(Q6_K, make([]float32, 256), make([]byte, 209)) }, "bytes"},
		{"dequantize partial block", func() error { return Dequantize(Q8_K, make([]float32, 100), make([]byte, 292)) }, "multiple"},
		{"vecdot unsupported", func() error { _, err := VecDot(Q8_K, 256, make([]byte, 292), make([]byte, 292)); return err }, "unsupported"},
		{"vecdot partial block", func() error { _, err := VecDot(Q4_0, 16, make([]byte, 18), make([]byte, 34)); return err }, "multiple"},
		{"vecdot negative n", func() error { _, err := VecDot(F32, -4, nil, nil); return err }, "multiple"},
		{"vecdot short w", func() error { _, err := VecDot(Q4_K, 256, make([]byte, 100), make([]byte, 292)); return err }, "bytes"},
		{"vecdot short x", func() error { _, err := VecDot(Q6_K, 256, make([]byte, 210), make([]byte, 291)); return err }, "bytes"},
	}
	for _, tt := range tests {
		err := tt.call()
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want one mentioning %q", tt.name, err, tt.wantErr)
		}
	}
	// Bytes past n elements are ignored, and n = 0 is an empty sum.
	if got, err := VecDot(F32, 2, f32W, f32X); err != nil || got != -1.5 {
		t.Errorf("VecDot over a prefix = %g, %v, want -1.5", got, err)
	}
	if got, err := VecDot(Q4_K, 0, nil, nil); err != nil || got != 0 {
		t.Errorf("VecDot of nothing = %g, %v, want 0", got, err)
	}
}

// TestDotKernelMisuse: the kernels have no error result and panic on
// arguments VecDot would reject.
func TestDotKernelMisuse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func()
	}{
		{"short x", func() { DotQ8_0(32, q80W1, q80X1[:33]) }},
		{"short w", func() { DotQ4_K(256, q4KBlock[:100], q8KX) }},
		{"partial block", func() { DotQ6_K(128, q6KBlock, q8KX) }},
		{"negative n", func() { DotF32(-1, f32W, f32X) }},
	}
	for _, tt := range tests {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tt.name)
				}
			}()
			tt.call()
		}()
	}
}

// TestNonFiniteInput: garbage in gives garbage out, never a panic.
func TestNonFiniteInput(t *testing.T) {
	t.Parallel()
	src := make([]float32, 256)
	for i := range src {
		src[i] = float32(i) - 100
	}
	src[3], src[40], src[77] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
	for _, typ := range []Type{F32, F16, BF16, Q8_0, Q4_0, Q8_K, Q4_K, Q6_K} {
		n, _ := typ.RowBytes(len(src))
		buf := make([]byte, n)
		if err := Quantize(typ, buf, src); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		if err := Dequantize(typ, make([]float32, len(src)), buf); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	big := make([]float32, 256)
	for i := range big {
		big[i] = 1e30 * float32(i%7-3)
	}
	for _, typ := range []Type{Q4_K, Q6_K} {
		n, _ := typ.RowBytes(len(big))
		buf := make([]byte, n)
		if err := Quantize(typ, buf, big); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		out := make([]float32, len(big))
		if err := Dequantize(typ, out, buf); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		for i, v := range out {
			if math.IsNaN(float64(v)) {
				t.Errorf("%s: element %d of huge input dequantised to NaN", typ, i)
				break
			}
		}
	}
}

// TestRounding pins the two rounding rules the reference quantizers use:
// C's roundf (Q8_0) and ggml's nearest_int (Q8_K).
func TestRounding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f             float32
		away, nearest int32
	}{
		{0, 0, 0},
		{0.5, 1, 0},
		{-0.5, -1, 0},
		{0.49999997, 0, 0},
		{1.5, 2, 2},
		{2.5, 3, 2},
		{-2.5, -3, -2},
		{-3.5, -4, -4},
		{126.49, 126, 126},
		{-127.5, -128, -128},
		{4194302.5, 4194303, 4194302},
		{8388607.5, 8388608, 8388608}, // past nearest_int's range: the fallback
		{1e9, 1000000000, 1000000000},
	}
	for _, tt := range tests {
		if got := roundAway(tt.f); got != tt.away {
			t.Errorf("roundAway(%v) = %d, want %d", tt.f, got, tt.away)
		}
		if got := nearestInt(tt.f); got != tt.nearest {
			t.Errorf("nearestInt(%v) = %d, want %d", tt.f, got, tt.nearest)
		}
	}
}
