// Package quant defines tensor element formats as GGML lays them out: the type
// ids used in GGUF files, their block geometry, and (in the other files of this
// package) scalar reference quantisation, dequantisation and dot products.
//
// The scalar code here is the numeric reference; SIMD kernels in
// engine/backend/cpu are tested against it.
package quant

import "fmt"

// Type is a GGML tensor type id as stored in GGUF tensor infos.
type Type uint32

// GGML type ids (ggml.h). Gaps are ids that GGML has retired.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

type layout struct {
	name       string
	blockElems int // elements per block
	blockBytes int // bytes per block
}

var layouts = map[Type]layout{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 18},
	Q4_1:    {"Q4_1", 32, 20},
	Q5_0:    {"Q5_0", 32, 22},
	Q5_1:    {"Q5_1", 32, 24},
	Q8_0:    {"Q8_0", 32, 34},
	Q8_1:    {"Q8_1", 32, 36},
	Q2_K:    {"Q2_K", 256, 84},
	Q3_K:    {"Q3_K", 256, 110},
	Q4_K:    {"Q4_K", 256, 144},
	Q5_K:    {"Q5_K", 256, 176},
	Q6_K:    {"Q6_K", 256, 210},
	Q8_K:    {"Q8_K", 256, 292},
	IQ2_XXS: {"IQ2_XXS", 256, 66},
	IQ2_XS:  {"IQ2_XS", 256, 74},
	IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ1_S:   {"IQ1_S", 256, 50},
	IQ4_NL:  {"IQ4_NL", 32, 18},
	IQ3_S:   {"IQ3_S", 256, 110},
	IQ2_S:   {"IQ2_S", 256, 82},
	IQ4_XS:  {"IQ4_XS", 256, 136},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", 256, 56},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", 256, 54},
	TQ2_0:   {"TQ2_0", 256, 66},
	MXFP4:   {"MXFP4", 32, 17},
}

// Known reports whether t is a type whose layout this package knows.
func (t Type) Known() bool { _, ok := layouts[t]; return ok }

// String returns GGML's name for t, or "type(N)" for an unknown id.
func (t Type) String() string {
	if l, ok := layouts[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockElems is the number of elements in one block (1 for plain types).
// It is 0 for unknown types.
func (t Type) BlockElems() int { return layouts[t].blockElems }

// BlockBytes is the size in bytes of one block. It is 0 for unknown types.
func (t Type) BlockBytes() int { return layouts[t].blockBytes }

// RowBytes returns the bytes taken by n elements of type t. It fails for an
// unknown type or when n is not a whole number of blocks.
func (t Type) RowBytes(n int) (int, error) {
	l, ok := layouts[t]
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if n < 0 || n%l.blockElems != 0 {
		return 0, fmt.Errorf("%d elements of %s: not a multiple of the block size %d", n, l.name, l.blockElems)
	}
	return n / l.blockElems * l.blockBytes, nil
}

// ParseType returns the type with GGML's name s (for example "Q8_0").
func ParseType(s string) (Type, error) {
	for t, l := range layouts {
		if l.name == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", s)
}
