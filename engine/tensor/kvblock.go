package tensor

import (
	"fmt"
	"unsafe"
)

// The block transfer of a host cache: one block's keys and values of
// every layer as bytes, for a tier of the prompt cache below memory (a
// disk). The bytes are, layer by layer, the block's key rows then its
// value rows, each [head][slot][RowDim()] elements (padding included) in
// the host's byte order: the cache's own memory, copied whole.

// BlockLayout names the byte layout of ReadBlock's bytes: element type,
// shape and byte order. Two caches whose BlockLayout is equal read each
// other's blocks.
func (kv *HostKV) BlockLayout() string {
	s := kv.spec
	return fmt.Sprintf("host/%s/%s/layers=%d/block=%d/heads=%d/head=%d/row=%d",
		byteOrder(), s.Type, s.Layers, s.Layout.BlockSize, s.Layout.Heads, s.Layout.HeadDim, s.Layout.RowDim())
}

// BlockBytes is the size of one block's bytes.
func (kv *HostKV) BlockBytes() int { return int(kv.spec.BytesPerBlock()) }

// ReadBlock copies block id into dst, which must hold BlockBytes bytes.
func (kv *HostKV) ReadBlock(dst []byte, id int) {
	kv.blockBytes(id, len(dst), func(mem []byte) { dst = dst[copy(dst, mem):] })
}

// WriteBlock copies src, BlockBytes bytes that ReadBlock of a cache of
// the same BlockLayout wrote, into block id.
func (kv *HostKV) WriteBlock(id int, src []byte) {
	kv.blockBytes(id, len(src), func(mem []byte) { src = src[copy(mem, src):] })
}

// blockBytes calls f with the memory of block id's parts in order: per
// layer its keys, then its values. n is the caller's buffer size, checked.
func (kv *HostKV) blockBytes(id, n int, f func(mem []byte)) {
	l := kv.spec.Layout
	if id < 0 || id >= l.Blocks || n != kv.BlockBytes() {
		panic(fmt.Sprintf("tensor: block %d of %d, %d bytes for a block of %d", id, l.Blocks, n, kv.BlockBytes()))
	}
	lo, hi := l.Row(id, 0, 0), l.Row(id+1, 0, 0)
	for i := range kv.K16 {
		f(halfBytes(kv.K16[i][lo:hi]))
		f(halfBytes(kv.V16[i][lo:hi]))
	}
	for i := range kv.K32 {
		f(floatBytes(kv.K32[i][lo:hi]))
		f(floatBytes(kv.V32[i][lo:hi]))
	}
	if kv.KQ != nil {
		lo, hi := kv.QOffset(lo), kv.QOffset(hi)
		for i := range kv.KQ {
			f(kv.KQ[i][lo:hi])
			f(kv.VQ[i][lo:hi])
		}
	}
}

func halfBytes(s []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

func floatBytes(s []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// byteOrder names the host's byte order, which the bytes of a block are in.
func byteOrder() string {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return "le"
	}
	return "be"
}
