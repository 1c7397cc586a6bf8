package gguf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"

	"rill/engine/quant"
)

// Minimum encoded sizes, used to bound counts by the bytes that remain
// before anything is allocated for them.
const (
	minKVBytes     = 8 + 4 + 1     // key length, value type, smallest value
	minTensorBytes = 8 + 4 + 4 + 8 // name length, n_dims, type, offset
)

// maxPrealloc caps capacity reserved from a count in the file: slices for
// strings, nested arrays, keys and tensors grow with the items actually read.
const maxPrealloc = 1024

// quoteName quotes a key or tensor name for an error message, cut short so
// that a hostile megabyte-long name does not become a megabyte-long error.
func quoteName(s string) string {
	const maxName = 80
	if len(s) > maxName {
		return strconv.Quote(s[:maxName]) + "..."
	}
	return strconv.Quote(s)
}

// Parse parses a GGUF file held in data. data is caller-owned and must not
// change while the File is in use: tensor views alias it. Metadata strings
// are copied. Close on the result only invalidates the views.
func Parse(data []byte) (*File, error) {
	d := &decoder{data: data, where: "header"}
	if len(data) < 4 {
		return nil, d.errAt(0, "truncated: %d bytes, a GGUF file starts with the 4-byte magic %q", len(data), Magic)
	}
	if string(data[:4]) != Magic {
		return nil, d.errAt(0, "not a GGUF file: magic %q, want %q", data[:4], Magic)
	}
	d.off = 4
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	if err := checkVersion(version); err != nil {
		return nil, d.errAt(4, "%s", err)
	}
	tensorCountAt := d.off
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	kvCountAt := d.off
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	if err := d.bound(kvCountAt, nKV, minKVBytes, "metadata count"); err != nil {
		return nil, err
	}

	f := &File{Version: version, data: data, Metadata: &Metadata{}}
	alignAt, err := d.metadata(f.Metadata, int(nKV))
	if err != nil {
		return nil, err
	}
	f.Alignment, err = alignment(f.Metadata)
	if err != nil {
		return nil, d.errWhere(alignAt, fmt.Sprintf("key %q", KeyAlignment), "%s", err)
	}

	d.where = "header"
	if err := d.bound(tensorCountAt, nTensors, minTensorBytes, "tensor count"); err != nil {
		return nil, err
	}
	infoAt, err := d.tensorInfos(f, int(nTensors))
	if err != nil {
		return nil, err
	}
	// d.off <= len(data) and the alignment is at most 2^31, so no overflow.
	f.DataOffset = alignUp(int64(d.off), int64(f.Alignment))
	if err := checkLayout(f, int64(len(data)), infoAt); err != nil {
		return nil, err
	}
	return f, nil
}

func checkVersion(v uint32) error {
	switch {
	case v == 2 || v == 3:
		return nil
	case v == 1:
		return errors.New("GGUF version 1 (32-bit counts) is not supported; convert the file to version 3")
	case v&0xFFFF == 0 && (bits.ReverseBytes32(v) == 2 || bits.ReverseBytes32(v) == 3):
		return fmt.Errorf("big-endian GGUF (version %d) is not supported", bits.ReverseBytes32(v))
	}
	return fmt.Errorf("unsupported GGUF version %d (want 2 or 3)", v)
}

// alignment returns general.alignment, or the default when the key is absent.
func alignment(m *Metadata) (int, error) {
	v, ok := m.Value(KeyAlignment)
	if !ok {
		return DefaultAlignment, nil
	}
	a, ok := v.x.(uint32)
	if !ok {
		return 0, fmt.Errorf("alignment must be UINT32, not %s", v.Type())
	}
	if a == 0 || a&(a-1) != 0 {
		return 0, fmt.Errorf("alignment %d is not a non-zero power of two", a)
	}
	return int(a), nil
}

// decoder reads little-endian GGUF items from data, tracking the offset and
// what is being read for error messages.
type decoder struct {
	data  []byte
	off   int
	where string
}

