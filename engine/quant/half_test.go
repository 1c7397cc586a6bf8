package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16ToF32(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    uint16
		want uint32 // float32 bits
	}{
		{"zero", 0x0000, 0x00000000},
		{"negative zero", 0x8000, 0x80000000},
		{"one", 0x3c00, math.Float32bits(1)},
		{"minus two", 0xc000, math.Float32bits(-2)},
		{"smallest subnormal", 0x0001, math.Float32bits(0x1p-24)},
		{"negative smallest subnormal", 0x8001, math.Float32bits(-0x1p-24)},
		{"largest subnormal", 0x03ff, math.Float32bits(1023 * 0x1p-24)},
		{"smallest normal", 0x0400, math.Float32bits(0x1p-14)},
		{"max", 0x7bff, math.Float32bits(65504)},
		{"+inf", 0x7c00, 0x7f800000},
		{"-inf", 0xfc00, 0xff800000},
		{"quiet nan", 0x7e00, 0x7fc00000},
		{"signalling nan keeps payload", 0x7c01, 0x7f802000},
		{"negative nan", 0xfe00, 0xffc00000},
	}
	for _, tt := range tests {
		if got := math.Float32bits(F16ToF32(tt.h)); got != tt.want {
			t.Errorf("%s: F16ToF32(%#04x) = %#08x, want %#08x", tt.name, tt.h, got, tt.want)
		}
	}
}

// TestF16ToF32Exhaustive checks every finite half against the definition:
// (-1)^s * m * 2^-24 for subnormals, (-1)^s * (1024+m) * 2^(e-25) otherwise.
func TestF16ToF32Exhaustive(t *testing.T) {
	t.Parallel()
	for i := range 1 << 16 {
		h := uint16(i)
		e, m := int(h>>10&0x1f), float64(h&0x3ff)
		if e == 0x1f {
			continue
		}
		want := m * 0x1p-24
		if e != 0 {
			want = math.Ldexp(1024+m, e-25)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if got := F16ToF32(h); float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

func TestF32ToF16(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    uint32 // float32 bits
		want uint16
	}{
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"one", math.Float32bits(1), 0x3c00},
		{"max", math.Float32bits(65504), 0x7bff},
		{"below the overflow tie", math.Float32bits(65519), 0x7bff},
		{"overflow tie rounds to inf", math.Float32bits(65520), 0x7c00},
		{"overflow", math.Float32bits(1e6), 0x7c00},
		{"negative overflow", math.Float32bits(-1e6), 0xfc00},
		{"+inf", 0x7f800000, 0x7c00},
		{"-inf", 0xff800000, 0xfc00},
		{"quiet nan", 0x7fc00000, 0x7e00},
		{"nan with only low payload stays nan", 0x7f800001, 0x7e00},
		{"negative nan", 0xffc00000, 0xfe00},
		{"tie to even (down)", 0x3f801000, 0x3c00},     // 1 + 2^-11
		{"tie to even (up)", 0x3f803000, 0x3c02},       // 1 + 3*2^-11
		{"just above a tie", 0x3f801001, 0x3c01},       // 1 + 2^-11 + 2^-23
		{"just below a tie", 0x3f800fff, 0x3c00},       // 1 + 2^-11 - 2^-23
		{"smallest subnormal", 0x33800000, 0x0001},     // 2^-24
		{"half the smallest subnormal", 0x33000000, 0}, // 2^-25: tie to even zero
		{"above half the smallest", 0x33000001, 0x0001},
		{"subnormal tie to even", 0x33c00000, 0x0002},         // 3*2^-25
		{"subnormal rounds up to normal", 0x387fe000, 0x0400}, // 1023.5*2^-24
		{"smallest normal", 0x38800000, 0x0400},               // 2^-14
		{"negative subnormal", 0xb3800000, 0x8001},
		{"float32 subnormal", 0x00000001, 0x0000},
		{"far below", math.Float32bits(1e-10), 0x0000},
	}
	for _, tt := range tests {
		if got := F32ToF16(math.Float32frombits(tt.f)); got != tt.want {
			t.Errorf("%s: F32ToF16(%#08x) = %#04x, want %#04x", tt.name, tt.f, got, tt.want)
		}
	}
}

// TestF16RoundTrip: every half survives F16ToF32 then F32ToF16; NaNs stay NaN.
func TestF16RoundTrip(t *testing.T) {
	t.Parallel()
	for i := range 1 << 16 {
		h := uint16(i)
		got := F32ToF16(F16ToF32(h))
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("nan %#04x became %#04x", h, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("round trip of %#04x gave %#04x", h, got)
		}
	}
}

// TestF32ToF16Nearest checks on random floats in the half range that the
// result is a nearest half, and the even one on ties.
func TestF32ToF16Nearest(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		// Exponents from far below the subnormals to just past the maximum.
		f := float32(math.Ldexp(r.Float64()+0.5, r.IntN(45)-30))
		if r.IntN(2) == 0 {
			f = -f
		}
		h := F32ToF16(f)
		if h&0x7fff >= 0x7c00 {
			if abs32(f) < 65520 {
				t.Fatalf("F32ToF16(%g) overflowed to %#04x", f, h)
			}
			continue
		}
		got := float64(F16ToF32(h))
		err := math.Abs(got - float64(f))
		for _, nb := range []uint16{h - 1, h + 1} {
			if h&0x7fff == 0 || nb&0x7fff >= 0x7c00 {
				continue // no neighbour on that side within the same sign
			}
			nerr := math.Abs(float64(F16ToF32(nb)) - float64(f))
			if nerr < err || (nerr == err && h&1 == 1) {
				t.Fatalf("F32ToF16(%g) = %#04x (%g), but %#04x (%g) is nearer or the even tie",
					f, h, got, nb, F16ToF32(nb))
			}
		}
	}
}

func TestBF16(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    uint32
		want uint16
	}{
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"one", 0x3f800000, 0x3f80},
		{"tie to even (down)", 0x3f808000, 0x3f80},
		{"tie to even (up)", 0x3f818000, 0x3f82},
		{"just above a tie", 0x3f808001, 0x3f81},
		{"just below a tie", 0x3f807fff, 0x3f80},
		{"largest float rounds to inf", 0x7f7fffff, 0x7f80},
		{"+inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"quiet nan", 0x7fc00000, 0x7fc0},
		{"signalling nan becomes quiet, not inf", 0x7f800001, 0x7fc0},
		{"negative nan keeps top payload", 0xff812345, 0xffc1},
		{"subnormal kept", 0x00010000, 0x0001},
		{"subnormal tie to even", 0x00008000, 0x0000},
		{"subnormal tie up", 0x00018000, 0x0002},
	}
	for _, tt := range tests {
		if got := F32ToBF16(math.Float32frombits(tt.f)); got != tt.want {
			t.Errorf("%s: F32ToBF16(%#08x) = %#04x, want %#04x", tt.name, tt.f, got, tt.want)
		}
	}
	back := []struct {
		h    uint16
		want uint32
	}{
		{0x3f80, 0x3f800000}, {0xc000, 0xc0000000}, {0x7f80, 0x7f800000},
		{0x0001, 0x00010000}, {0x8000, 0x80000000}, {0x7fc1, 0x7fc10000},
	}
	for _, tt := range back {
		if got := math.Float32bits(BF16ToF32(tt.h)); got != tt.want {
			t.Errorf("BF16ToF32(%#04x) = %#08x, want %#08x", tt.h, got, tt.want)
		}
	}
}
