package tensor

import (
	"fmt"
	"math"

	"rill/engine/quant"
)

// KVLayout is the shape of one layer of a paged key/value cache: Blocks
// blocks of BlockSize token slots for Heads KV heads of HeadDim values.
//
// In host memory (HostKV) keys and values are two arrays of Size()
// elements, each ordered [block][head][slot][RowDim()]: one head's slots of
// one block are contiguous rows, so attention reads them as a tile. A row
// holds HeadDim elements followed by RowDim()-HeadDim elements of padding,
// which stay zero. It is the one layout type of the engine: the CPU
// backend's attention kernels read host caches through it. A device backend
// may lay its own memory out otherwise; the layout's counts still describe
// it.
type KVLayout struct {
	Blocks    int
	BlockSize int
	Heads     int
	HeadDim   int
}

// RowDim is the stride of one slot's row in host memory: HeadDim rounded up
// to a multiple of 8 values, the vector width of the CPU kernels.
func (l KVLayout) RowDim() int { return (l.HeadDim + 7) &^ 7 }

// Size is the number of elements of the host key (or value) array of one
// layer.
func (l KVLayout) Size() int { return l.Blocks * l.Heads * l.BlockSize * l.RowDim() }

// Row is the offset of the row of (block, head, slot) in a host key or value
// array. Arguments are not checked.
func (l KVLayout) Row(block, head, slot int) int {
	return ((block*l.Heads+head)*l.BlockSize + slot) * l.RowDim()
}

// Validate reports whether l describes a cache that can be allocated:
// positive counts whose host size fits an int. Limits of a backend's
// kernels (the largest head size) are the backend's to check.
func (l KVLayout) Validate() error {
	if l.Blocks <= 0 || l.BlockSize <= 0 || l.Heads <= 0 || l.HeadDim <= 0 {
		return fmt.Errorf("kv layout of %d blocks of %d slots for %d heads of %d", l.Blocks, l.BlockSize, l.Heads, l.HeadDim)
	}
	size := l.RowDim()
	for _, f := range []int{l.BlockSize, l.Heads, l.Blocks} {
		if size > math.MaxInt/f {
			return fmt.Errorf("kv layout of %d blocks of %d slots for %d heads is too large", l.Blocks, l.BlockSize, l.Heads)
		}
		size *= f
	}
	return nil
}

// KVSpec describes a paged key/value cache: Layers layers of Layout, each
// holding keys and values as elements of Type: F16 or F32, or Q8_0 or Q4_0,
// whose rows are HeadDim/32 blocks of 32 values each (so HeadDim must be a
// multiple of 32, and RowDim is then HeadDim: no padding).
type KVSpec struct {
	Layers int
	Type   quant.Type
	Layout KVLayout
}

// Validate reports whether s can be allocated in host memory.
func (s KVSpec) Validate() error {
	if s.Layers <= 0 {
		return fmt.Errorf("kv cache of %d layers", s.Layers)
	}
	switch s.Type {
	case quant.F16, quant.F32:
	case quant.Q8_0, quant.Q4_0:
		// Blocks run along the head dimension, as llama.cpp quantises its
		// cache's rows, which is why it refuses these types for such heads.
		if s.Layout.HeadDim%s.Type.BlockElems() != 0 {
			return fmt.Errorf("kv cache of %s elements needs a head size that is a multiple of %d, not %d", s.Type, s.Type.BlockElems(), s.Layout.HeadDim)
		}
	default:
		return fmt.Errorf("kv cache of %s elements (want F16, F32, Q8_0 or Q4_0)", s.Type)
	}
	return s.Layout.Validate()
}

// Quantized reports whether s holds blocks of quantised values (Q8_0,
// Q4_0) rather than floats.
func (s KVSpec) Quantized() bool { return s.Type == quant.Q8_0 || s.Type == quant.Q4_0 }

// RowBytes is the size in bytes of one slot's row of keys (or values) of
// one head in host memory, padding included.
func (s KVSpec) RowBytes() int {
	return s.Layout.RowDim() / s.Type.BlockElems() * s.Type.BlockBytes()
}

// BytesPerBlock is the host memory one block takes across all layers, keys
// and values, padding included.
func (s KVSpec) BytesPerBlock() int64 {
	rows := int64(s.Layers) * 2 * int64(s.Layout.BlockSize) * int64(s.Layout.Heads)
	return rows * int64(s.RowBytes())
}