func (d *decoder) errAt(off int, format string, args ...any) error {
	return &FormatError{Offset: int64(off), Where: d.where, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) errWhere(off int, where, format string, args ...any) error {
	return &FormatError{Offset: int64(off), Where: where, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) left() int { return len(d.data) - d.off }

// take returns the next n bytes or a truncation error naming what.
func (d *decoder) take(n int, what string) ([]byte, error) {
	if n > d.left() {
		return nil, d.errAt(d.off, "truncated: %s needs %d bytes, %d left", what, n, d.left())
	}
	b := d.data[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a u64 length and that many bytes, copied into a Go string.
func (d *decoder) str(what string) (string, error) {
	at := d.off
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(d.left()) {
		return "", d.errAt(at, "%s length %d exceeds the %d bytes left", what, n, d.left())
	}
	b, _ := d.take(int(n), what)
	return string(b), nil
}

// bound checks that count items of at least size bytes each fit in what
// remains of the input, so that count can be trusted for allocation.
func (d *decoder) bound(at int, count uint64, size int, what string) error {
	if count > uint64(d.left()/size) {
		return d.errAt(at, "%s %d is more than the %d bytes left can hold", what, count, d.left())
	}
	return nil
}

// metadata reads n key/value pairs into m. It returns the offset of the
// general.alignment pair (0 if absent) for error messages.
func (d *decoder) metadata(m *Metadata, n int) (alignAt int, err error) {
	// Counts are bounded by the input but can still be large for a big file
	// that fails early, so capacity grows with the pairs actually read.
	m.keys = make([]string, 0, min(n, maxPrealloc))
	m.vals = make(map[string]Value, min(n, maxPrealloc))
	for range n {
		at := d.off
		d.where = "metadata"
		key, err := d.str("key")
		if err != nil {
			return 0, err
		}
		d.where = "key " + quoteName(key)
		if _, dup := m.vals[key]; dup {
			return 0, d.errAt(at, "duplicate key")
		}
		typAt := d.off
		t, err := d.u32("value type")
		if err != nil {
			return 0, err
		}
		if !ValueType(t).Valid() {
			return 0, d.errAt(typAt, "unknown value type %d", t)
		}
		v, err := d.value(ValueType(t), 1)
		if err != nil {
			return 0, err
		}
		if key == KeyAlignment {
			alignAt = at
		}
		m.set(key, v)
	}
	return alignAt, nil
}

// value reads one value of type t (already validated). depth is the array
// nesting level an array read here would have.
func (d *decoder) value(t ValueType, depth int) (Value, error) {
	at := d.off
	switch t {
	case TypeString:
		s, err := d.str("string")
		return Value{typ: t, x: s}, err
	case TypeArray:
		return d.array(depth)
	}
	b, err := d.take(t.fixedSize(), t.String()+" value")
	if err != nil {
		return Value{}, err
	}
	var x any
	switch t {
	case TypeUint8:
		x = b[0]
	case TypeInt8:
		x = int8(b[0])
	case TypeBool:
		if b[0] > 1 {
			return Value{}, d.errAt(at, "bool byte is %d, want 0 or 1", b[0])
		}
		x = b[0] == 1
	case TypeUint16:
		x = binary.LittleEndian.Uint16(b)
	case TypeInt16:
		x = int16(binary.LittleEndian.Uint16(b))
	case TypeUint32:
		x = binary.LittleEndian.Uint32(b)
	case TypeInt32:
		x = int32(binary.LittleEndian.Uint32(b))
	case TypeFloat32:
		x = math.Float32frombits(binary.LittleEndian.Uint32(b))
	case TypeUint64:
		x = binary.LittleEndian.Uint64(b)
	case TypeInt64:
		x = int64(binary.LittleEndian.Uint64(b))
	case TypeFloat64:
		x = math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return Value{typ: t, x: x}, nil
}

// array reads an array's element type, count and elements.
func (d *decoder) array(depth int) (Value, error) {
	at := d.off
	if depth > maxArrayDepth {
		return Value{}, d.errAt(at, "arrays nested deeper than %d levels", maxArrayDepth)
	}
	et, err := d.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	e := ValueType(et)
	if !e.Valid() {
		return Value{}, d.errAt(at, "unknown array element type %d", et)
	}
	countAt := d.off
	count, err := d.u64("array count")
	if err != nil {
		return Value{}, err
	}
	if err := d.bound(countAt, count, e.minSize(), "array of "+e.String()+": count"); err != nil {
		return Value{}, err
	}
	n := int(count)
	if n == 0 {
		return emptyArray(e), nil
	}
	if size := e.fixedSize(); size > 0 {
		b, _ := d.take(n*size, "array") // bounded above
		return d.fixedArray(e, b, n, at)
	}
	switch e {
	case TypeString:
		s := make([]string, 0, min(n, maxPrealloc))
		for range n {
			x, err := d.str("array string")
			if err != nil {
				return Value{}, err
			}
			s = append(s, x)
		}
		return Value{typ: TypeArray, elem: e, x: s}, nil
	default: // TypeArray
		vs := make([]Value, 0, min(n, maxPrealloc))
		for range n {
			v, err := d.array(depth + 1)
			if err != nil {
				return Value{}, err
			}
			vs = append(vs, v)
		}
		return Value{typ: TypeArray, elem: e, x: vs}, nil
	}
}

// fixedArray decodes n elements of the fixed-size type e from b, the body
// of the array that starts at offset at.
func (d *decoder) fixedArray(e ValueType, b []byte, n int, at int) (Value, error) {
	le := binary.LittleEndian
	var x any
	switch e {
	case TypeUint8:
		x = slices.Clone(b)
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(b[i])
		}
		x = s
	case TypeBool:
		s := make([]bool, n)
		for i := range s {
			if b[i] > 1 {
				return Value{}, d.errAt(at, "bool element %d is %d, want 0 or 1", i, b[i])
			}
			s[i] = b[i] == 1
		}
		x = s
	case TypeUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(b[2*i:])
		}
		x = s
	case TypeInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(b[2*i:]))
		}
		x = s
	case TypeUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(b[4*i:])
		}
		x = s
	case TypeInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(b[4*i:]))
		}
		x = s
	case TypeFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		x = s
	case TypeUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(b[8*i:])
		}
		x = s
	case TypeInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(b[8*i:]))
		}
		x = s
	case TypeFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		x = s
	}
	return Value{typ: TypeArray, elem: e, x: x}, nil
}

