package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// attnSpecs are small random models with the attention shapes that
// matter: head sizes 8 to 128 and groups of 1 to 8 query heads per KV head.
func attnSpecs() []testmodel.Spec {
	base := testmodel.Target(quant.F32)
	var out []testmodel.Spec
	for _, s := range []struct{ embd, heads, kv int }{
		{64, 8, 1},   // head size 8, group 8
		{64, 4, 2},   // 16, 2
		{128, 4, 1},  // 32, 4
		{128, 2, 2},  // 64, 1
		{256, 2, 1},  // 128, 2
		{96, 12, 12}, // 8, 1
	} {
		sp := base
		sp.Name = fmt.Sprintf("attn-hd%d-g%d", s.embd/s.heads, s.heads/s.kv)
		sp.Embd, sp.Heads, sp.KV, sp.Layers, sp.FF = s.embd, s.heads, s.kv, 2, 2*s.embd
		out = append(out, sp)
	}
	return out
}

// seqRun feeds a prompt in one batch, then decodes a few tokens, and
// returns the logits of every step.
func seqRun(t *testing.T, r *Runner, kv *KV, table []int32, prompt []int32, steps int) [][]float32 {
	t.Helper()
	var out [][]float32
	b := &Batch{Tables: [][]int32{table}}
	for i, tok := range prompt {
		b.Tokens = append(b.Tokens, tok)
		b.Pos = append(b.Pos, int32(i))
		b.Seq = append(b.Seq, 0)
	}
	b.Logits = []int32{int32(len(prompt) - 1)}
	pos := len(prompt)
	for step := range steps + 1 {
		logits, err := r.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), logits...))
		b.Reset()
		b.Tables = append(b.Tables, table)
		b.Tokens = append(b.Tokens, int32(1+(7*step)%50))
		b.Pos = append(b.Pos, int32(pos))
		b.Seq = append(b.Seq, 0)
		b.Logits = append(b.Logits, 0)
		pos++
	}
	return out
}

func sameLogits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for s := range want {
		for i := range want[s] {
			if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
				t.Fatalf("%s: step %d logit %d = %g, want %g", what, s, i, got[s][i], want[s][i])
			}
		}
	}
}

// scramble fills every cache slot with random values, so that reading a
// block the table does not name changes the result.
func scramble(kv *KV, r *rand.Rand) {
	for l := range kv.k16 {
		for i := range kv.k16[l] {
			kv.k16[l][i] = quant.F32ToF16(float32(r.NormFloat64()))
			kv.v16[l][i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
	}
	for l := range kv.k32 {
		for i := range kv.k32[l] {
			kv.k32[l][i] = float32(r.NormFloat64())
			kv.v32[l][i] = float32(r.NormFloat64())
		}
	}
}

// TestPagedAttention: a sequence whose blocks are scattered over a large
// cache, among blocks holding other data, gives bit-identical logits to
// the same sequence in a contiguous cache (same arithmetic, other
// addresses); and a sequence batched with another gives the logits it
// gives alone. Over both cache types and every attention shape.
func TestPagedAttention(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{})
	defer be.Close()
	const bs, promptLen, steps = 16, 37, 6
	for si, spec := range attnSpecs() {
		m := fromSpec(t, spec)
		for _, typ := range []KVType{KVF16, KVF32} {
			t.Run(spec.Name+"/"+typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(si), uint64(typ)))
				prompt := make([]int32, promptLen)
				for i := range prompt {
					prompt[i] = int32(r.IntN(m.Config.VocabSize))
				}
				nb := (promptLen + steps + bs) / bs
				run := NewRunner(m, be, 2*promptLen)

				kv, err := NewKV(&m.Config, typ, nb, bs)
				if err != nil {
					t.Fatal(err)
				}
				want := seqRun(t, run, kv, contiguousTable(promptLen+steps+1, bs), prompt, steps)

				big, err := NewKV(&m.Config, typ, 5*nb, bs)
				if err != nil {
					t.Fatal(err)
				}
				scramble(big, r)
				table := make([]int32, nb)
				for i, b := range r.Perm(big.NumBlocks)[:nb] {
					table[i] = int32(b)
				}
				sameLogits(t, "scattered blocks", seqRun(t, run, big, table, prompt, steps), want)

				// Batched with another sequence, whose prompt comes first.
				scramble(big, r)
				other := r.Perm(big.NumBlocks)
				tables := [][]int32{make([]int32, nb), make([]int32, nb)}
				for i := range nb {
					tables[0][i], tables[1][i] = int32(other[i]), int32(other[nb+i])
				}
				b := &Batch{Tables: tables}
				for s, p := range [][]int32{prompt[:20], prompt} {
					for i, tok := range p {
						b.Tokens = append(b.Tokens, tok)
						b.Pos = append(b.Pos, int32(i))
						b.Seq = append(b.Seq, int32(1-s))
					}
				}
				b.Logits = []int32{int32(len(b.Tokens) - 1)}
				logits, err := run.Forward(b, big)
				if err != nil {
					t.Fatal(err)
				}
				sameLogits(t, "batched", [][]float32{logits}, want[:1])
			})
		}
	}
}

// TestKVLayout: rows of one KV head of one block are contiguous, padding
// rows to a multiple of 8, and CopyBlock copies the first n slots of every
// head and layer.
func TestKVLayout(t *testing.T) {
	t.Parallel()
	c := &Config{Layers: 2, HeadsKV: 3, HeadDim: 4}
	if got, want := KVBytesPerBlock(c, KVF16, 16), int64(2*2*16*3*8*2); got != want {
		t.Errorf("KVBytesPerBlock = %d, want %d", got, want)
	}
	for _, typ := range []KVType{KVF16, KVF32} {
		kv, err := NewKV(c, typ, 4, 16)
		if err != nil {
			t.Fatal(err)
		}
		table := []int32{2, 0}
		k := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		for pos := range 20 {
			kv.store(1, table, pos, k, k)
		}
		kv.CopyBlock(3, 2, 5)
		for h := range 3 {
			for slot := range 16 {
				for blk, n := range map[int]int{2: 16, 3: 5} {
					row := kv.layout.Row(blk, h, slot)
					for d := range 8 {
						want := float32(0)
						if d < 4 && slot < n {
							want = k[h*4+d]
						}
						var got float32
						if typ == KVF32 {
							got = kv.k32[1][row+d]
						} else {
							got = quant.F16ToF32(kv.v16[1][row+d])
						}
						if got != want {
							t.Fatalf("%v: block %d head %d slot %d [%d] = %g, want %g", typ, blk, h, slot, d, got, want)
						}
					}
				}
			}
		}
	}
	if _, err := NewKV(&Config{Layers: 1, HeadsKV: 1, HeadDim: cpu.MaxAttnHeadDim + 1}, KVF16, 1, 16); err == nil {
		t.Error("NewKV accepted a head size the kernels do not take")
	}
}

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
