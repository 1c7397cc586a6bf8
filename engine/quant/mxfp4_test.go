package quant

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"testing"
)

// TestMXFP4Reference checks MXFP4's quantiser, dequantiser and dot product
// against ggml's output on the same data (testdata/README.md): the bytes of
// every block and every value and dot bit for bit.
func TestMXFP4Reference(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/mxfp4_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		N       int    `json:"n"`
		Src     string `json:"src_f32le"`
		Q       string `json:"quantized"`
		Deq     string `json:"dequantized_f32le"`
		X       string `json:"x"`
		Dot     string `json:"dot_f32le"`
		WRand   string `json:"w_random"`
		DeqRand string `json:"dequantized_random_f32le"`
		DotRand string `json:"dot_random_f32le"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	floats := func(b []byte) []float32 {
		f := make([]float32, len(b)/4)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return f
	}
	src, x := floats(unhex(ref.Src)), unhex(ref.X)

	q := make([]byte, ref.N/32*17)
	if err := Quantize(MXFP4, q, src); err != nil {
		t.Fatal(err)
	}
	if want := unhex(ref.Q); string(q) != string(want) {
		for i := range q {
			if q[i] != want[i] {
				t.Errorf("quantized byte %d (block %d) = %#x, ggml %#x", i, i/17, q[i], want[i])
				break
			}
		}
	}
	for _, c := range []struct {
		name        string
		w, deq, dot []byte
	}{
		{"quantized", unhex(ref.Q), unhex(ref.Deq), unhex(ref.Dot)},
		{"random", unhex(ref.WRand), unhex(ref.DeqRand), unhex(ref.DotRand)},
	} {
		got := make([]float32, ref.N)
		if err := Dequantize(MXFP4, got, c.w); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, want := range floats(c.deq) {
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad++; bad <= 3 {
					t.Errorf("%s: element %d = %g, ggml %g", c.name, i, got[i], want)
				}
			}
		}
		d, err := VecDot(MXFP4, ref.N, c.w, x)
		if err != nil {
			t.Fatal(err)
		}
		if want := floats(c.dot)[0]; math.Float32bits(d) != math.Float32bits(want) {
			t.Errorf("%s: dot = %.9g, ggml %.9g", c.name, d, want)
		}
	}
}

// TestE8M0Half checks the scale at the edges: the two denormal exponents,
// the first normal one, and one with a large exponent.
func TestE8M0Half(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e    uint8
		want float64
	}{{0, 0x1p-128}, {1, 0x1p-127}, {2, 0x1p-126}, {127, 0.5}, {128, 1}, {254, 0x1p126}} {
		if got := E8M0Half(c.e); float64(got) != c.want {
			t.Errorf("E8M0Half(%d) = %g, want %g", c.e, got, c.want)
		}
	}
}
