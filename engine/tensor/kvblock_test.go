package tensor

import (
	"testing"

	"rill/engine/quant"
)

// TestHostKVBlockTransfer moves a block from one cache to another block of
// a second cache of the same layout and checks that exactly that block's
// slots changed, in every layer, keys and values.
func TestHostKVBlockTransfer(t *testing.T) {
	t.Parallel()
	for _, typ := range []quant.Type{quant.F16, quant.F32, quant.Q8_0, quant.Q4_0} {
		t.Run(typ.String(), func(t *testing.T) {
			hd := 6
			if typ.BlockElems() > 1 {
				hd = 64
			}
			spec := KVSpec{Layers: 3, Type: typ, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: hd}}
			src, _ := NewHostKV(spec)
			dst, _ := NewHostKV(spec)
			fill(src, 1)
			fill(dst, 1000)
			before := snapshot(dst)
			if src.BlockLayout() != dst.BlockLayout() {
				t.Fatal("equal specs, different layouts")
			}
			buf := make([]byte, src.BlockBytes())
			if int64(len(buf)) != spec.BytesPerBlock() {
				t.Fatalf("BlockBytes %d, BytesPerBlock %d", len(buf), spec.BytesPerBlock())
			}
			src.ReadBlock(buf, 2)
			dst.WriteBlock(1, buf)
			after := snapshot(dst)
			want := snapshot(src)
			l := spec.Layout
			per := l.Row(1, 0, 0) // one block's elements of one array
			if spec.Quantized() {
				per = src.QOffset(per) // bytes
			}
			for i := range after {
				for j := range after[i] {
					block := j / per
					exp := before[i][j]
					if block == 1 {
						exp = want[i][j+per] // the same slot of block 2
					}
					if after[i][j] != exp {
						t.Fatalf("array %d element %d (block %d): %v, want %v", i, j, block, after[i][j], exp)
					}
				}
			}
		})
	}
	a, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.F16, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: 6}})
	b, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.F32, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: 6}})
	c, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.F16, Layout: KVLayout{Blocks: 9, BlockSize: 4, Heads: 1, HeadDim: 6}})
	// The disk tier keys its files on the layout: a Q8_0 or Q4_0 cache of
	// the same shape must not read an F16 cache's blocks, nor each other's.
	q8, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.Q8_0, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: 32}})
	q4, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.Q4_0, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: 32}})
	f16, _ := NewHostKV(KVSpec{Layers: 3, Type: quant.F16, Layout: KVLayout{Blocks: 4, BlockSize: 4, Heads: 2, HeadDim: 32}})
	if q8.BlockLayout() == q4.BlockLayout() || q8.BlockLayout() == f16.BlockLayout() || q4.BlockLayout() == f16.BlockLayout() {
		t.Fatal("caches of f16, q8_0 and q4_0 elements share a layout name")
	}
	if a.BlockLayout() == b.BlockLayout() || a.BlockLayout() == c.BlockLayout() {
		t.Fatal("caches of different element types or shapes share a layout name")
	}
}

// fill gives every element of kv a distinct value from base on.
func fill(kv *HostKV, base int) {
	n := base
	for _, arrs := range [][][]uint16{kv.K16, kv.V16} {
		for _, a := range arrs {
			for i := range a {
				a[i] = uint16(n)
				n++
			}
		}
	}
	for _, arrs := range [][][]float32{kv.K32, kv.V32} {
		for _, a := range arrs {
			for i := range a {
				a[i] = float32(n)
				n++
			}
		}
	}
	for _, arrs := range [][][]byte{kv.KQ, kv.VQ} {
		for _, a := range arrs {
			for i := range a {
				a[i] = byte(n)
				n += 7
			}
		}
	}
}

// snapshot returns every key and value array of kv as float64s.
func snapshot(kv *HostKV) [][]float64 {
	var out [][]float64
	for _, arrs := range [][][]uint16{kv.K16, kv.V16} {
		for _, a := range arrs {
			s := make([]float64, len(a))
			for i, v := range a {
				s[i] = float64(v)
			}
			out = append(out, s)
		}
	}
	for _, arrs := range [][][]float32{kv.K32, kv.V32} {
		for _, a := range arrs {
			s := make([]float64, len(a))
			for i, v := range a {
				s[i] = float64(v)
			}
			out = append(out, s)
		}
	}
	for _, arrs := range [][][]byte{kv.KQ, kv.VQ} {
		for _, a := range arrs {
			s := make([]float64, len(a))
			for i, v := range a {
				s[i] = float64(v)
			}
			out = append(out, s)
		}
	}
	return out
}
