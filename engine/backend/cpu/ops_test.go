package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// TestAttnToken: the attention order visits every token of the batch once
// and pairs early tokens with late ones.
func TestAttnToken(t *testing.T) {
	t.Parallel()
	for _, T := range []int{1, 2, 5, 64} {
		seen := make([]bool, T)
		for u := range T {
			i := attnToken(u, T)
			if i < 0 || i >= T || seen[i] {
				t.Fatalf("T=%d: order position %d maps to token %d twice or out of range", T, u, i)
			}
			seen[i] = true
			if u%2 == 1 && i != T-1-u/2 {
				t.Fatalf("T=%d: order position %d is token %d, want the late token %d", T, u, i, T-1-u/2)
			}
		}
	}
}

func sameOpBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

// TestStoreKV: StoreKV writes a token's heads to the rows of its slot in
// the block its table names, padding rows to a multiple of 8 that stay
// zero, and CopyBlock copies the first n slots of every head and layer.
func TestStoreKV(t *testing.T) {
	t.Parallel()
	be := New(Options{Threads: 1})
	defer be.Close()
	l := tensor.KVLayout{Blocks: 4, BlockSize: 16, Heads: 3, HeadDim: 4}
	for _, typ := range []quant.Type{quant.F16, quant.F32} {
		c, err := be.NewKVCache(tensor.KVSpec{Layers: 2, Type: typ, Layout: l})
		if err != nil {
			t.Fatal(err)
		}
		kv := c.(*tensor.HostKV)
		k := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		v := make([]float32, len(k))
		for i := range v {
			v[i] = -k[i]
		}
		var pg tensor.Paging
		pg.Tables = [][]int32{{2, 0}}
		var ks, vs []float32
		for pos := range 20 {
			pg.Pos, pg.Seq = append(pg.Pos, int32(pos)), append(pg.Seq, 0)
			ks, vs = append(ks, k...), append(vs, v...)
		}
		if err := be.StoreKV(c, 1, ks, vs, pg); err != nil {
			t.Fatal(err)
		}
		kv.CopyBlock(3, 2, 5)
		for h := range 3 {
			for slot := range 16 {
				for blk, n := range map[int]int{2: 16, 3: 5, 0: 4, 1: 0} {
					row := l.Row(blk, h, slot)
					for d := range 8 {
						var wantK, gotK, gotV float32
						if d < 4 && slot < n {
							wantK = k[h*4+d]
						}
						if typ == quant.F32 {
							gotK, gotV = kv.K32[1][row+d], kv.V32[1][row+d]
						} else {
							gotK, gotV = quant.F16ToF32(kv.K16[1][row+d]), quant.F16ToF32(kv.V16[1][row+d])
						}
						if gotK != wantK || gotV != -wantK {
							t.Fatalf("%v: block %d head %d slot %d [%d] = %g, %g, want %g, %g", typ, blk, h, slot, d, gotK, gotV, wantK, -wantK)
						}
					}
				}
			}
		}
		if kv.K16 != nil && kv.K16[0][l.Row(2, 0, 0)] != 0 || kv.K32 != nil && kv.K32[0][l.Row(2, 0, 0)] != 0 {
			t.Errorf("%v: StoreKV of layer 1 wrote layer 0", typ)
		}
	}
}

