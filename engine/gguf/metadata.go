package gguf

import (
	"math"
	"slices"
)

// Metadata is the ordered set of key/value pairs of a GGUF file. It is
// immutable and safe for concurrent use. A nil *Metadata is empty.
//
// The typed getters report false when the key is absent or its value has
// another type or does not fit; they never convert strings to numbers.
type Metadata struct {
	keys []string // file order
	vals map[string]Value
}

// Keys returns the keys in file order (a fresh slice).
func (m *Metadata) Keys() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.keys)
}

// Len returns the number of key/value pairs.
func (m *Metadata) Len() int {
	if m == nil {
		return 0
	}
	return len(m.keys)
}

// Value returns the value stored under key.
func (m *Metadata) Value(key string) (Value, bool) {
	if m == nil {
		return Value{}, false
	}
	v, ok := m.vals[key]
	return v, ok
}

// String returns a STRING value.
func (m *Metadata) String(key string) (string, bool) {
	v, _ := m.Value(key)
	s, ok := v.x.(string)
	return s, ok
}

// Uint returns an integer value of any integer type that is >= 0.
func (m *Metadata) Uint(key string) (uint64, bool) {
	v, _ := m.Value(key)
	if u, ok := v.x.(uint64); ok {
		return u, true
	}
	i, ok := intOf(v.x)
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Int returns an integer value of any integer type that fits an int64.
func (m *Metadata) Int(key string) (int64, bool) {
	v, _ := m.Value(key)
	return intOf(v.x)
}

// Float returns a FLOAT32 or FLOAT64 value.
func (m *Metadata) Float(key string) (float64, bool) {
	v, _ := m.Value(key)
	switch x := v.x.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Bool returns a BOOL value.
func (m *Metadata) Bool(key string) (bool, bool) {
	v, _ := m.Value(key)
	b, ok := v.x.(bool)
	return b, ok
}

// Strings returns an ARRAY of STRING as a fresh slice.
func (m *Metadata) Strings(key string) ([]string, bool) {
	v, _ := m.Value(key)
	s, ok := v.x.([]string)
	return slices.Clone(s), ok
}

// Float32s returns an ARRAY of FLOAT32 as a fresh slice.
func (m *Metadata) Float32s(key string) ([]float32, bool) {
	v, _ := m.Value(key)
	s, ok := v.x.([]float32)
	return slices.Clone(s), ok
}

// Int32s returns an ARRAY of any integer type whose values all fit an int32,
// as a fresh slice.
func (m *Metadata) Int32s(key string) ([]int32, bool) {
	v, _ := m.Value(key)
	if v.Type() != TypeArray {
		return nil, false
	}
	if s, ok := v.x.([]int32); ok {
		return slices.Clone(s), true
	}
	switch v.elem {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeUint64, TypeInt64:
	default:
		return nil, false
	}
	n := v.Len()
	out := make([]int32, n)
	for i := range n {
		w, ok := intOf(v.index(i).x)
		if !ok || w < math.MinInt32 || w > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(w)
	}
	return out, true
}

// intOf converts an integer scalar to int64, reporting false for non-integers
// and for uint64 values above MaxInt64.
func intOf(x any) (int64, bool) {
	switch x := x.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// set stores v under key, keeping the key's first position when it exists.
func (m *Metadata) set(key string, v Value) {
	if m.vals == nil {
		m.vals = make(map[string]Value)
	}
	if _, ok := m.vals[key]; !ok {
		m.keys = append(m.keys, key)
	}
	m.vals[key] = v
}
