package tensor

import (
	"math"
	"strings"
	"testing"

	"rill/engine/quant"
)

func TestMatrixValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		m    Matrix
		want string // "" for valid
	}{
		{"f32", Matrix{Type: quant.F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}, ""},
		{"q4_K", Matrix{Type: quant.Q4_K, Rows: 2, Cols: 256, Data: make([]byte, 288)}, ""},
		{"empty", Matrix{Type: quant.Q8_0, Rows: 0, Cols: 64}, ""},
		{"a type no backend multiplies is still well formed", Matrix{Type: quant.Q5_K, Rows: 1, Cols: 256, Data: make([]byte, 176)}, ""},
		{"unknown type", Matrix{Type: 99, Rows: 1, Cols: 1, Data: make([]byte, 4)}, "matrix rows"},
		{"negative", Matrix{Type: quant.F32, Rows: -1, Cols: 3}, "negative"},
		{"partial block", Matrix{Type: quant.Q8_0, Rows: 1, Cols: 40, Data: make([]byte, 34)}, "block"},
		{"short data", Matrix{Type: quant.F16, Rows: 2, Cols: 4, Data: make([]byte, 15)}, "bytes of data"},
		{"long data", Matrix{Type: quant.F16, Rows: 2, Cols: 4, Data: make([]byte, 17)}, "bytes of data"},
		{"overflow", Matrix{Type: quant.F32, Rows: math.MaxInt / 2, Cols: 4}, "too large"},
	} {
		err := c.m.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestSliceRows: a row range of a quantised matrix views exactly those
// rows' bytes, and appending to it cannot overwrite the rows after it.
func TestSliceRows(t *testing.T) {
	t.Parallel()
	data := make([]byte, 5*34) // 5 rows of one Q8_0 block
	for i := range data {
		data[i] = byte(i / 34)
	}
	m := Matrix{Type: quant.Q8_0, Rows: 5, Cols: 32, Data: data}
	s := m.SliceRows(1, 3)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Rows != 2 || s.Cols != 32 || s.Data[0] != 1 || s.Data[len(s.Data)-1] != 2 || cap(s.Data) != len(s.Data) {
		t.Errorf("SliceRows(1, 3) = %d rows from row %d to %d, cap %d", s.Rows, s.Data[0], s.Data[len(s.Data)-1], cap(s.Data))
	}
	if e := m.SliceRows(5, 5); e.Rows != 0 || len(e.Data) != 0 {
		t.Errorf("SliceRows(5, 5) has %d rows", e.Rows)
	}
	for _, r := range [][2]int{{-1, 2}, {3, 2}, {4, 6}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SliceRows(%d, %d) of 5 rows did not panic", r[0], r[1])
				}
			}()
			m.SliceRows(r[0], r[1])
		}()
	}
}