// TestAttentionBatch: Attention over a batch of tokens of several
// sequences, split over threads, gives each token exactly the bits of the
// kernel called for that token alone.
func TestAttentionBatch(t *testing.T) {
	t.Parallel()
	r := newRand(t, 13)
	for _, threads := range []int{1, 3} {
		be := New(Options{Threads: threads})
		defer be.Close()
		for _, typ := range []quant.Type{quant.F16, quant.F32} {
			for _, s := range []struct{ heads, kvHeads, hd int }{{4, 4, 16}, {8, 2, 32}, {6, 1, 8}} {
				t.Run(fmt.Sprintf("threads=%d/%v/h=%d/kv=%d/hd=%d", threads, typ, s.heads, s.kvHeads, s.hd), func(t *testing.T) {
					l := tensor.KVLayout{Blocks: 12, BlockSize: 16, Heads: s.kvHeads, HeadDim: s.hd}
					c, err := be.NewKVCache(tensor.KVSpec{Layers: 2, Type: typ, Layout: l})
					if err != nil {
						t.Fatal(err)
					}
					// Three sequences: a long prefill, a decode deep in its
					// context, a short prompt; their blocks interleaved.
					pg := tensor.Paging{Tables: [][]int32{{5, 1, 9}, {0, 7, 3, 11}, {4}}}
					for seq, span := range [][2]int{{0, 40}, {57, 58}, {0, 6}} {
						var hist tensor.Paging
						hist.Tables = pg.Tables
						for p := range span[0] {
							hist.Pos, hist.Seq = append(hist.Pos, int32(p)), append(hist.Seq, int32(seq))
						}
						dim := len(hist.Pos) * l.Heads * l.HeadDim
						if err := be.StoreKV(c, 1, randFloats(r, dim, 1), randFloats(r, dim, 1), hist); err != nil {
							t.Fatal(err)
						}
						for p := span[0]; p < span[1]; p++ {
							pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, int32(seq))
						}
					}
					T := len(pg.Pos)
					dim := T * l.Heads * l.HeadDim
					if err := be.StoreKV(c, 1, randFloats(r, dim, 1), randFloats(r, dim, 1), pg); err != nil {
						t.Fatal(err)
					}
					at := tensor.Attention{Heads: s.heads, Scale: float32(1 / math.Sqrt(float64(s.hd)))}
					q := randFloats(r, T*s.heads*s.hd, 1)
					out := make([]float32, len(q))
					if err := be.Attention(out, q, c, 1, at, pg); err != nil {
						t.Fatal(err)
					}
					kv := c.(*tensor.HostKV)
					w := s.heads * s.hd
					for tok := range T {
						want := make([]float32, w)
						n := int(pg.Pos[tok]) + 1
						var err error
						if typ == quant.F32 {
							err = AttendF32(want, q[tok*w:(tok+1)*w], kv.K32[1], kv.V32[1], l, 0, s.kvHeads, pg.Table(tok), n, at.Scale)
						} else {
							err = AttendF16(want, q[tok*w:(tok+1)*w], kv.K16[1], kv.V16[1], l, 0, s.kvHeads, pg.Table(tok), n, at.Scale)
						}
						if err != nil {
							t.Fatal(err)
						}
						sameOpBits(t, fmt.Sprintf("token %d", tok), out[tok*w:(tok+1)*w], want)
					}
				})
			}
		}
	}
}

// foreignKV is a cache the CPU backend did not make.
type foreignKV struct{ tensor.KVSpec }

func (f foreignKV) Spec() tensor.KVSpec       { return f.KVSpec }
func (f foreignKV) CopyBlock(dst, src, n int) {}

