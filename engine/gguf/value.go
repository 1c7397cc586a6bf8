package gguf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ValueType is a GGUF metadata value type, numbered as in the file format.
type ValueType uint32

// Metadata value types (gguf.h numbering).
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// typeNone marks "no type": the element type of a non-array, the type of a
// zero Value.
const typeNone ValueType = ^ValueType(0)

var typeNames = [...]string{
	TypeUint8:   "UINT8",
	TypeInt8:    "INT8",
	TypeUint16:  "UINT16",
	TypeInt16:   "INT16",
	TypeUint32:  "UINT32",
	TypeInt32:   "INT32",
	TypeFloat32: "FLOAT32",
	TypeBool:    "BOOL",
	TypeString:  "STRING",
	TypeArray:   "ARRAY",
	TypeUint64:  "UINT64",
	TypeInt64:   "INT64",
	TypeFloat64: "FLOAT64",
}

// Valid reports whether t is one of the thirteen GGUF value types.
func (t ValueType) Valid() bool { return t <= TypeFloat64 }

// String returns the GGUF name of t ("UINT32", "ARRAY", ...), or "type(N)".
func (t ValueType) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// fixedSize is the encoded size in bytes of a scalar of type t, 0 for STRING,
// ARRAY and invalid types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t can take: a string
// has its u64 length, an array its u32 element type and u64 count.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.fixedSize()
}

// Value is one metadata value. It is immutable and safe for concurrent use;
// the zero Value holds nothing (Type reports an invalid type, Any nil).
type Value struct {
	typ  ValueType
	elem ValueType // arrays only
	// x holds uint8 .. float64, bool or string for scalars, and a typed slice
	// ([]uint32, []string, []Value for nested arrays, ...) for arrays.
	x any
}

// Type returns the value's type. It is invalid (Valid false) for the zero Value.
func (v Value) Type() ValueType {
	if v.x == nil {
		return typeNone
	}
	return v.typ
}

// ElemType returns the element type of an array. For a non-array it returns
// an invalid type (Valid false).
func (v Value) ElemType() ValueType {
	if v.Type() != TypeArray {
		return typeNone
	}
	return v.elem
}

// Len returns the number of elements of an array, 0 for a non-array.
func (v Value) Len() int {
	switch x := v.x.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []Value:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	}
	return 0
}

// Any returns the value as a Go value: uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64 for scalars; for
// arrays a fresh typed slice of those ([]Value for an array of arrays) that
// the caller may modify. The zero Value gives nil.
func (v Value) Any() any {
	switch x := v.x.(type) {
	case []uint8:
		return slices.Clone(x)
	case []int8:
		return slices.Clone(x)
	case []uint16:
		return slices.Clone(x)
	case []int16:
		return slices.Clone(x)
	case []uint32:
		return slices.Clone(x)
	case []int32:
		return slices.Clone(x)
	case []float32:
		return slices.Clone(x)
	case []bool:
		return slices.Clone(x)
	case []string:
		return slices.Clone(x)
	case []Value:
		return slices.Clone(x)
	case []uint64:
		return slices.Clone(x)
	case []int64:
		return slices.Clone(x)
	case []float64:
		return slices.Clone(x)
	}
	return v.x
}

// Rendering limits for String: long arrays and strings are abbreviated.
const (
	showElems  = 6
	showString = 60
)

// String renders the value briefly for logs and dumps: numbers as Go
// formats them, strings quoted (cut after 60 bytes), arrays as their first
// elements and a count, e.g. `['<unk>', '<s>', ... (512 total)]`.
func (v Value) String() string {
	var b strings.Builder
	v.render(&b)
	return b.String()
}

func (v Value) render(b *strings.Builder) {
	if v.Type() != TypeArray {
		renderScalar(b, v.x)
		return
	}
	n := v.Len()
	b.WriteByte('[')
	for i := range min(n, showElems) {
		if i > 0 {
			b.WriteString(", ")
		}
		v.index(i).render(b)
	}
	if n > showElems {
		fmt.Fprintf(b, ", ... (%d total)", n)
	}
	b.WriteByte(']')
}

