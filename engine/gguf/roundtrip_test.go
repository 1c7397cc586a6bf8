package gguf

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"rill/engine/quant"
)

// everyValue has one key per scalar type and per array element type.
var everyValue = []struct {
	key  string
	v    any
	typ  ValueType
	elem ValueType
}{
	{"u8", uint8(200), TypeUint8, 0},
	{"i8", int8(-100), TypeInt8, 0},
	{"u16", uint16(60000), TypeUint16, 0},
	{"i16", int16(-30000), TypeInt16, 0},
	{"u32", uint32(4000000000), TypeUint32, 0},
	{"i32", int32(-2000000000), TypeInt32, 0},
	{"f32", float32(1e-5), TypeFloat32, 0},
	{"bool.true", true, TypeBool, 0},
	{"bool.false", false, TypeBool, 0},
	{"str", "héllo, wörld", TypeString, 0},
	{"str.empty", "", TypeString, 0},
	{"u64", uint64(math.MaxUint64), TypeUint64, 0},
	{"i64", int64(math.MinInt64), TypeInt64, 0},
	{"f64", math.Pi, TypeFloat64, 0},
	{"a.u8", []uint8{0, 1, 255}, TypeArray, TypeUint8},
	{"a.i8", []int8{-128, 0, 127}, TypeArray, TypeInt8},
	{"a.u16", []uint16{1, 65535}, TypeArray, TypeUint16},
	{"a.i16", []int16{-32768, 32767}, TypeArray, TypeInt16},
	{"a.u32", []uint32{7, math.MaxUint32}, TypeArray, TypeUint32},
	{"a.i32", []int32{2, 3, 3, 6, -1}, TypeArray, TypeInt32},
	{"a.f32", []float32{0, -1.5, float32(math.Inf(1))}, TypeArray, TypeFloat32},
	{"a.bool", []bool{true, false, true}, TypeArray, TypeBool},
	{"a.str", []string{"<unk>", "", "▁the"}, TypeArray, TypeString},
	{"a.u64", []uint64{math.MaxUint64, 0}, TypeArray, TypeUint64},
	{"a.i64", []int64{math.MinInt64, math.MaxInt64}, TypeArray, TypeInt64},
	{"a.f64", []float64{math.SmallestNonzeroFloat64, -2}, TypeArray, TypeFloat64},
	{"a.empty", []string{}, TypeArray, TypeString},
	{"a.nil", []float32(nil), TypeArray, TypeFloat32},
}

// testTensor is a tensor with deterministic bytes.
type testTensor struct {
	name  string
	typ   quant.Type
	shape []int
}

var testTensors = []testTensor{
	{"f32.matrix", quant.F32, []int{3, 2}},
	{"f16.vector", quant.F16, []int{5}},
	{"q8_0", quant.Q8_0, []int{64, 2}},
	{"q4_k", quant.Q4_K, []int{256, 1, 1, 2}},
	{"i8.odd", quant.I8, []int{7}},
	{"empty", quant.F32, []int{4, 0}},
	{"scalar", quant.F32, []int{}},
}