// TestOpsErrors: memory the backend cannot read and arguments that do not
// fit the cache are errors, not crashes.
func TestOpsErrors(t *testing.T) {
	t.Parallel()
	be := New(Options{Threads: 1})
	defer be.Close()
	spec := tensor.KVSpec{Layers: 1, Type: quant.F16, Layout: tensor.KVLayout{Blocks: 2, BlockSize: 16, Heads: 2, HeadDim: 8}}
	kv, err := be.NewKVCache(spec)
	if err != nil {
		t.Fatal(err)
	}
	pg := tensor.Paging{Pos: []int32{0}, Seq: []int32{0}, Tables: [][]int32{{1}}}
	kvs := make([]float32, 16)
	q := make([]float32, 32)
	table := tensor.Matrix{Type: quant.F32, Rows: 2, Cols: 8, Data: make([]byte, 64)}
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"store into a foreign cache", "host memory", be.StoreKV(foreignKV{spec}, 0, kvs, kvs, pg)},
		{"attend over a foreign cache", "host memory", be.Attention(q, q, foreignKV{spec}, 0, tensor.Attention{Heads: 4, Scale: 1}, pg)},
		{"store into layer 1 of 1", "layer", be.StoreKV(kv, 1, kvs, kvs, pg)},
		{"query heads not a multiple", "query heads", be.Attention(q[:24], q[:24], kv, 0, tensor.Attention{Heads: 3, Scale: 1}, pg)},
		{"short query", "query", be.Attention(q[:16], q[:16], kv, 0, tensor.Attention{Heads: 4, Scale: 1}, pg)},
		{"table past the cache", "block", be.Attention(q, q, kv, 0, tensor.Attention{Heads: 4, Scale: 1}, tensor.Paging{Pos: []int32{0}, Seq: []int32{0}, Tables: [][]int32{{2}}})},
		{"negative window", "window -1", be.Attention(q, q, kv, 0, tensor.Attention{Heads: 4, Scale: 1, Window: -1}, pg)},
		{"negative soft cap", "soft cap -2", be.Attention(q, q, kv, 0, tensor.Attention{Heads: 4, Scale: 1, SoftCap: -2}, pg)},
		{"embedding row past the table", "row 2 of 2", be.Embed(make([]float32, 8), table, []int32{2})},
		{"embedding into a short row", "values for", be.Embed(make([]float32, 7), table, []int32{0})},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, c.err, c.want)
		}
	}
	if _, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: quant.F16, Layout: tensor.KVLayout{Blocks: 1, BlockSize: 16, Heads: 1, HeadDim: MaxAttnHeadDim + 8}}); err == nil {
		t.Error("NewKVCache accepted a head size the kernels do not take")
	}
}

// TestRowOps: the batched operations are the package's kernels applied to
// each row (RMSNorm, RoPE at each row's own position, AddBias, Embed's
// dequantised rows), bit for bit.
func TestRowOps(t *testing.T) {
	t.Parallel()
	be := New(Options{Threads: 1})
	defer be.Close()
	r := newRand(t, 14)
	const rows, heads, hd = 5, 3, 16
	w := heads * hd

	x, weight := randFloats(r, rows*w, 1), randFloats(r, hd, 1)
	got := make([]float32, len(x))
	be.RMSNorm(got, x, weight, 1e-5) // per head: len(weight) divides a row
	for i := 0; i < len(x); i += hd {
		want := make([]float32, hd)
		RMSNorm(want, x[i:i+hd], weight, 1e-5)
		sameOpBits(t, fmt.Sprintf("RMSNorm row at %d", i), got[i:i+hd], want)
	}

	rope := tensor.RoPE{Dims: 12, Base: 10000, FreqScale: 0.5, Neox: true}
	pos := []int32{0, 7, 3, 1000, 7}
	got = append([]float32(nil), x...)
	be.RoPE(got, pos, heads, hd, rope)
	for i, p := range pos {
		want := append([]float32(nil), x[i*w:(i+1)*w]...)
		RoPE(want, heads, hd, rope.Dims, int(p), rope.Base, rope.FreqScale, rope.Neox)
		sameOpBits(t, fmt.Sprintf("RoPE row %d", i), got[i*w:(i+1)*w], want)
	}

	bias := randFloats(r, w, 1)
	got = append([]float32(nil), x...)
	be.AddBias(got, bias)
	for i := range rows {
		want := make([]float32, w)
		Add(want, x[i*w:(i+1)*w], bias)
		sameOpBits(t, fmt.Sprintf("AddBias row %d", i), got[i*w:(i+1)*w], want)
	}

	table := randFloats(r, 4*64, 1)
	m := tensor.Matrix{Type: quant.Q8_0, Rows: 4, Cols: 64, Data: quantize(t, quant.Q8_0, table)}
	got = make([]float32, 3*64)
	if err := be.Embed(got, m, []int32{3, 0, 3}); err != nil {
		t.Fatal(err)
	}
	all := dequantize(t, quant.Q8_0, m.Data, 4*64)
	for i, row := range []int{3, 0, 3} {
		sameOpBits(t, fmt.Sprintf("Embed row %d", i), got[i*64:(i+1)*64], all[row*64:(row+1)*64])
	}
}

