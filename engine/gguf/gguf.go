// Package gguf reads and writes GGUF files, the container llama.cpp uses for
// model weights and their metadata.
//
// Reading is zero-copy: Open memory-maps the file and every Tensor's Data is a
// view into that mapping. Metadata is decoded eagerly and owns its memory, so
// it stays valid after Close. The reader treats its input as hostile: any
// truncated, corrupt or malicious file yields a *FormatError naming the byte
// offset and the key or tensor involved, never a panic, and no allocation is
// larger than the input bytes can justify.
//
// Supported: GGUF versions 2 and 3, little-endian. Version 1 (32-bit counts)
// and big-endian files are refused.
package gguf

import (
	"fmt"
	"unsafe"

	"rill/engine/quant"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// Version is the GGUF version the Writer produces.
const Version = 3

// DefaultAlignment is the data alignment in bytes when the file does not set
// general.alignment.
const DefaultAlignment = 32

// KeyAlignment is the metadata key (UINT32) that overrides DefaultAlignment.
const KeyAlignment = "general.alignment"

// MaxDims is the largest number of dimensions a tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// maxArrayDepth bounds nesting of arrays (an array of arrays has depth 2), so
// that a hostile file cannot make decoding recurse without limit.
const maxArrayDepth = 3

// File is a parsed GGUF file.
//
// Fields are read-only after Open or Parse returns. All methods except Close
// are safe for concurrent use; Close must not run concurrently with them.
type File struct {
	// Version is the GGUF version from the header (2 or 3).
	Version uint32
	// Alignment is the data alignment in bytes: general.alignment or 32.
	Alignment int
	// DataOffset is the byte offset in the file of the tensor data section.
	DataOffset int64
	// Metadata holds the key/value pairs in file order. It owns its memory
	// and stays valid after Close.
	Metadata *Metadata
	// Tensors lists the tensor infos in file order.
	Tensors []TensorInfo

	data    []byte         // the whole file; nil after Close
	byName  map[string]int // index into Tensors
	release func() error   // unmaps the file; nil for Parse
	evict   func([]byte)   // drops mapped pages; nil for Parse
	closed  bool
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	// Name is the tensor's name, unique in its file.
	Name string
	// Shape is GGML's ne: Shape[0] is the row length (the fastest-varying
	// dimension) and len(Shape) is the stored dimension count (0 to MaxDims).
	// Shared with the File: do not modify.
	Shape []int
	// Type is the element format.
	Type quant.Type
	// Offset is the byte offset of the data relative to File.DataOffset; it is
	// a multiple of File.Alignment.
	Offset int64
	// Size is the byte size of the data: Type.RowBytes(Shape[0]) times the
	// product of Shape[1:].
	Size int64
}

// Elems returns the number of elements (the product of Shape; 1 for a
// tensor with no dimensions). The reader guarantees it fits in an int64.
func (t TensorInfo) Elems() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Tensor is a tensor info with a view of its bytes.
type Tensor struct {
	TensorInfo
	// Data aliases the file's bytes (len == Size, capacity clipped to Size):
	// it is valid until File.Close and must not be modified (an mmapped file
	// is read-only; writing faults).
	Data []byte
}

// Tensor returns a zero-copy view of the tensor called name. It reports false
// when there is no such tensor or the file is closed.
func (f *File) Tensor(name string) (Tensor, bool) {
	if f.closed {
		return Tensor{}, false
	}
	i, ok := f.byName[name]
	if !ok {
		return Tensor{}, false
	}
	ti := f.Tensors[i]
	start := f.DataOffset + ti.Offset
	end := start + ti.Size
	return Tensor{TensorInfo: ti, Data: f.data[start:end:end]}, true
}

// Evict tells the system that the memory under view, a tensor's Data (or
// part of it), will not be read for a while: on a memory-mapped file the
// whole pages it covers leave the process's memory, and a later read of
// them faults them back from the page cache or the file. It is for tensors
// a caller has copied (a backend's packed layout). It never changes what
// view reads; on a parsed buffer, or for memory that is not the file's, it
// does nothing. It is safe for concurrent use, like Tensor.
func (f *File) Evict(view []byte) {
	if f.evict == nil || f.closed || len(view) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(view)))
	if p < base || p+uintptr(len(view)) > base+uintptr(len(f.data)) {
		return
	}
	f.evict(f.data[p-base:][:len(view)])
}

// Close releases the file's memory mapping, if any. It is idempotent. Tensor
// views obtained before Close are invalid afterwards (reading them may
// fault); Metadata stays valid.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.data = nil
	if f.release == nil {
		return nil
	}
	release := f.release
	f.release = nil
	return release()
}

// FormatError reports malformed or hostile GGUF content.
type FormatError struct {
	// Offset is the byte offset in the file of the item that is wrong.
	Offset int64
	// Where names that item: "header", `key "general.name"`,
	// `tensor "output.weight"`, or "tensor data".
	Where string
	// Msg says what is wrong.
	Msg string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed gguf at byte %d (%s): %s", e.Offset, e.Where, e.Msg)
}

// alignUp rounds n up to a multiple of align, a power of two. The caller
// guarantees that the result does not overflow.
func alignUp(n, align int64) int64 {
	return (n + align - 1) &^ (align - 1)
}