// tensorInfos reads n tensor infos into f and checks each one on its own
// (shape, type, size, alignment). It returns the offset of each info.
func (d *decoder) tensorInfos(f *File, n int) ([]int, error) {
	f.Tensors = make([]TensorInfo, 0, min(n, maxPrealloc))
	f.byName = make(map[string]int, min(n, maxPrealloc))
	infoAt := make([]int, 0, min(n, maxPrealloc))
	align := int64(f.Alignment)
	for i := range n {
		at := d.off
		d.where = fmt.Sprintf("tensor info %d", i)
		name, err := d.str("tensor name")
		if err != nil {
			return nil, err
		}
		d.where = "tensor " + quoteName(name)
		if _, dup := f.byName[name]; dup {
			return nil, d.errAt(at, "duplicate tensor name")
		}
		ndimsAt := d.off
		ndims, err := d.u32("dimension count")
		if err != nil {
			return nil, err
		}
		if ndims > MaxDims {
			return nil, d.errAt(ndimsAt, "%d dimensions, at most %d allowed", ndims, MaxDims)
		}
		shape := make([]int, ndims)
		for j := range shape {
			dimAt := d.off
			dim, err := d.u64("dimension")
			if err != nil {
				return nil, err
			}
			if dim > math.MaxInt64 || dim > uint64(math.MaxInt) {
				return nil, d.errAt(dimAt, "dimension %d is %d, past the largest int", j, dim)
			}
			shape[j] = int(dim)
		}
		typAt := d.off
		typ, err := d.u32("tensor type")
		if err != nil {
			return nil, err
		}
		offAt := d.off
		off, err := d.u64("data offset")
		if err != nil {
			return nil, err
		}
		ti := TensorInfo{Name: name, Shape: shape, Type: quant.Type(typ)}
		if ti.Size, err = dataSize(ti.Type, shape); err != nil {
			return nil, d.errAt(typAt, "%s", err)
		}
		if off > math.MaxInt64 {
			return nil, d.errAt(offAt, "data offset %d is past the largest int64", off)
		}
		if int64(off)%align != 0 {
			return nil, d.errAt(offAt, "data offset %d is not a multiple of the alignment %d", off, align)
		}
		ti.Offset = int64(off)
		f.byName[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
		infoAt = append(infoAt, at)
	}
	return infoAt, nil
}

// dataSize returns the byte size of a tensor of type t and shape, checking
// the type, the block geometry and every product for int64 overflow.
func dataSize(t quant.Type, shape []int) (int64, error) {
	if !t.Known() {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	row := 1 // a tensor with no dimensions holds one element
	if len(shape) > 0 {
		row = shape[0]
	}
	be, bb := uint64(t.BlockElems()), uint64(t.BlockBytes())
	if uint64(row)%be != 0 {
		return 0, fmt.Errorf("row of %d elements is not a whole number of %s blocks of %d", row, t, be)
	}
	// Elements and bytes must both fit an int64. A zero dimension makes the
	// tensor empty whatever the others say.
	if slices.Contains(shape, 0) {
		return 0, nil
	}
	hi, size := bits.Mul64(uint64(row)/be, bb)
	if hi != 0 || size > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v of %s: row size overflows int64", shape, t)
	}
	elems := uint64(row)
	for _, dim := range shape[min(1, len(shape)):] {
		var hiE, hiS uint64
		hiE, elems = bits.Mul64(elems, uint64(dim))
		hiS, size = bits.Mul64(size, uint64(dim))
		if hiE != 0 || hiS != 0 || elems > math.MaxInt64 || size > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v of %s: element count or byte size overflows int64", shape, t)
		}
	}
	return int64(size), nil
}