// TestAttentionWindowBatch: with a sliding window or soft-capped scores,
// Attention gives each token of a batch over several sequences and threads
// the bits of AttendF16Window (AttendF32Window) over its own window; a
// window longer than the context is the whole context.
func TestAttentionWindowBatch(t *testing.T) {
	t.Parallel()
	r := newRand(t, 15)
	for _, threads := range []int{1, 3} {
		be := New(Options{Threads: threads})
		defer be.Close()
		for _, typ := range []quant.Type{quant.F16, quant.F32} {
			for _, at := range []tensor.Attention{
				{Heads: 8, Scale: 0.25, Window: 5},
				{Heads: 8, Scale: 0.25, Window: 16, SoftCap: 2},
				{Heads: 8, Scale: 1, SoftCap: 1.5},
				{Heads: 8, Scale: 0.25, Window: 1000},
			} {
				t.Run(fmt.Sprintf("threads=%d/%v/%+v", threads, typ, at), func(t *testing.T) {
					l := tensor.KVLayout{Blocks: 8, BlockSize: 16, Heads: 2, HeadDim: 16}
					c, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: typ, Layout: l})
					if err != nil {
						t.Fatal(err)
					}
					// A prefill of 30 tokens and a decode at position 41.
					pg := tensor.Paging{Tables: [][]int32{{6, 1}, {0, 7, 3}}}
					var hist tensor.Paging
					hist.Tables = pg.Tables
					for p := range 41 {
						hist.Pos, hist.Seq = append(hist.Pos, int32(p)), append(hist.Seq, 1)
					}
					for p := range 30 {
						pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, 0)
					}
					pg.Pos, pg.Seq = append(pg.Pos, 41), append(pg.Seq, 1)
					T, w := len(pg.Pos), at.Heads*l.HeadDim
					q, out := attendRandom(t, r, be, c, at, hist, pg)
					kv := c.(*tensor.HostKV)
					for tok := range T {
						want := make([]float32, w)
						n := int(pg.Pos[tok]) + 1
						start := 0
						if at.Window > 0 {
							start = max(0, n-at.Window)
						}
						if typ == quant.F32 {
							err = AttendF32Window(want, q[tok*w:(tok+1)*w], kv.K32[0], kv.V32[0], l, 0, l.Heads, pg.Table(tok), start, n, at.Scale, at.SoftCap, nil)
						} else {
							err = AttendF16Window(want, q[tok*w:(tok+1)*w], kv.K16[0], kv.V16[0], l, 0, l.Heads, pg.Table(tok), start, n, at.Scale, at.SoftCap, nil)
						}
						if err != nil {
							t.Fatal(err)
						}
						sameOpBits(t, fmt.Sprintf("token %d", tok), out[tok*w:(tok+1)*w], want)
					}
				})
			}
		}
	}
}

// TestScaledOps: Scale, SoftCap and GeGLU are the package's kernels
// (Scale as float32 products, in place or not), and RoPE with frequency
// factors, a magnitude or YaRN is RoPEScaled at each row's position.
func TestScaledOps(t *testing.T) {
	t.Parallel()
	be := New(Options{Threads: 1})
	defer be.Close()
	r := newRand(t, 16)
	x := randFloats(r, 40, 3)

	got := make([]float32, len(x))
	be.Scale(got, x, 0.125)
	for i, v := range x {
		if got[i] != v*0.125 {
			t.Fatalf("Scale: [%d] = %g, want %g", i, got[i], v*0.125)
		}
	}
	inPlace := append([]float32(nil), x...)
	be.Scale(inPlace, inPlace, 0.125)
	sameOpBits(t, "Scale in place", inPlace, got)
	be.Scale(nil, nil, 2) // empty rows are nothing to do

	got = append([]float32(nil), x...)
	be.SoftCap(got, 2)
	want := append([]float32(nil), x...)
	SoftCap(want, 2)
	sameOpBits(t, "SoftCap", got, want)

	up := randFloats(r, len(x), 1)
	got = make([]float32, len(x))
	be.GeGLU(got, x, up)
	want = make([]float32, len(x))
	GeGLU(want, x, up)
	sameOpBits(t, "GeGLU", got, want)

	const heads, hd = 2, 16
	rope := tensor.RoPE{Dims: 16, Base: 10000, FreqScale: 0.5, Neox: true, Scaling: &tensor.RoPEScaling{FreqFactors: randFloats(r, 8, 1), AttnFactor: 1.1,
		YaRN: tensor.YaRN{ExtFactor: 1, OrigContext: 64, BetaFast: 32, BetaSlow: 1}}}
	pos := []int32{0, 9, 3}
	rows := randFloats(r, len(pos)*heads*hd, 1)
	got = append([]float32(nil), rows...)
	be.RoPE(got, pos, heads, hd, rope)
	for i, p := range pos {
		want := append([]float32(nil), rows[i*heads*hd:(i+1)*heads*hd]...)
		RoPEScaled(want, heads, hd, int(p), rope)
		sameOpBits(t, fmt.Sprintf("RoPEScaled row %d", i), got[i*heads*hd:(i+1)*heads*hd], want)
	}
}

