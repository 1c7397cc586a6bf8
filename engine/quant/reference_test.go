package quant

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"testing"
)

// TestGGMLReference checks Dequantize and the Dot kernels of the newer
// types against ggml's own output on the same blocks (testdata/README.md):
// every dequantised value and every dot product, bit for bit.
func TestGGMLReference(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/ggml_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Types map[string]struct {
			N      int    `json:"n"`
			W      string `json:"w"`
			Deq    string `json:"dequantized_f32le"`
			X      string `json:"x"`
			DotF32 string `json:"dot_f32le"`
		} `json:"types"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	want := []Type{Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS}
	if len(ref.Types) != len(want) {
		t.Fatalf("reference has %d types, want %d", len(ref.Types), len(want))
	}
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, typ := range want {
		r, ok := ref.Types[typ.String()]
		if !ok {
			t.Errorf("%s: missing from the reference", typ)
			continue
		}
		w, deq, x, dot := unhex(r.W), unhex(r.Deq), unhex(r.X), unhex(r.DotF32)
		got := make([]float32, r.N)
		if err := Dequantize(typ, got, w); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		bad := 0
		for i, v := range got {
			if wantBits := binary.LittleEndian.Uint32(deq[4*i:]); math.Float32bits(v) != wantBits {
				if bad++; bad <= 3 {
					t.Errorf("%s: element %d = %g, ggml %g", typ, i, v, math.Float32frombits(wantBits))
				}
			}
		}
		gotDot, err := VecDot(typ, r.N, w, x)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if wantBits := binary.LittleEndian.Uint32(dot); math.Float32bits(gotDot) != wantBits {
			t.Errorf("%s: dot = %.9g, ggml %.9g", typ, gotDot, math.Float32frombits(wantBits))
		}
	}
}