// index returns element i of an array as a Value; the caller checks bounds.
func (v Value) index(i int) Value {
	switch x := v.x.(type) {
	case []uint8:
		return Value{typ: TypeUint8, x: x[i]}
	case []int8:
		return Value{typ: TypeInt8, x: x[i]}
	case []uint16:
		return Value{typ: TypeUint16, x: x[i]}
	case []int16:
		return Value{typ: TypeInt16, x: x[i]}
	case []uint32:
		return Value{typ: TypeUint32, x: x[i]}
	case []int32:
		return Value{typ: TypeInt32, x: x[i]}
	case []float32:
		return Value{typ: TypeFloat32, x: x[i]}
	case []bool:
		return Value{typ: TypeBool, x: x[i]}
	case []string:
		return Value{typ: TypeString, x: x[i]}
	case []Value:
		return x[i]
	case []uint64:
		return Value{typ: TypeUint64, x: x[i]}
	case []int64:
		return Value{typ: TypeInt64, x: x[i]}
	case []float64:
		return Value{typ: TypeFloat64, x: x[i]}
	}
	return Value{}
}

func renderScalar(b *strings.Builder, x any) {
	switch x := x.(type) {
	case nil:
		b.WriteString("<nil>")
	case string:
		if len(x) > showString {
			// Cut on a rune boundary so the quoted text stays readable.
			cut := showString
			for cut > 0 && !isRuneStart(x[cut]) {
				cut--
			}
			b.WriteString(strconv.Quote(x[:cut]))
			b.WriteString("...")
			return
		}
		b.WriteString(strconv.Quote(x))
	case float32:
		b.WriteString(strconv.FormatFloat(float64(x), 'g', -1, 32))
	case float64:
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	default:
		fmt.Fprint(b, x)
	}
}

func isRuneStart(c byte) bool { return c&0xC0 != 0x80 }

// scalarValue wraps a Go scalar in a Value, reporting false for other types.
func scalarValue(x any) (Value, bool) {
	var t ValueType
	switch x.(type) {
	case uint8:
		t = TypeUint8
	case int8:
		t = TypeInt8
	case uint16:
		t = TypeUint16
	case int16:
		t = TypeInt16
	case uint32:
		t = TypeUint32
	case int32:
		t = TypeInt32
	case float32:
		t = TypeFloat32
	case bool:
		t = TypeBool
	case string:
		t = TypeString
	case uint64:
		t = TypeUint64
	case int64:
		t = TypeInt64
	case float64:
		t = TypeFloat64
	default:
		return Value{}, false
	}
	return Value{typ: t, x: x}, true
}

// arrayValue wraps a copy of a Go slice in an array Value, reporting false
// for other types. A []Value must hold valid values of one type.
func arrayValue(x any) (Value, bool) {
	var e ValueType
	switch s := x.(type) {
	case []uint8:
		e, x = TypeUint8, slices.Clone(s)
	case []int8:
		e, x = TypeInt8, slices.Clone(s)
	case []uint16:
		e, x = TypeUint16, slices.Clone(s)
	case []int16:
		e, x = TypeInt16, slices.Clone(s)
	case []uint32:
		e, x = TypeUint32, slices.Clone(s)
	case []int32:
		e, x = TypeInt32, slices.Clone(s)
	case []float32:
		e, x = TypeFloat32, slices.Clone(s)
	case []bool:
		e, x = TypeBool, slices.Clone(s)
	case []string:
		e, x = TypeString, slices.Clone(s)
	case []uint64:
		e, x = TypeUint64, slices.Clone(s)
	case []int64:
		e, x = TypeInt64, slices.Clone(s)
	case []float64:
		e, x = TypeFloat64, slices.Clone(s)
	default:
		return Value{}, false
	}
	if x == nil {
		// slices.Clone(nil) is nil; keep a non-nil empty slice so that the
		// Value is not mistaken for the zero Value.
		return emptyArray(e), true
	}
	return Value{typ: TypeArray, elem: e, x: x}, true
}

// emptyArray returns an empty array Value of element type e (valid, not ARRAY).
func emptyArray(e ValueType) Value {
	var x any
	switch e {
	case TypeUint8:
		x = []uint8{}
	case TypeInt8:
		x = []int8{}
	case TypeUint16:
		x = []uint16{}
	case TypeInt16:
		x = []int16{}
	case TypeUint32:
		x = []uint32{}
	case TypeInt32:
		x = []int32{}
	case TypeFloat32:
		x = []float32{}
	case TypeBool:
		x = []bool{}
	case TypeString:
		x = []string{}
	case TypeUint64:
		x = []uint64{}
	case TypeInt64:
		x = []int64{}
	case TypeFloat64:
		x = []float64{}
	default:
		x = []Value{}
	}
	return Value{typ: TypeArray, elem: e, x: x}
}