// tiledOne is the tiled path's result for one token alone: its query heads
// (heads of hd values over the cache's KV heads) over positions
// start..n-1 of table, in float32 or on bf16 pairs.
func tiledOne(kv *tensor.HostKV, q []float32, heads int, table []int32, start, n int, at tensor.Attention, bf16 bool) []float32 {
	l := kv.Spec().Layout
	out := make([]float32, len(q))
	g := heads / l.Heads
	for kvh := range l.Heads {
		tq := tiledQueries{
			out: out[kvh*g*l.HeadDim:], q: q[kvh*g*l.HeadDim:], stride: len(q), gn: g, kvh: kvh, table: table,
			start: []int32{int32(start)}, n: []int32{int32(n)}, scale: at.Scale, softCap: at.SoftCap, assembler: true, bf16: bf16,
		}
		attendTiled(&tq, kv.K16[0], kv.V16[0], l)
	}
	return out
}

// TestAttentionPrompts: in one batch, the tokens of a long prompt (at
// least tiledMinPrompt) take the tiled arithmetic, in runs split over the
// threads, and get the bits of the tiled path for each token alone; a
// short prompt's tokens and a decode step beside them keep AttendF16's.
// So a prompt's results do not depend on how it is cut into chunks or
// what shares its batch. Both tiled arithmetics: float32, and bf16 where
// the machine has AVX512_BF16.
func TestAttentionPrompts(t *testing.T) {
	t.Parallel()
	if !useAVX512 {
		t.Skip("no AVX-512 here: every token takes the per-position arithmetic")
	}
	r := newRand(t, 17)
	for _, threads := range []int{1, 3} {
		for _, bf16 := range tiledArithmetics() {
			be := attnBackend(t, threads, bf16)
			for _, at := range []tensor.Attention{
				{Heads: 8, Scale: 0.25},
				{Heads: 8, Scale: 0.25, Window: 20},
				{Heads: 8, Scale: 0.5, SoftCap: 2},
			} {
				t.Run(fmt.Sprintf("threads=%d/bf16=%v/%+v", threads, bf16, at), func(t *testing.T) {
					l := tensor.KVLayout{Blocks: 16, BlockSize: 16, Heads: 2, HeadDim: 64}
					c, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: quant.F16, Layout: l})
					if err != nil {
						t.Fatal(err)
					}
					// Sequence 0: positions 25..89 of a 90-token prompt (its
					// first 25 cached); 1: a decode step at 85 after an
					// 80-token prompt; 2: a 10-token prompt.
					pg := tensor.Paging{Tables: [][]int32{{6, 1, 9, 12, 2, 14}, {0, 7, 3, 5, 8, 10}, {4}}, Prompt: []int32{90, 80, 10}}
					var hist tensor.Paging
					hist.Tables = pg.Tables
					for p := range 85 {
						hist.Pos, hist.Seq = append(hist.Pos, int32(p)), append(hist.Seq, 1)
					}
					for p := range 25 {
						hist.Pos, hist.Seq = append(hist.Pos, int32(p)), append(hist.Seq, 0)
					}
					for p := 25; p < 90; p++ {
						pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, 0)
						if p == 50 { // the decode step inside the run
							pg.Pos, pg.Seq = append(pg.Pos, 85), append(pg.Seq, 1)
						}
					}
					for p := range 10 {
						pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, 2)
					}
					T, w := len(pg.Pos), at.Heads*l.HeadDim
					q, out := attendRandom(t, r, be, c, at, hist, pg)
					kv := c.(*tensor.HostKV)
					var tiled int
					for tok := range T {
						n := int(pg.Pos[tok]) + 1
						start := 0
						if at.Window > 0 {
							start = max(0, n-at.Window)
						}
						var want []float32
						if pg.Seq[tok] == 0 {
							want = tiledOne(kv, q[tok*w:(tok+1)*w], at.Heads, pg.Table(tok), start, n, at, bf16)
							tiled++
						} else {
							want = make([]float32, w)
							if err := AttendF16Window(want, q[tok*w:(tok+1)*w], kv.K16[0], kv.V16[0], l, 0, l.Heads, pg.Table(tok), start, n, at.Scale, at.SoftCap, nil); err != nil {
								t.Fatal(err)
							}
						}
						sameOpBits(t, fmt.Sprintf("token %d (sequence %d)", tok, pg.Seq[tok]), out[tok*w:(tok+1)*w], want)
					}
					if tiled != 65 {
						t.Fatalf("%d tokens of the long prompt", tiled)
					}
					// The tiled and the per-position arithmetic differ: the
					// test would not see a path taken for the other.
					per := make([]float32, w)
					last := 65 // position 89 of sequence 0
					if err := AttendF16Window(per, q[last*w:(last+1)*w], kv.K16[0], kv.V16[0], l, 0, l.Heads, pg.Table(last), 0, 90, at.Scale, at.SoftCap, nil); err != nil {
						t.Fatal(err)
					}
					if at.Window == 0 && slices.Equal(per, out[last*w:(last+1)*w]) {
						t.Fatal("the long prompt's last token has the per-position bits")
					}
					// Nor do the two tiled arithmetics agree.
					if other := tiledOne(kv, q[last*w:(last+1)*w], at.Heads, pg.Table(last), 0, 90, at, !bf16); at.Window == 0 && slices.Equal(other, out[last*w:(last+1)*w]) {
						t.Fatalf("the long prompt's last token has the bits of bf16=%v", !bf16)
					}
				})
			}
		}
	}
}

