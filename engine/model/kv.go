package model

import (
	"fmt"
	"strings"

	"rill/engine/backend/cpu"
)

// KVType is the element type of the KV cache.
type KVType uint8

const (
	// KVF16 stores keys and values as IEEE half floats and accumulates
	// attention as llama.cpp's CPU flash attention does (query rounded to
	// half, value sums kept in half precision), so that the engine reproduces
	// llama.cpp's numbers. Half the memory of KVF32. The default.
	KVF16 KVType = iota
	// KVF32 stores float32 and accumulates in float32: the exact reference.
	KVF32
)

func (t KVType) String() string {
	if t == KVF32 {
		return "f32"
	}
	return "f16"
}

// ParseKVType parses "f16" or "f32" ("" is f16).
func ParseKVType(s string) (KVType, error) {
	switch strings.ToLower(s) {
	case "", "f16":
		return KVF16, nil
	case "f32":
		return KVF32, nil
	}
	return 0, fmt.Errorf("kv cache type %q (want f16 or f32)", s)
}

func (t KVType) bytes() int64 {
	if t == KVF32 {
		return 4
	}
	return 2
}

// KV is the paged key/value memory of one model. For every layer it holds
// NumBlocks blocks of BlockSize token slots; a slot holds one token's keys
// and values. Which block belongs to which sequence is decided elsewhere
// (engine/kvcache); the forward pass only follows the block tables it is
// given.
//
// Within a layer the memory is ordered [block][kv head][slot][row] (the
// layout cpu.KVLayout describes): one head's keys of one block are
// contiguous, so attention reads them as a tile. A row is the head size
// rounded up to a multiple of 8; the padding stays zero.
//
// KV is not safe for concurrent use; the owner serialises forward passes and
// block copies.
type KV struct {
	BlockSize int
	NumBlocks int
	Type      KVType
	dim       int // keys (or values) per token per layer: HeadsKV*HeadDim
	layout    cpu.KVLayout
	k16, v16  [][]uint16  // per layer, when Type is KVF16
	k32, v32  [][]float32 // likewise, when Type is KVF32
}

// kvLayout is the layout of one layer of a cache of numBlocks blocks.
func kvLayout(c *Config, numBlocks, blockSize int) cpu.KVLayout {
	return cpu.KVLayout{Blocks: numBlocks, BlockSize: blockSize, Heads: c.HeadsKV, HeadDim: c.HeadDim}
}

// KVBytesPerBlock is the memory one block takes across all layers.
func KVBytesPerBlock(c *Config, t KVType, blockSize int) int64 {
	rows := int64(c.Layers) * 2 * int64(blockSize) * int64(c.HeadsKV)
	return rows * int64(kvLayout(c, 1, blockSize).RowDim()) * t.bytes()
}

// NewKV allocates numBlocks blocks of blockSize tokens for a model of shape c.
func NewKV(c *Config, t KVType, numBlocks, blockSize int) (*KV, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache of %d blocks of %d tokens", numBlocks, blockSize)
	}
	l := kvLayout(c, numBlocks, blockSize)
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("kv cache: %w", err)
	}
	kv := &KV{BlockSize: blockSize, NumBlocks: numBlocks, Type: t, dim: c.KVDim(), layout: l}
	n := l.Size()
	if t == KVF32 {
		kv.k32, kv.v32 = make([][]float32, c.Layers), make([][]float32, c.Layers)
		for i := range c.Layers {
			kv.k32[i], kv.v32[i] = make([]float32, n), make([]float32, n)
		}
		return kv, nil
	}
	kv.k16, kv.v16 = make([][]uint16, c.Layers), make([][]uint16, c.Layers)
	for i := range c.Layers {
		kv.k16[i], kv.v16[i] = make([]uint16, n), make([]uint16, n)
	}
	return kv, nil
}

// CopyBlock copies the first n token slots of block src into block dst in
// every layer (copy-on-write of a shared, partly filled block).
func (kv *KV) CopyBlock(dst, src, n int) {
	l := kv.layout
	m := n * l.RowDim()
	for h := range l.Heads {
		d, s := l.Row(dst, h, 0), l.Row(src, h, 0)
		for i := range kv.k16 {
			copy(kv.k16[i][d:d+m], kv.k16[i][s:s+m])
			copy(kv.v16[i][d:d+m], kv.v16[i][s:s+m])
		}
		for i := range kv.k32 {
			copy(kv.k32[i][d:d+m], kv.k32[i][s:s+m])
			copy(kv.v32[i][d:d+m], kv.v32[i][s:s+m])
		}
	}
}

func (kv *KV) layers() int { return max(len(kv.k16), len(kv.k32)) }

// store writes one token's keys and values of layer li (HeadsKV heads of
// HeadDim each, in k and v) into slot pos of the sequence with block table
// table, converting them to the cache's type.
func (kv *KV) store(li int, table []int32, pos int, k, v []float32) {
	l := kv.layout
	hd := l.HeadDim
	block, slot := int(table[pos/kv.BlockSize]), pos%kv.BlockSize
	for h := range l.Heads {
		row := l.Row(block, h, slot)
		kh, vh := k[h*hd:(h+1)*hd], v[h*hd:(h+1)*hd]
		if kv.Type == KVF32 {
			copy(kv.k32[li][row:row+hd], kh)
			copy(kv.v32[li][row:row+hd], vh)
			continue
		}
		cpu.F32ToF16s(kv.k16[li][row:row+hd], kh)
		cpu.F32ToF16s(kv.v16[li][row:row+hd], vh)
	}
}
