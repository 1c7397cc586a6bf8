package cpu

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"rill/engine/tensor"
)

// Paged attention: one sequence's queries against the keys and values its
// block table points at, in a cache laid out per KV head so that a head's
// keys (and values) of one block are contiguous rows.
//
// AttendF16 reproduces llama.cpp's CPU flash attention over an F16 cache,
// position by position in position order: the query is rounded to half
// precision, the value accumulator is rounded to half precision after every
// update, and the softmax maximum and normaliser are float32. The kernels
// reorganise the work (a tile of positions at a time, keys converted once
// per tile for every query head of the group, the tile's exponentials in one
// vector call once its running maxima are known, the ordered accumulator
// updates of several head slices interleaved), never the arithmetic: the
// SIMD and the generic kernels give bit-identical results, and so does any
// block table that holds the same keys and values.

// The kernels read a cache laid out as tensor.KVLayout describes (the host
// layout): per layer, keys and values are two arrays of Layout.Size()
// elements ordered [block][head][slot][RowDim()], a head's slots of one
// block contiguous rows whose padding past HeadDim is finite (zero in a
// cache that only ever writes the first HeadDim elements of a zeroed row).

// MaxAttnHeadDim is the largest head size the attention kernels take.
const MaxAttnHeadDim = 2048

// checkLayout reports whether l describes a cache the kernels can read: a
// valid layout (tensor.KVLayout.Validate) whose heads are at most
// MaxAttnHeadDim values.
func checkLayout(l tensor.KVLayout) error {
	if l.HeadDim > MaxAttnHeadDim {
		return fmt.Errorf("kv layout head size %d (want 1 to %d)", l.HeadDim, MaxAttnHeadDim)
	}
	return l.Validate()
}

// checkAttn validates the arguments shared by AttendF16 and AttendF32 and
// returns the number of query heads per KV head.
func checkAttn(outLen, qLen, kLen, vLen int, l tensor.KVLayout, head, kvHeads int, table []int32, n int) (int, error) {
	if err := checkLayout(l); err != nil {
		return 0, fmt.Errorf("attention: %w", err)
	}
	hd := l.HeadDim
	switch {
	case kLen != l.Size() || vLen != l.Size():
		return 0, fmt.Errorf("attention: %d keys and %d values, layout holds %d", kLen, vLen, l.Size())
	case head < 0 || kvHeads <= 0 || head > l.Heads-kvHeads:
		return 0, fmt.Errorf("attention: kv heads %d to %d of %d", head, head+kvHeads-1, l.Heads)
	case qLen == 0 || qLen%(hd*kvHeads) != 0:
		return 0, fmt.Errorf("attention: %d query values are not %d groups of heads of %d", qLen, kvHeads, hd)
	case outLen != qLen:
		return 0, fmt.Errorf("attention: output of %d values for %d query values", outLen, qLen)
	case n <= 0:
		return 0, errors.New("attention: no positions to attend to")
	}
	if err := checkTable(l, table, n); err != nil {
		return 0, err
	}
	return qLen / (hd * kvHeads), nil
}

// checkTable reports whether table maps positions 0..n-1 to blocks of l.
func checkTable(l tensor.KVLayout, table []int32, n int) error {
	if n > len(table)*l.BlockSize {
		return fmt.Errorf("attention: %d positions but the table maps %d blocks of %d", n, len(table), l.BlockSize)
	}
	for i, id := range table[:(n+l.BlockSize-1)/l.BlockSize] {
		if id < 0 || int(id) >= l.Blocks {
			return fmt.Errorf("attention: table entry %d is block %d of %d", i, id, l.Blocks)
		}
	}
	return nil
}

// AttendF16 computes attention for the query heads of KV heads head to
// head+kvHeads-1 at one position of a sequence: q holds, for each of those
// KV heads in order, the group = len(q)/(kvHeads*HeadDim) query heads that
// share it (grouped-query attention), HeadDim values each; out receives as
// many rows. They attend to positions 0..n-1 of the sequence, whose
// position p lives in slot p%BlockSize of block table[p/BlockSize] of the
// half precision keys k and values v (layout l). Each KV head's keys and
// values are read once for its whole group; taking several KV heads in one
// call lets the kernels interleave more independent work.
//
// Numerics (llama.cpp's flash attention over an F16 cache): the query is
// rounded to half precision; each score is the dot product of the rounded
// query and the key, summed exactly in float64 (products of halves are
// exact), rounded to float32 and multiplied by scale; then for each
// position in order, with M the running maximum, S the running sum and acc
// the value accumulator rounded to half after every step (h):
//
//	if s > M: ms = exp(M-s); M = s; acc = h(acc*ms); vs = 1
//	else:     ms = 1; vs = exp(s-M)
//	acc = h(acc + v*vs); S = S*ms + vs
//
// and out = acc * (1/S). acc + v*vs is a fused multiply-add (one float32
// rounding, as llama.cpp's vectorised vec_mad_f16), the other products and
// sums are rounded each; exp is correctly rounded to float32 (a float64
// polynomial) for all but a vanishing fraction of arguments. A head's
// result depends only on its query and the cache, not on the other heads
// of the call.
//
// It never allocates and is safe for concurrent use on disjoint outputs.
// Invalid arguments are reported as an error and leave out unspecified.
func AttendF16(out, q []float32, k, v []uint16, l tensor.KVLayout, head, kvHeads int, table []int32, n int, scale float32) error {
	group, err := checkAttn(len(out), len(q), len(k), len(v), l, head, kvHeads, table, n)
	if err != nil {
		return err
	}
	attendF16(out, q, k, v, l, head, group, table, n, scale, attnLevel())
	return nil
}

