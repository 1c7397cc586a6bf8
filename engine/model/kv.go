package model

import (
	"fmt"
	"strings"

	"rill/engine/quant"
	"rill/engine/tensor"
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

// elem is the cache's element type.
func (t KVType) elem() quant.Type {
	if t == KVF32 {
		return quant.F32
	}
	return quant.F16
}

// KV is the paged key/value memory of one model. For every layer it holds
// NumBlocks blocks of BlockSize token slots; a slot holds one token's keys
// and values. Which block belongs to which sequence is decided elsewhere
// (engine/kvcache); the forward pass only follows the block tables it is
// given.
//
// The memory itself is a tensor.KVCache: host memory in the layout
// tensor.KVLayout describes (NewKV), or memory a backend allocated and
// keeps, such as a GPU's (NewKVOn). A Runner uses a KV only with a backend
// that can read its memory: the CPU backend reads host memory.
//
// KV is not safe for concurrent use; the owner serialises forward passes and
// block copies.
type KV struct {
	BlockSize int
	NumBlocks int
	Type      KVType
	mem       tensor.KVCache
}

// kvSpec describes the cache of numBlocks blocks of blockSize tokens for a
// model of shape c.
func kvSpec(c *Config, t KVType, numBlocks, blockSize int) tensor.KVSpec {
	return tensor.KVSpec{
		Layers: c.Layers,
		Type:   t.elem(),
		Layout: tensor.KVLayout{Blocks: numBlocks, BlockSize: blockSize, Heads: c.HeadsKV, HeadDim: c.HeadDim},
	}
}

// KVBytesPerBlock is the host memory one block takes across all layers.
func KVBytesPerBlock(c *Config, t KVType, blockSize int) int64 {
	return kvSpec(c, t, 1, blockSize).BytesPerBlock()
}

// NewKV allocates numBlocks blocks of blockSize tokens for a model of shape
// c in host memory, the memory the CPU backend computes on.
func NewKV(c *Config, t KVType, numBlocks, blockSize int) (*KV, error) {
	return newKV(c, t, numBlocks, blockSize, hostKV)
}

func hostKV(s tensor.KVSpec) (tensor.KVCache, error) {
	kv, err := tensor.NewHostKV(s)
	if err != nil {
		return nil, err
	}
	return kv, nil
}

// NewKVOn is NewKV in memory that be allocates and keeps (a device
// backend's own memory), for Runners on be.
func NewKVOn(be Backend, c *Config, t KVType, numBlocks, blockSize int) (*KV, error) {
	return newKV(c, t, numBlocks, blockSize, be.NewKVCache)
}

func newKV(c *Config, t KVType, numBlocks, blockSize int, alloc func(tensor.KVSpec) (tensor.KVCache, error)) (*KV, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache of %d blocks of %d tokens", numBlocks, blockSize)
	}
	mem, err := alloc(kvSpec(c, t, numBlocks, blockSize))
	if err != nil {
		return nil, fmt.Errorf("kv cache: %w", err)
	}
	return &KV{BlockSize: blockSize, NumBlocks: numBlocks, Type: t, mem: mem}, nil
}

// CopyBlock copies the first n token slots of block src into block dst in
// every layer (copy-on-write of a shared, partly filled block).
func (kv *KV) CopyBlock(dst, src, n int) { kv.mem.CopyBlock(dst, src, n) }

// Memory is the cache's memory, for the backend that computes on it (and
// for tests that inspect a host cache).
func (kv *KV) Memory() tensor.KVCache { return kv.mem }