// checkLayout checks that every tensor's data lies inside the file, after
// DataOffset, and that no two tensors overlap.
func checkLayout(f *File, fileSize int64, infoAt []int) error {
	if len(f.Tensors) == 0 {
		return nil
	}
	avail := fileSize - f.DataOffset
	if avail < 0 {
		return &FormatError{Offset: fileSize, Where: "tensor data",
			Msg: fmt.Sprintf("truncated: the data section starts at byte %d, past the end of the file", f.DataOffset)}
	}
	for i, t := range f.Tensors {
		if t.Offset > avail || t.Size > avail-t.Offset {
			return &FormatError{Offset: int64(infoAt[i]), Where: "tensor " + quoteName(t.Name),
				Msg: fmt.Sprintf("data [%d, %d) of the data section runs past the end of the file (%d data bytes)",
					t.Offset, uint64(t.Offset)+uint64(t.Size), avail)}
		}
	}
	order := make([]int, 0, len(f.Tensors))
	for i, t := range f.Tensors {
		if t.Size > 0 { // empty tensors occupy nothing, wherever they point
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Compare(f.Tensors[a].Offset, f.Tensors[b].Offset)
	})
	for k := 1; k < len(order); k++ {
		prev, cur := f.Tensors[order[k-1]], f.Tensors[order[k]]
		if cur.Offset < prev.Offset+prev.Size {
			return &FormatError{Offset: int64(infoAt[order[k]]), Where: "tensor " + quoteName(cur.Name),
				Msg: fmt.Sprintf("data [%d, %d) overlaps tensor %s at [%d, %d)",
					cur.Offset, cur.Offset+cur.Size, quoteName(prev.Name), prev.Offset, prev.Offset+prev.Size)}
		}
	}
	return nil
}