// AttendF32 is AttendF16 over a float32 cache, in exact float32 arithmetic:
// online softmax over tiles of positions (the maximum is updated once per
// tile), float32 scores, weights and accumulators. Same contract otherwise.
func AttendF32(out, q []float32, k, v []float32, l tensor.KVLayout, head, kvHeads int, table []int32, n int, scale float32) error {
	group, err := checkAttn(len(out), len(q), len(k), len(v), l, head, kvHeads, table, n)
	if err != nil {
		return err
	}
	attendF32(out, q, k, v, l, head, group, table, n, scale, useSIMD)
	return nil
}

// Bounds of the scratch memory of one attention call.
const (
	// attnTile is the most positions handled per tile.
	attnTile = 16
	// attnMaxGroup is the most query heads handled per pass over the keys.
	attnMaxGroup = 32
	// attnQDim bounds heads x RowDim per pass: the float64 queries and the
	// float32 accumulators.
	attnQDim = 2048
	// attnKDim bounds positions x RowDim per tile: the float64 keys.
	attnKDim = 4096
)

// attnScratch is the working memory of one attention call. Calls take it
// from a free list rather than the stack (a stack frame would be zeroed on
// every call, which for small heads costs more than the attention itself)
// or a sync.Pool (which drops its objects at garbage collections, so a
// steady-state forward pass would still allocate now and then).
//
// Heads are handled in blocks of 8, one per vector lane of the softmax
// bookkeeping: scores are [block][position][8], weight rows are
// [position][block][16] (ms of the block's 8 heads, then vs).
type attnScratch struct {
	qd    [attnQDim]float64                    // [head][RowDim] rounded queries
	acc   [attnQDim]float32                    // [head][RowDim] value accumulators
	kd    [attnKDim]float64                    // [position][RowDim] one KV head's keys of the tile
	sc    [attnMaxGroup * attnTile]float32     // scores
	w     [2 * attnMaxGroup * attnTile]float32 // weight rows
	flags [attnTile]uint8                      // per position: some head has a new maximum
	m, s  [attnMaxGroup]float32                // per head: running maximum and sum
	voff  [attnMaxGroup]int                    // per head: byte offset of its KV head's value rows
}

// freeList keeps objects of one kind for reuse: it grows to the largest
// number in use at once (for the attention scratch and jobs, one per
// thread of the forward passes) and keeps them. A free list rather than a
// sync.Pool, which drops its objects at garbage collections, so that a
// steady-state forward pass would still allocate now and then.
type freeList[T any] struct {
	mu   sync.Mutex
	free []*T
	// make makes a new object when none is free; nil: new(T).
	make func() *T
}

func (f *freeList[T]) get() *T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.free); n > 0 {
		x := f.free[n-1]
		f.free = f.free[:n-1]
		return x
	}
	if f.make != nil {
		return f.make()
	}
	return new(T)
}

func (f *freeList[T]) put(x *T) {
	f.mu.Lock()
	f.free = append(f.free, x)
	f.mu.Unlock()
}

// attnScratches is the free list of attnScratch.
var attnScratches freeList[attnScratch]

// attnKernels selects the kernels of AttendF16: the generic Go ones, the
// AVX2 ones, or the AVX2 ones with the AVX-512 scores and value updates.
// They give the same bits.
type attnKernels int

const (
	attnGeneric attnKernels = iota
	attnAVX2
	attnAVX512
)

// attnLevel is the kernel level of this process (RILL_CPU_NOSIMD and
// RILL_CPU_NOAVX512 as for MatMul).
func attnLevel() attnKernels {
	switch {
	case useAVX512:
		return attnAVX512
	case useSIMD:
		return attnAVX2
	}
	return attnGeneric
}