func tensorBytes(t testing.TB, tt testTensor, seed byte) []byte {
	t.Helper()
	size, err := dataSize(tt.typ, tt.shape)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, align := range []uint32{0, 1, 8, 32, 64, 4096} { // 0: not set
		t.Run(Value{typ: TypeUint32, x: align}.String(), func(t *testing.T) {
			t.Parallel()
			w := NewWriter()
			for _, e := range everyValue {
				if err := w.Set(e.key, e.v); err != nil {
					t.Fatalf("Set(%q): %v", e.key, err)
				}
			}
			if align != 0 {
				if err := w.Set(KeyAlignment, align); err != nil {
					t.Fatal(err)
				}
			}
			datas := make([][]byte, len(testTensors))
			for i, tt := range testTensors {
				datas[i] = tensorBytes(t, tt, byte(i))
				if err := w.AddTensor(tt.name, tt.typ, tt.shape, datas[i]); err != nil {
					t.Fatalf("AddTensor(%q): %v", tt.name, err)
				}
			}
			var buf bytes.Buffer
			n, err := w.WriteTo(&buf)
			if err != nil {
				t.Fatal(err)
			}
			data := buf.Bytes()
			if n != int64(len(data)) {
				t.Fatalf("WriteTo returned %d, wrote %d", n, len(data))
			}
			f, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			wantAlign := int(align)
			if align == 0 {
				wantAlign = DefaultAlignment
			}
			if f.Version != Version || f.Alignment != wantAlign {
				t.Fatalf("version %d alignment %d, want %d %d", f.Version, f.Alignment, Version, wantAlign)
			}
			if f.DataOffset%int64(wantAlign) != 0 || len(data)%wantAlign != 0 {
				t.Fatalf("data offset %d or file size %d not aligned to %d", f.DataOffset, len(data), wantAlign)
			}

			wantKeys := make([]string, 0, len(everyValue)+1)
			for _, e := range everyValue {
				wantKeys = append(wantKeys, e.key)
			}
			if align != 0 {
				wantKeys = append(wantKeys, KeyAlignment)
			}
			if got := f.Metadata.Keys(); !slices.Equal(got, wantKeys) {
				t.Fatalf("keys %q, want %q", got, wantKeys)
			}
			for _, e := range everyValue {
				v, ok := f.Metadata.Value(e.key)
				if !ok {
					t.Fatalf("key %q missing", e.key)
				}
				if v.Type() != e.typ || (e.typ == TypeArray && v.ElemType() != e.elem) {
					t.Errorf("key %q: type %s/%s, want %s/%s", e.key, v.Type(), v.ElemType(), e.typ, e.elem)
				}
				want := e.v
				if e.key == "a.nil" {
					want = []float32{}
				}
				if got := v.Any(); !reflect.DeepEqual(got, want) {
					t.Errorf("key %q: got %#v, want %#v", e.key, got, want)
				}
			}

			if len(f.Tensors) != len(testTensors) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(testTensors))
			}
			for i, tt := range testTensors {
				ti := f.Tensors[i]
				if ti.Name != tt.name || ti.Type != tt.typ || !slices.Equal(ti.Shape, tt.shape) {
					t.Errorf("tensor %d: %s %s %v, want %s %s %v", i, ti.Name, ti.Type, ti.Shape, tt.name, tt.typ, tt.shape)
				}
				if ti.Offset%int64(wantAlign) != 0 {
					t.Errorf("tensor %q: offset %d not aligned to %d", ti.Name, ti.Offset, wantAlign)
				}
				v, ok := f.Tensor(tt.name)
				if !ok || !bytes.Equal(v.Data, datas[i]) {
					t.Errorf("tensor %q: data differ (found %v)", tt.name, ok)
				}
			}
			checkViews(t, f, data)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Tensor(testTensors[0].name); ok {
				t.Error("Tensor after Close reported true")
			}
			if err := f.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// TestNestedArrays reads hand-made nested arrays, writes them back through
// a Writer and reads them again.
func TestNestedArrays(t *testing.T) {
	t.Parallel()
	r := rawHeader(3, 0, 2)
	// [[1, 2], []] as ARRAY of ARRAY of UINT16 and of empty INT8.
	r.str("nested").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(2)
	r.u32(uint32(TypeUint16)).u64(2).raw([]byte{1, 0, 2, 0})
	r.u32(uint32(TypeInt8)).u64(0)
	// [[["a"]]]: three levels, the deepest allowed.
	r.str("deep").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1)
	r.u32(uint32(TypeArray)).u64(1).u32(uint32(TypeString)).u64(1).str("a")

	check := func(f *File) {
		t.Helper()
		v, _ := f.Metadata.Value("nested")
		inner, ok := v.Any().([]Value)
		if !ok || len(inner) != 2 || v.ElemType() != TypeArray {
			t.Fatalf("nested: %#v", v.Any())
		}
		if got := inner[0].Any(); !reflect.DeepEqual(got, []uint16{1, 2}) {
			t.Errorf("nested[0] = %#v", got)
		}
		if got := inner[1].Any(); !reflect.DeepEqual(got, []int8{}) || inner[1].ElemType() != TypeInt8 {
			t.Errorf("nested[1] = %#v", got)
		}
		if got, want := v.String(), "[[1, 2], []]"; got != want {
			t.Errorf("String = %s, want %s", got, want)
		}
		d, _ := f.Metadata.Value("deep")
		if got, want := d.String(), `[[["a"]]]`; got != want {
			t.Errorf("deep = %s, want %s", got, want)
		}
	}
	f, err := Parse(r.b)
	if err != nil {
		t.Fatal(err)
	}
	check(f)

	w := NewWriter()
	for _, k := range f.Metadata.Keys() {
		v, _ := f.Metadata.Value(k)
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f2, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	check(f2)
}

func TestWriterErrors(t *testing.T) {
	t.Parallel()
	f32x4 := make([]byte, 16)
	tests := []struct {
		name string
		do   func(w *Writer) error
		want string
	}{
		{"int", func(w *Writer) error { return w.Set("k", 1) }, "unsupported value type int"},
		{"struct", func(w *Writer) error { return w.Set("k", struct{}{}) }, "unsupported value type struct"},
		{"nested slice", func(w *Writer) error { return w.Set("k", [][]int32{{1}}) }, "unsupported value type"},
		{"zero Value", func(w *Writer) error { return w.Set("k", Value{}) }, "zero Value"},
		{"empty key", func(w *Writer) error { return w.Set("", "x") }, "empty metadata key"},
		{"alignment type", func(w *Writer) error { return w.Set(KeyAlignment, uint64(32)) }, "must be UINT32"},
		{"alignment zero", func(w *Writer) error { return w.Set(KeyAlignment, uint32(0)) }, "power of two"},
		{"alignment odd", func(w *Writer) error { return w.Set(KeyAlignment, uint32(48)) }, "power of two"},
		{"empty name", func(w *Writer) error { return w.AddTensor("", quant.F32, []int{4}, f32x4) }, "empty tensor name"},
		{"duplicate", func(w *Writer) error {
			_ = w.AddTensor("t", quant.F32, []int{4}, f32x4)
			return w.AddTensor("t", quant.F32, []int{4}, f32x4)
		}, `duplicate tensor "t"`},
		{"short data", func(w *Writer) error { return w.AddTensor("t", quant.F32, []int{5}, f32x4) }, "16 data bytes"},
		{"too many dims", func(w *Writer) error { return w.AddTensor("t", quant.F32, []int{1, 1, 1, 1, 4}, f32x4) }, "5 dimensions"},
		{"negative dim", func(w *Writer) error { return w.AddTensor("t", quant.F32, []int{4, -1}, f32x4) }, "negative"},
		{"unknown type", func(w *Writer) error { return w.AddTensor("t", quant.Type(4), []int{4}, f32x4) }, "unknown tensor type 4"},
		{"partial block", func(w *Writer) error { return w.AddTensor("t", quant.Q8_0, []int{16}, f32x4) }, "whole number of Q8_0 blocks"},
		{"overflow", func(w *Writer) error {
			return w.AddTensor("t", quant.F32, []int{math.MaxInt64 / 2}, f32x4)
		}, "overflows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.do(NewWriter())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestWriterReplace checks that setting a key twice keeps its position and
// the last value, and that the alignment follows the last setting.
func TestWriterReplace(t *testing.T) {
	t.Parallel()
	w := NewWriter()
	for _, kv := range []struct {
		k string
		v any
	}{{"a", "1"}, {KeyAlignment, uint32(64)}, {"b", uint8(2)}, {"a", int64(3)}, {KeyAlignment, uint32(16)}} {
		if err := w.Set(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Metadata.Keys(), []string{"a", KeyAlignment, "b"}; !slices.Equal(got, want) {
		t.Errorf("keys %q, want %q", got, want)
	}
	if v, ok := f.Metadata.Int("a"); !ok || v != 3 {
		t.Errorf("a = %d, %v; want 3", v, ok)
	}
	if f.Alignment != 16 || buf.Len()%16 != 0 {
		t.Errorf("alignment %d, size %d; want 16", f.Alignment, buf.Len())
	}
}

// failWriter fails after accepting limit bytes.
type failWriter struct{ limit int }

func (w *failWriter) Write(b []byte) (int, error) {
	if len(b) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errShortWrite
	}
	w.limit -= len(b)
	return len(b), nil
}

var errShortWrite = errors.New("short write")

func TestWriteToError(t *testing.T) {
	t.Parallel()
	w := NewWriter()
	if err := w.Set("k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("t", quant.F32, []int{64}, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 10, 100, 200} {
		n, err := w.WriteTo(&failWriter{limit: limit})
		if err == nil || n != int64(limit) {
			t.Errorf("limit %d: n %d err %v; want n=%d and an error", limit, n, err, limit)
		}
	}
}

func TestValueString(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 40) // 80 bytes
	tests := []struct {
		v    any
		want string
	}{
		{uint32(2048), "2048"},
		{int8(-3), "-3"},
		{float32(9.999999747378752e-06), "1e-05"},
		{math.Pi, "3.141592653589793"},
		{true, "true"},
		{"llama", `"llama"`},
		{long, `"` + strings.Repeat("é", 30) + `"...`},
		{[]int32{2, 3, 3, 6, 6, 6, 6, 6}, "[2, 3, 3, 6, 6, 6, ... (8 total)]"},
		{[]string{"<unk>", "<s>"}, `["<unk>", "<s>"]`},
		{[]bool{}, "[]"},
	}
	for _, tc := range tests {
		v, ok := scalarValue(tc.v)
		if !ok {
			v, _ = arrayValue(tc.v)
		}
		if got := v.String(); got != tc.want {
			t.Errorf("String(%#v) = %s, want %s", tc.v, got, tc.want)
		}
	}
	if got := (Value{}).String(); got != "<nil>" {
		t.Errorf("zero Value String = %s", got)
	}
	if (Value{}).Type().Valid() || (Value{}).Any() != nil {
		t.Error("zero Value has a valid type or a non-nil Any")
	}
	if got := ValueType(13).String(); got != "type(13)" {
		t.Errorf("ValueType(13) = %s", got)
	}
}