func TestKVSpec(t *testing.T) {
	t.Parallel()
	l := KVLayout{Blocks: 3, BlockSize: 16, Heads: 2, HeadDim: 12}
	if l.RowDim() != 16 || l.Size() != 3*16*2*16 || l.Row(2, 1, 5) != ((2*2+1)*16+5)*16 {
		t.Errorf("layout: RowDim %d, Size %d, Row(2,1,5) %d", l.RowDim(), l.Size(), l.Row(2, 1, 5))
	}
	if got, want := (KVSpec{Layers: 4, Type: quant.F16, Layout: l}).BytesPerBlock(), int64(4*2*16*2*16*2); got != want {
		t.Errorf("BytesPerBlock = %d, want %d", got, want)
	}
	q := KVLayout{Blocks: 3, BlockSize: 16, Heads: 2, HeadDim: 64}
	for _, c := range []struct {
		typ           quant.Type
		row, perBlock int64
	}{
		{quant.Q8_0, 2 * 34, 4 * 2 * 16 * 2 * 2 * 34},
		{quant.Q4_0, 2 * 18, 4 * 2 * 16 * 2 * 2 * 18},
		{quant.F16, 64 * 2, 4 * 2 * 16 * 2 * 64 * 2},
	} {
		s := KVSpec{Layers: 4, Type: c.typ, Layout: q}
		if int64(s.RowBytes()) != c.row || s.BytesPerBlock() != c.perBlock {
			t.Errorf("%v: RowBytes %d, BytesPerBlock %d, want %d, %d", c.typ, s.RowBytes(), s.BytesPerBlock(), c.row, c.perBlock)
		}
		kv, err := NewHostKV(s)
		if err != nil {
			t.Fatal(err)
		}
		if s.Quantized() != (kv.KQ != nil) || s.Quantized() && (int64(len(kv.KQ[0])) != c.perBlock/4/2*3 || kv.K16 != nil || kv.K32 != nil) {
			t.Errorf("%v cache holds the wrong arrays", c.typ)
		}
	}
	for _, c := range []struct {
		name string
		spec KVSpec
		want string
	}{
		{"no layers", KVSpec{Layers: 0, Type: quant.F16, Layout: l}, "layers"},
		{"q8_0 head of 12", KVSpec{Layers: 1, Type: quant.Q8_0, Layout: l}, "multiple of 32, not 12"},
		{"q4_0 head of 48", KVSpec{Layers: 1, Type: quant.Q4_0, Layout: KVLayout{Blocks: 1, BlockSize: 16, Heads: 1, HeadDim: 48}}, "multiple of 32, not 48"},
		{"q4_k elements", KVSpec{Layers: 1, Type: quant.Q4_K, Layout: l}, "want F16, F32, Q8_0 or Q4_0"},
		{"no blocks", KVSpec{Layers: 1, Type: quant.F32, Layout: KVLayout{BlockSize: 16, Heads: 1, HeadDim: 8}}, "kv layout"},
		{"too large", KVSpec{Layers: 1, Type: quant.F32, Layout: KVLayout{Blocks: math.MaxInt / 4, BlockSize: 16, Heads: 1, HeadDim: 8}}, "too large"},
	} {
		if _, err := NewHostKV(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestHostKVCopyBlock: CopyBlock copies the first n slots of every head of
// every layer, keys and values, and nothing else; and refuses blocks
// outside the cache.
func TestHostKVCopyBlock(t *testing.T) {
	t.Parallel()
	l := KVLayout{Blocks: 3, BlockSize: 4, Heads: 2, HeadDim: 8}
	for _, typ := range []quant.Type{quant.F16, quant.F32} {
		kv, err := NewHostKV(KVSpec{Layers: 2, Type: typ, Layout: l})
		if err != nil {
			t.Fatal(err)
		}
		if typ == quant.F16 && (kv.K16 == nil || kv.K32 != nil) || typ == quant.F32 && (kv.K32 == nil || kv.K16 != nil) {
			t.Fatalf("%v cache holds the wrong arrays", typ)
		}
		// Element value: 1 + its index, so every element differs.
		set := func(layer, i int, v float32) {
			if kv.K32 != nil {
				kv.K32[layer][i], kv.V32[layer][i] = v, -v
			} else {
				kv.K16[layer][i], kv.V16[layer][i] = quant.F32ToF16(v), quant.F32ToF16(-v)
			}
		}
		get := func(layer, i int) (float32, float32) {
			if kv.K32 != nil {
				return kv.K32[layer][i], kv.V32[layer][i]
			}
			return quant.F16ToF32(kv.K16[layer][i]), quant.F16ToF32(kv.V16[layer][i])
		}
		for layer := range 2 {
			for i := range l.Size() {
				set(layer, i, float32(1+i))
			}
		}
		kv.CopyBlock(0, 2, 3)
		for layer := range 2 {
			for h := range l.Heads {
				for slot := range l.BlockSize {
					for d := range l.RowDim() {
						i := l.Row(0, h, slot) + d
						want := float32(1 + i)
						if slot < 3 {
							want = float32(1 + l.Row(2, h, slot) + d)
						}
						if k, v := get(layer, i); k != want || v != -want {
							t.Fatalf("%v layer %d head %d slot %d [%d] = %g, %g, want %g, %g", typ, layer, h, slot, d, k, v, want, -want)
						}
					}
				}
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v: CopyBlock to block 3 of 3 did not panic", typ)
				}
			}()
			kv.CopyBlock(3, 0, 1)
		}()
	}
}

// TestHostKVCopyBlockQuantized: CopyBlock of a Q8_0 or Q4_0 cache copies
// the whole rows (blocks) of the first n slots of every head of every
// layer, keys and values, and nothing else.
func TestHostKVCopyBlockQuantized(t *testing.T) {
	t.Parallel()
	l := KVLayout{Blocks: 3, BlockSize: 4, Heads: 2, HeadDim: 64}
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		kv, err := NewHostKV(KVSpec{Layers: 2, Type: typ, Layout: l})
		if err != nil {
			t.Fatal(err)
		}
		row := kv.Spec().RowBytes()
		for layer := range 2 {
			for i := range kv.KQ[layer] {
				kv.KQ[layer][i], kv.VQ[layer][i] = byte(i*7+layer), byte(i*13+layer+1)
			}
		}
		kv.CopyBlock(0, 2, 3)
		for layer := range 2 {
			for h := range l.Heads {
				for slot := range l.BlockSize {
					for d := range row {
						i := kv.QOffset(l.Row(0, h, slot)) + d
						src := i
						if slot < 3 {
							src = kv.QOffset(l.Row(2, h, slot)) + d
						}
						if k, v := kv.KQ[layer][i], kv.VQ[layer][i]; k != byte(src*7+layer) || v != byte(src*13+layer+1) {
							t.Fatalf("%v layer %d head %d slot %d byte %d: %d, %d, want the bytes of offset %d", typ, layer, h, slot, d, k, v, src)
						}
					}
				}
			}
		}
	}
}

// TestRoPEScalingIdentity: only a scaling that changes nothing is the
// identity, so the kernels' plain path is taken exactly when it is exact.
func TestRoPEScalingIdentity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    *RoPEScaling
		want bool
	}{
		{nil, true},
		{&RoPEScaling{}, true},
		{&RoPEScaling{AttnFactor: 1}, true},
		{&RoPEScaling{AttnFactor: 1.1}, false},
		{&RoPEScaling{FreqFactors: []float32{1, 1}}, false},
		{&RoPEScaling{YaRN: YaRN{ExtFactor: 1, OrigContext: 4096, BetaFast: 32, BetaSlow: 1}}, false},
		{&RoPEScaling{YaRN: YaRN{OrigContext: 4096, BetaFast: 32, BetaSlow: 1}}, true},
	} {
		if got := c.s.Identity(); got != c.want {
			t.Errorf("%+v: Identity() = %v, want %v", c.s, got, c.want)
		}
	}
}
