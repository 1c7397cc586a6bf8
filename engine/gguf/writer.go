package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"rill/engine/quant"
)

// Writer builds a GGUF version 3 file in memory order: header, metadata in
// Set order, tensor infos in AddTensor order, padding, then each tensor's
// data at an aligned offset. A Writer is not safe for concurrent use.
type Writer struct {
	meta    Metadata
	align   int
	tensors []writerTensor
	names   map[string]bool
}

type writerTensor struct {
	info TensorInfo
	data []byte // caller-owned
}

// NewWriter returns an empty Writer with the default alignment.
func NewWriter() *Writer {
	return &Writer{align: DefaultAlignment, names: make(map[string]bool)}
}

// Set stores a metadata value under key. v is one of uint8, int8, uint16,
// int16, uint32, int32, uint64, int64, float32, float64, bool, string, a
// slice of one of those (an ARRAY; []byte is an ARRAY of UINT8), or a Value
// (for example one read from another file, nested arrays included). Other
// Go types, int among them, are an error. Slices are copied.
//
// Setting a key again replaces its value and keeps its first position.
// Setting general.alignment (a uint32 power of two) changes the alignment
// of the tensor data.
func (w *Writer) Set(key string, v any) error {
	if key == "" {
		return errors.New("gguf writer: empty metadata key")
	}
	val, ok := scalarValue(v)
	if !ok {
		val, ok = arrayValue(v)
	}
	if !ok {
		given, isValue := v.(Value)
		if !isValue {
			return fmt.Errorf("gguf writer: key %q: unsupported value type %T", key, v)
		}
		if err := checkValue(given, 1); err != nil {
			return fmt.Errorf("gguf writer: key %q: %w", key, err)
		}
		val = given
	}
	if key == KeyAlignment {
		m := Metadata{}
		m.set(key, val)
		a, err := alignment(&m)
		if err != nil {
			return fmt.Errorf("gguf writer: key %q: %w", key, err)
		}
		w.align = a
	}
	w.meta.set(key, val)
	return nil
}

// checkValue checks that a caller-supplied Value can be encoded: not the
// zero Value, and nested no deeper than a reader accepts.
func checkValue(v Value, depth int) error {
	switch {
	case v.x == nil:
		return errors.New("zero Value")
	case v.typ != TypeArray:
		return nil
	case depth > maxArrayDepth:
		return fmt.Errorf("arrays nested deeper than %d levels", maxArrayDepth)
	}
	if vs, ok := v.x.([]Value); ok {
		for _, e := range vs {
			if e.Type() != TypeArray {
				return fmt.Errorf("array of ARRAY holds a %s", e.Type())
			}
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddTensor appends a tensor. shape is GGML's ne (shape[0] is the row
// length, at most MaxDims dimensions, none negative); len(data) must be the
// size the type and shape imply. data is not copied: it must stay unchanged
// until WriteTo returns.
func (w *Writer) AddTensor(name string, typ quant.Type, shape []int, data []byte) error {
	if name == "" {
		return errors.New("gguf writer: empty tensor name")
	}
	if w.names[name] {
		return fmt.Errorf("gguf writer: duplicate tensor %q", name)
	}
	if len(shape) > MaxDims {
		return fmt.Errorf("gguf writer: tensor %q: %d dimensions, at most %d allowed", name, len(shape), MaxDims)
	}
	for i, d := range shape {
		if d < 0 {
			return fmt.Errorf("gguf writer: tensor %q: dimension %d is negative (%d)", name, i, d)
		}
	}
	size, err := dataSize(typ, shape)
	if err != nil {
		return fmt.Errorf("gguf writer: tensor %q: %w", name, err)
	}
	if int64(len(data)) != size {
		return fmt.Errorf("gguf writer: tensor %q: %d data bytes, %s %v takes %d", name, len(data), typ, shape, size)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{
		info: TensorInfo{Name: name, Shape: slices.Clone(shape), Type: typ, Size: size},
		data: data,
	})
	return nil
}

// WriteTo writes the file to out and returns the number of bytes written.
// The Writer is unchanged and may be written again.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := int64(w.align)
	var hdr bytes.Buffer
	hdr.WriteString(Magic)
	putU32(&hdr, Version)
	putU64(&hdr, uint64(len(w.tensors)))
	putU64(&hdr, uint64(len(w.meta.keys)))
	for _, k := range w.meta.keys {
		putString(&hdr, k)
		v := w.meta.vals[k]
		putU32(&hdr, uint32(v.typ))
		putValue(&hdr, v)
	}
	var off int64
	offsets := make([]int64, len(w.tensors))
	for i, t := range w.tensors {
		off = alignUp(off, align)
		offsets[i] = off
		off += t.info.Size
		putString(&hdr, t.info.Name)
		putU32(&hdr, uint32(len(t.info.Shape)))
		for _, d := range t.info.Shape {
			putU64(&hdr, uint64(d))
		}
		putU32(&hdr, uint32(t.info.Type))
		putU64(&hdr, uint64(offsets[i]))
	}
	hdr.Write(make([]byte, alignUp(int64(hdr.Len()), align)-int64(hdr.Len())))

	cw := &countingWriter{w: out}
	cw.write(hdr.Bytes())
	var pos int64
	for i, t := range w.tensors {
		cw.pad(offsets[i] - pos)
		cw.write(t.data)
		pos = offsets[i] + t.info.Size
	}
	// Pad the last tensor too, as llama.cpp does, so the file size is aligned.
	cw.pad(alignUp(pos, align) - pos)
	return cw.n, cw.err
}

// countingWriter counts bytes and keeps the first error, after which it
// writes nothing more.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) write(b []byte) {
	if c.err != nil || len(b) == 0 {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	if err != nil {
		c.err = fmt.Errorf("gguf writer: %w", err)
	}
}

var zeros [4096]byte

func (c *countingWriter) pad(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		c.write(zeros[:k])
		n -= k
	}
}

func putU32(b *bytes.Buffer, x uint32) {
	b.Write(binary.LittleEndian.AppendUint32(b.AvailableBuffer(), x))
}
func putU64(b *bytes.Buffer, x uint64) {
	b.Write(binary.LittleEndian.AppendUint64(b.AvailableBuffer(), x))
}

func putString(b *bytes.Buffer, s string) {
	putU64(b, uint64(len(s)))
	b.WriteString(s)
}

// putValue writes v's encoding without its leading type.
func putValue(b *bytes.Buffer, v Value) {
	if v.typ == TypeArray {
		putU32(b, uint32(v.elem))
		n := v.Len()
		putU64(b, uint64(n))
		for i := range n {
			putValue(b, v.index(i))
		}
		return
	}
	switch x := v.x.(type) {
	case uint8:
		b.WriteByte(x)
	case int8:
		b.WriteByte(byte(x))
	case bool:
		if x {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	case uint16:
		b.Write(binary.LittleEndian.AppendUint16(b.AvailableBuffer(), x))
	case int16:
		b.Write(binary.LittleEndian.AppendUint16(b.AvailableBuffer(), uint16(x)))
	case uint32:
		putU32(b, x)
	case int32:
		putU32(b, uint32(x))
	case float32:
		putU32(b, math.Float32bits(x))
	case uint64:
		putU64(b, x)
	case int64:
		putU64(b, uint64(x))
	case float64:
		putU64(b, math.Float64bits(x))
	case string:
		putString(b, x)
	}
}