// KVCache is the memory of a paged key/value cache, allocated by a backend
// and read and written only by that backend's operations (a GPU keeps it in
// device memory). Which block belongs to which sequence is decided
// elsewhere (engine/kvcache); the cache only holds the blocks.
//
// A KVCache is not safe for concurrent use: its owner serialises forward
// passes and block copies.
type KVCache interface {
	// Spec is the description the cache was allocated for.
	Spec() KVSpec
	// CopyBlock copies the first n token slots of block src into block dst,
	// keys and values of every layer (copy-on-write of a shared, partly
	// filled block). dst and src must be distinct blocks of the cache and
	// 0 <= n <= BlockSize.
	CopyBlock(dst, src, n int)
}

// HostKV is a KVCache in host memory, laid out as KVLayout describes: per
// layer a key array and a value array of Layout.Size() elements, float32
// (K32, V32) when Type is F32, IEEE half (K16, V16) when it is F16, and
// GGML blocks (KQ, VQ: a row of RowBytes() bytes where a float cache has
// RowDim() elements, so the row of (block, head, slot) starts at byte
// Layout.Row(block, head, slot)/32*Type.BlockBytes()) when it is Q8_0 or
// Q4_0; the other pairs are nil. It is the CPU backend's cache and the
// reference layout others are checked against.
type HostKV struct {
	spec     KVSpec
	K16, V16 [][]uint16
	K32, V32 [][]float32
	KQ, VQ   [][]byte
}

// NewHostKV allocates a zeroed host cache for s.
func NewHostKV(s KVSpec) (*HostKV, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	kv := &HostKV{spec: s}
	n := s.Layout.Size()
	if s.Quantized() {
		n = n / s.Type.BlockElems() * s.Type.BlockBytes()
		kv.KQ, kv.VQ = make([][]byte, s.Layers), make([][]byte, s.Layers)
		for i := range s.Layers {
			kv.KQ[i], kv.VQ[i] = make([]byte, n), make([]byte, n)
		}
		return kv, nil
	}
	if s.Type == quant.F32 {
		kv.K32, kv.V32 = make([][]float32, s.Layers), make([][]float32, s.Layers)
		for i := range s.Layers {
			kv.K32[i], kv.V32[i] = make([]float32, n), make([]float32, n)
		}
		return kv, nil
	}
	kv.K16, kv.V16 = make([][]uint16, s.Layers), make([][]uint16, s.Layers)
	for i := range s.Layers {
		kv.K16[i], kv.V16[i] = make([]uint16, n), make([]uint16, n)
	}
	return kv, nil
}

// Spec implements KVCache.
func (kv *HostKV) Spec() KVSpec { return kv.spec }

// CopyBlock implements KVCache.
func (kv *HostKV) CopyBlock(dst, src, n int) {
	l := kv.spec.Layout
	if dst < 0 || dst >= l.Blocks || src < 0 || src >= l.Blocks || n < 0 || n > l.BlockSize {
		panic(fmt.Sprintf("tensor: copy %d slots of block %d to block %d of %d blocks of %d", n, src, dst, l.Blocks, l.BlockSize))
	}
	m := n * l.RowDim()
	for h := range l.Heads {
		d, s := l.Row(dst, h, 0), l.Row(src, h, 0)
		for i := range kv.K16 {
			copy(kv.K16[i][d:d+m], kv.K16[i][s:s+m])
			copy(kv.V16[i][d:d+m], kv.V16[i][s:s+m])
		}
		for i := range kv.K32 {
			copy(kv.K32[i][d:d+m], kv.K32[i][s:s+m])
			copy(kv.V32[i][d:d+m], kv.V32[i][s:s+m])
		}
		if kv.KQ != nil {
			d, s, m := kv.QOffset(d), kv.QOffset(s), kv.QOffset(m)
			for i := range kv.KQ {
				copy(kv.KQ[i][d:d+m], kv.KQ[i][s:s+m])
				copy(kv.VQ[i][d:d+m], kv.VQ[i][s:s+m])
			}
		}
	}
}

// QOffset is the byte offset in a quantised cache's KQ or VQ array of
// element offset i (a multiple of 32, such as Layout.Row's).
func (kv *HostKV) QOffset(i int) int {
	return i / kv.spec.Type.BlockElems() * kv.spec.Type.BlockBytes()
}
