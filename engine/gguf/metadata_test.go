package gguf

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

// parsedMetadata writes kvs with a Writer and parses them back.
func parsedMetadata(t *testing.T, kvs map[string]any) *Metadata {
	t.Helper()
	w := NewWriter()
	for k, v := range kvs {
		if err := w.Set(k, v); err != nil {
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
	return f.Metadata
}

func TestMetadataGetters(t *testing.T) {
	t.Parallel()
	m := parsedMetadata(t, map[string]any{
		"u8": uint8(7), "i8": int8(-7), "u16": uint16(700), "i16": int16(-700),
		"u32": uint32(70000), "i32": int32(-70000), "u64": uint64(math.MaxUint64),
		"u64.small": uint64(42), "i64": int64(math.MinInt64), "f32": float32(0.5),
		"f64": 0.25, "bool": true, "str": "llama",
		"a.str": []string{"a", "b"}, "a.f32": []float32{1, 2}, "a.i32": []int32{-1, 2},
		"a.u8": []uint8{1, 255}, "a.u32.big": []uint32{1, math.MaxUint32},
		"a.i64": []int64{math.MinInt32, math.MaxInt32}, "a.f64": []float64{1},
		"a.empty.str": []string{}, "a.empty.i16": []int16{},
	})
	type result struct {
		v  any
		ok bool
	}
	get := map[string]func(string) result{
		"String":   func(k string) result { v, ok := m.String(k); return result{v, ok} },
		"Uint":     func(k string) result { v, ok := m.Uint(k); return result{v, ok} },
		"Int":      func(k string) result { v, ok := m.Int(k); return result{v, ok} },
		"Float":    func(k string) result { v, ok := m.Float(k); return result{v, ok} },
		"Bool":     func(k string) result { v, ok := m.Bool(k); return result{v, ok} },
		"Strings":  func(k string) result { v, ok := m.Strings(k); return result{v, ok} },
		"Float32s": func(k string) result { v, ok := m.Float32s(k); return result{v, ok} },
		"Int32s":   func(k string) result { v, ok := m.Int32s(k); return result{v, ok} },
	}
	tests := []struct {
		getter, key string
		want        any // nil: ok must be false
	}{
		{"String", "str", "llama"},
		{"String", "u8", nil},
		{"String", "absent", nil},
		{"String", "a.str", nil},
		{"Uint", "u8", uint64(7)},
		{"Uint", "u16", uint64(700)},
		{"Uint", "u32", uint64(70000)},
		{"Uint", "u64", uint64(math.MaxUint64)},
		{"Uint", "i8", nil},
		{"Uint", "i64", nil},
		{"Uint", "f32", nil},
		{"Uint", "bool", nil},
		{"Int", "i8", int64(-7)},
		{"Int", "i16", int64(-700)},
		{"Int", "i32", int64(-70000)},
		{"Int", "i64", int64(math.MinInt64)},
		{"Int", "u64.small", int64(42)},
		{"Int", "u64", nil},
		{"Int", "f64", nil},
		{"Int", "str", nil},
		{"Float", "f32", 0.5},
		{"Float", "f64", 0.25},
		{"Float", "u32", nil},
		{"Bool", "bool", true},
		{"Bool", "u8", nil},
		{"Strings", "a.str", []string{"a", "b"}},
		{"Strings", "a.empty.str", []string{}},
		{"Strings", "str", nil},
		{"Strings", "a.f32", nil},
		{"Float32s", "a.f32", []float32{1, 2}},
		{"Float32s", "a.f64", nil},
		{"Float32s", "f32", nil},
		{"Int32s", "a.i32", []int32{-1, 2}},
		{"Int32s", "a.u8", []int32{1, 255}},
		{"Int32s", "a.i64", []int32{math.MinInt32, math.MaxInt32}},
		{"Int32s", "a.empty.i16", []int32{}},
		{"Int32s", "a.u32.big", nil},
		{"Int32s", "a.empty.str", nil},
		{"Int32s", "a.f32", nil},
		{"Int32s", "i32", nil},
	}
	for _, tc := range tests {
		got := get[tc.getter](tc.key)
		if tc.want == nil {
			if got.ok {
				t.Errorf("%s(%q) = %#v, true; want false", tc.getter, tc.key, got.v)
			}
			continue
		}
		if !got.ok || !reflect.DeepEqual(got.v, tc.want) {
			t.Errorf("%s(%q) = %#v, %v; want %#v", tc.getter, tc.key, got.v, got.ok, tc.want)
		}
	}
}

// TestMetadataImmutable checks that slices handed out are copies.
func TestMetadataImmutable(t *testing.T) {
	t.Parallel()
	m := parsedMetadata(t, map[string]any{"s": []string{"a"}, "f": []float32{1}, "i": []int32{1}})
	s, _ := m.Strings("s")
	s[0] = "changed"
	f, _ := m.Float32s("f")
	f[0] = 9
	i, _ := m.Int32s("i")
	i[0] = 9
	v, _ := m.Value("s")
	v.Any().([]string)[0] = "changed"
	keys := m.Keys()
	keys[0] = "changed"
	if s, _ := m.Strings("s"); s[0] != "a" {
		t.Errorf("Strings changed to %q", s)
	}
	if f, _ := m.Float32s("f"); f[0] != 1 {
		t.Errorf("Float32s changed to %v", f)
	}
	if i, _ := m.Int32s("i"); i[0] != 1 {
		t.Errorf("Int32s changed to %v", i)
	}
	if k := m.Keys()[0]; k == "changed" {
		t.Error("Keys changed")
	}
}

func TestNilMetadata(t *testing.T) {
	t.Parallel()
	var m *Metadata
	if m.Len() != 0 || m.Keys() != nil {
		t.Error("nil Metadata is not empty")
	}
	if _, ok := m.String("x"); ok {
		t.Error("nil Metadata has a value")
	}
}