// attendF16 implements AttendF16 for the query heads q (group per KV head,
// from KV head head on), in passes of at most attnMaxGroup heads.
func attendF16(out, q []float32, k, v []uint16, l tensor.KVLayout, head, group int, table []int32, n int, scale float32, level attnKernels) {
	sc := attnScratches.get()
	defer attnScratches.put(sc)
	hd, rd := l.HeadDim, l.RowDim()
	heads := len(q) / hd
	gs := min(heads, attnMaxGroup, attnQDim/rd)
	tile := min(attnTile, l.BlockSize, attnKDim/rd)
	for h0 := 0; h0 < heads; h0 += gs {
		gn := min(gs, heads-h0)
		attendF16Pass(sc, out[h0*hd:(h0+gn)*hd], q[h0*hd:(h0+gn)*hd], k, v, l, head, group, h0, gn, tile, table, n, scale, level)
	}
}

// attendF16Pass runs query heads h0..h0+gn-1 of the call (head h0+i
// belongs to KV head head+(h0+i)/group) over all n positions.
func attendF16Pass(sc *attnScratch, out, q []float32, k, v []uint16, l tensor.KVLayout, head, group, h0, gn, tile int, table []int32, n int, scale float32, level attnKernels) {
	simd, z := level >= attnAVX2, level == attnAVX512
	hd, rd := l.HeadDim, l.RowDim()
	nb := (gn + 7) / 8 // blocks of 8 heads
	qd, acc := sc.qd[:gn*rd], sc.acc[:gn*rd]
	for i := range gn {
		roundQuery(qd[i*rd:(i+1)*rd], q[i*hd:(i+1)*hd], simd)
	}
	clear(acc)
	clear(sc.sc[:nb*tile*8]) // lanes past gn stay 0: finite, never read
	m, s := sc.m[:nb*8], sc.s[:nb*8]
	for i := range m {
		m[i], s[i] = float32(math.Inf(-1)), 0
	}
	// The pass spans KV heads kv0..kv1; a KV head's rows of one block are
	// headStride elements after the previous head's.
	kv0, kv1 := head+h0/group, head+(h0+gn-1)/group
	headStride := l.BlockSize * rd
	voff := sc.voff[:gn]
	for i := range gn {
		voff[i] = 2 * headStride * (head + (h0+i)/group - kv0)
	}
	for p0 := 0; p0 < n; {
		slot := p0 % l.BlockSize
		cnt := min(tile, l.BlockSize-slot, n-p0)
		row := l.Row(int(table[p0/l.BlockSize]), kv0, slot)
		// The AVX-512 scores read the keys in position pairs (zero-padded
		// when cnt is odd), where they fit the scratch.
		pairs := z && (cnt+1)/2*2*rd <= len(sc.kd)
		kd := sc.kd[:cnt*rd]
		if pairs {
			kd = sc.kd[:(cnt+1)/2*2*rd]
		}
		for i := 0; i < gn; {
			// Heads i..j-1 share one KV head: convert its keys once.
			kvh := head + (h0+i)/group
			j := min(gn, (kvh-head+1)*group-h0)
			kr := row + (kvh-kv0)*headStride
			if pairs {
				halfToF64Pairs(kd, k[kr:kr+cnt*rd], cnt, rd)
			} else {
				halfToF64(kd, k[kr:kr+cnt*rd], simd)
			}
			for ; i < j; i++ {
				o := (i/8*tile)*8 + i%8
				if pairs {
					scoresPairs(sc.sc[o:o+8*(cnt-1)+1], qd[i*rd:(i+1)*rd], kd, cnt, rd, scale)
				} else {
					scores(sc.sc[o:o+8*(cnt-1)+1], qd[i*rd:(i+1)*rd], kd, cnt, rd, scale, simd)
				}
			}
		}
		flags, w := sc.flags[:cnt], sc.w[:cnt*16*nb]
		clear(flags)
		for b := range nb {
			lanes := uint(1)<<min(8, gn-8*b) - 1
			weights(sc.sc[b*tile*8:(b*tile+cnt)*8], w[16*b:], flags, m[8*b:8*b+8], s[8*b:8*b+8], cnt, 16*nb, lanes, simd)
		}
		vr := v[row : row+(kv1-kv0)*headStride+cnt*rd]
		if simd {
			valuesSIMD(acc, vr, w, flags, voff, cnt, rd, gn, z)
		} else {
			values(acc, vr, w, flags, voff, cnt, rd, gn, false)
		}
		p0 += cnt
	}
	for i := range gn {
		inv := 1 / s[i]
		o, a := out[i*hd:(i+1)*hd], acc[i*rd:i*rd+hd]
		for d := range o {
			o[d] = a[d] * inv
		}
	}
}
