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
	// KVQ8_0 stores keys and values as GGML Q8_0 blocks of 32 values along
	// the head dimension (34 bytes per 32 values: 0.53 of KVF16's memory)
	// and attends as llama.cpp's CPU flash attention over such a cache:
	// the query is quantised to Q8_0 and dotted with the key blocks in
	// integers, values are dequantised and summed in float32. The model's
	// head size must be a multiple of 32.
	KVQ8_0
	// KVQ4_0 is KVQ8_0 with GGML Q4_0 blocks (18 bytes per 32 values: 0.28
	// of KVF16's memory).
	KVQ4_0
)

// kvTypes are the KV types by name, in the order they are listed in errors.
var kvTypes = []struct {
	name string
	typ  KVType
	elem quant.Type
}{
	{"f16", KVF16, quant.F16},
	{"f32", KVF32, quant.F32},
	{"q8_0", KVQ8_0, quant.Q8_0},
	{"q4_0", KVQ4_0, quant.Q4_0},
}

func (t KVType) String() string {
	for _, k := range kvTypes {
		if k.typ == t {
			return k.name
		}
	}
	return fmt.Sprintf("kvtype(%d)", uint8(t))
}

// ParseKVType parses "f16", "f32", "q8_0" or "q4_0" (llama.cpp's names
// for --cache-type-k/-v, in any case; "" is f16).
func ParseKVType(s string) (KVType, error) {
	if s == "" {
		return KVF16, nil
	}
	for _, k := range kvTypes {
		if strings.EqualFold(s, k.name) {
			return k.typ, nil
		}
	}
	return 0, fmt.Errorf("kv cache type %q (want f16, f32, q8_0 or q4_0)", s)
}

// elem is the cache's element type.
func (t KVType) elem() quant.Type {
	for _, k := range kvTypes {
		if k.typ == t {
			return k.elem
		}
	}
	return quant.Type(^uint32(0)) // no type: the cache's spec is refused
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

	// A split cache (NewSplitKVOn) keeps the sliding-window layers apart,
	// in win, of WindowBlocks blocks, addressed by Batch.WindowTables; mem
	// then holds the other layers. slot[li] is layer li's index in its
	// memory.
	WindowBlocks int
	win          tensor.KVCache
	slot         []int
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

// SlidingLayers is the number of c's layers that attend over a sliding
// window.
func (c *Config) SlidingLayers() int {
	n := 0
	for li := range c.Layers {
		if c.Sliding(li) {
			n++
		}
	}
	return n
}

// KVSplitBytesPerBlock is the host memory one block takes in each memory
// of a split cache (NewSplitKVOn): across the full-attention layers and
// across the sliding-window layers.
func KVSplitBytesPerBlock(c *Config, t KVType, blockSize int) (full, window int64) {
	s := kvSpec(c, t, 1, blockSize)
	perLayer := s.BytesPerBlock() / int64(c.Layers)
	n := int64(c.SlidingLayers())
	return (int64(c.Layers) - n) * perLayer, n * perLayer
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

// NewSplitKVOn is NewKVOn for a model with both sliding-window and
// full-attention layers, keeping them in two memories: numBlocks blocks
// for the full layers, addressed by Batch.Tables, and windowBlocks blocks
// for the sliding ones, addressed by Batch.WindowTables, so that the
// sliding layers need hold only their window (engine/kvcache's windowed
// pool frees the rest; its hole is one of the windowBlocks).
func NewSplitKVOn(be Backend, c *Config, t KVType, numBlocks, windowBlocks, blockSize int) (*KV, error) {
	n := c.SlidingLayers()
	if n == 0 || n == c.Layers {
		return nil, fmt.Errorf("split kv cache of a model with %d sliding layers of %d", n, c.Layers)
	}
	if numBlocks <= 0 || windowBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache of %d and %d blocks of %d tokens", numBlocks, windowBlocks, blockSize)
	}
	full := kvSpec(c, t, numBlocks, blockSize)
	full.Layers = c.Layers - n
	win := kvSpec(c, t, windowBlocks, blockSize)
	win.Layers = n
	mem, err := be.NewKVCache(full)
	if err != nil {
		return nil, fmt.Errorf("kv cache: %w", err)
	}
	wmem, err := be.NewKVCache(win)
	if err != nil {
		return nil, fmt.Errorf("kv cache of the sliding layers: %w", err)
	}
	kv := &KV{BlockSize: blockSize, NumBlocks: numBlocks, Type: t, mem: mem, WindowBlocks: windowBlocks, win: wmem, slot: make([]int, c.Layers)}
	var nf, nw int
	for li := range c.Layers {
		if c.Sliding(li) {
			kv.slot[li], nw = nw, nw+1
		} else {
			kv.slot[li], nf = nf, nf+1
		}
	}
	return kv, nil
}

// Split reports whether kv keeps the sliding-window layers apart.
func (kv *KV) Split() bool { return kv.win != nil }

// layer returns the memory of layer li, its index there and whether it is
// the window memory.
func (kv *KV) layer(c *Config, li int) (tensor.KVCache, int, bool) {
	if kv.win == nil {
		return kv.mem, li, false
	}
	if c.Sliding(li) {
		return kv.win, kv.slot[li], true
	}
	return kv.mem, kv.slot[li], false
}

// CopyBlock copies the first n token slots of block src into block dst in
// every layer (copy-on-write of a shared, partly filled block); in a split
// cache, in the full layers' memory.
func (kv *KV) CopyBlock(dst, src, n int) { kv.mem.CopyBlock(dst, src, n) }

// CopyWindowBlock is CopyBlock in the sliding layers' memory of a split
// cache; it does nothing in a cache that is not split.
func (kv *KV) CopyWindowBlock(dst, src, n int) {
	if kv.win != nil {
		kv.win.CopyBlock(dst, src, n)
	}
}

// Memory is the cache's memory, for the backend that computes on it (and
// for tests that inspect a host cache).
func (kv *KV) Memory() tensor.KVCache { return kv.mem }