// tiledArithmetics are the tiled arithmetics this machine runs: float32
// (bf16 false), and bf16 with AVX512_BF16.
func tiledArithmetics() []bool {
	if hasBF16Dot {
		return []bool{false, true}
	}
	return []bool{false}
}

// attnBackend is a Backend of threads workers whose long prompts' tiled
// attention is bf16 or float32, whatever RILL_CPU_NOBF16ATTN says.
func attnBackend(t testing.TB, threads int, bf16 bool) *Backend {
	be := New(Options{Threads: threads})
	t.Cleanup(be.Close)
	ks := *be.kern
	if bf16 {
		ks = *bf16Kernels()
	}
	ks.bf16Attn = bf16
	be.kern = &ks
	return be
}

// attendRandom stores random keys and values for the tokens of hist, then
// pg, in layer 0 of c, and returns random queries for pg's tokens and
// their attention.
func attendRandom(t *testing.T, r *rand.Rand, be *Backend, c tensor.KVCache, at tensor.Attention, hist, pg tensor.Paging) (q, out []float32) {
	t.Helper()
	l := c.Spec().Layout
	for _, p := range []tensor.Paging{hist, pg} {
		dim := len(p.Pos) * l.Heads * l.HeadDim
		if err := be.StoreKV(c, 0, randFloats(r, dim, 1), randFloats(r, dim, 1), p); err != nil {
			t.Fatal(err)
		}
	}
	q = randFloats(r, len(pg.Pos)*at.Heads*l.HeadDim, 2)
	out = make([]float32, len(q))
	if err := be.Attention(out, q, c, 0, at, pg); err != nil {
		t.Fatal(err)
	}
	return q, out
}
