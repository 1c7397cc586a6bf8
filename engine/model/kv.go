package model

import (
	"fmt"
	"strings"
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
// and values (KVDim elements each). Which block belongs to which sequence is
// decided elsewhere (engine/kvcache); the forward pass only follows the
// block tables it is given.
//
// KV is not safe for concurrent use; the owner serialises forward passes and
// block copies.
type KV struct {
	BlockSize int
	NumBlocks int
	Type      KVType
	dim       int
	k16, v16  [][]uint16  // per layer: NumBlocks*BlockSize*dim, when Type is KVF16
	k32, v32  [][]float32 // likewise, when Type is KVF32
}

// KVBytesPerBlock is the memory one block takes across all layers.
func KVBytesPerBlock(c *Config, t KVType, blockSize int) int64 {
	return int64(c.Layers) * 2 * int64(blockSize) * int64(c.KVDim()) * t.bytes()
}

// NewKV allocates numBlocks blocks of blockSize tokens for a model of shape c.
func NewKV(c *Config, t KVType, numBlocks, blockSize int) (*KV, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache of %d blocks of %d tokens", numBlocks, blockSize)
	}
	kv := &KV{BlockSize: blockSize, NumBlocks: numBlocks, Type: t, dim: c.KVDim()}
	n := numBlocks * blockSize * kv.dim
	if t == KVF32 {
		kv.k32, kv.v32 = make([][]float32, c.Layers), make([][]float32, c.Layers)
		for l := range c.Layers {
			kv.k32[l], kv.v32[l] = make([]float32, n), make([]float32, n)
		}
		return kv, nil
	}
	kv.k16, kv.v16 = make([][]uint16, c.Layers), make([][]uint16, c.Layers)
	for l := range c.Layers {
		kv.k16[l], kv.v16[l] = make([]uint16, n), make([]uint16, n)
	}
	return kv, nil
}

// CopyBlock copies the first n token slots of block src into block dst in
// every layer (copy-on-write of a shared, partly filled block).
func (kv *KV) CopyBlock(dst, src, n int) {
	w := kv.BlockSize * kv.dim
	m := n * kv.dim
	for l := range kv.k16 {
		copy(kv.k16[l][dst*w:dst*w+m], kv.k16[l][src*w:])
		copy(kv.v16[l][dst*w:dst*w+m], kv.v16[l][src*w:])
	}
	for l := range kv.k32 {
		copy(kv.k32[l][dst*w:dst*w+m], kv.k32[l][src*w:])
		copy(kv.v32[l][dst*w:dst*w+m], kv.v32[l][src*w:])
	}
}

func (kv *KV) layers() int { return max(len(kv.k16), len(kv.k32)) }

// slot returns the offset of a token's keys (or values) within one layer.
func (kv *KV) slot(table []int32, pos int) int {
	return (int(table[pos/kv.BlockSize])*kv.BlockSize + pos%kv.BlockSize) * kv.dim
}
