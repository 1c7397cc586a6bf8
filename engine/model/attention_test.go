package model_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"rill/engine/model"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/quant"
	"rill/engine/tensor"
	"rill/engine/testmodel"
)

// attnSpecs are small random models with the attention shapes that
// matter: head sizes 8 to 128 and groups of 1 to 8 query heads per model.KV head.
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
func seqRun(t *testing.T, r *model.Runner, kv *model.KV, table []int32, prompt []int32, steps int) [][]float32 {
	t.Helper()
	var out [][]float32
	b := &model.Batch{Tables: [][]int32{table}}
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
func scramble(t *testing.T, kv *model.KV, r *rand.Rand) {
	host, ok := kv.Memory().(*tensor.HostKV)
	if !ok {
		t.Fatalf("NewKV made a %T, want host memory", kv.Memory())
	}
	for l := range host.K16 {
		for i := range host.K16[l] {
			host.K16[l][i] = quant.F32ToF16(float32(r.NormFloat64()))
			host.V16[l][i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
	}
	for l := range host.K32 {
		for i := range host.K32[l] {
			host.K32[l][i] = float32(r.NormFloat64())
			host.V32[l][i] = float32(r.NormFloat64())
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
		for _, typ := range []model.KVType{model.KVF16, model.KVF32} {
			t.Run(spec.Name+"/"+typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(si), uint64(typ)))
				prompt := make([]int32, promptLen)
				for i := range prompt {
					prompt[i] = int32(r.IntN(m.Config.VocabSize))
				}
				nb := (promptLen + steps + bs) / bs
				run := model.NewRunner(m, be, 2*promptLen)

				kv, err := model.NewKV(&m.Config, typ, nb, bs)
				if err != nil {
					t.Fatal(err)
				}
				want := seqRun(t, run, kv, contiguousTable(promptLen+steps+1, bs), prompt, steps)

				big, err := model.NewKV(&m.Config, typ, 5*nb, bs)
				if err != nil {
					t.Fatal(err)
				}
				scramble(t, big, r)
				table := make([]int32, nb)
				for i, b := range r.Perm(big.NumBlocks)[:nb] {
					table[i] = int32(b)
				}
				sameLogits(t, "scattered blocks", seqRun(t, run, big, table, prompt, steps), want)

				// Batched with another sequence, whose prompt comes first.
				scramble(t, big, r)
				other := r.Perm(big.NumBlocks)
				tables := [][]int32{make([]int32, nb), make([]int32, nb)}
				for i := range nb {
					tables[0][i], tables[1][i] = int32(other[i]), int32(other[nb+i])
				}
				b := &model.Batch{Tables: tables}
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

// TestKVSize: a block's memory counts keys and values of every layer, rows
// padded to a multiple of 8; the backend refuses a cache its kernels cannot
// read, and nobody accepts an empty one.
func TestKVSize(t *testing.T) {
	t.Parallel()
	c := &model.Config{Layers: 2, HeadsKV: 3, HeadDim: 4}
	for _, tc := range []struct {
		typ  model.KVType
		want int64
	}{{model.KVF16, 2 * 2 * 16 * 3 * 8 * 2}, {model.KVF32, 2 * 2 * 16 * 3 * 8 * 4}} {
		if got := model.KVBytesPerBlock(c, tc.typ, 16); got != tc.want {
			t.Errorf("KVBytesPerBlock(%v) = %d, want %d", tc.typ, got, tc.want)
		}
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	if _, err := model.NewKVOn(be, &model.Config{Layers: 1, HeadsKV: 1, HeadDim: cpu.MaxAttnHeadDim + 1}, model.KVF16, 1, 16); err == nil {
		t.Error("NewKVOn accepted a head size the kernels do not take")
	}
	for _, n := range [][2]int{{0, 16}, {4, 0}, {-1, 16}} {
		if _, err := model.NewKV(c, model.KVF16, n[0], n[1]); err == nil {
			t.Errorf("NewKV accepted %d blocks of %d", n[0], n[1])
		}
	}
	kv, err := model.NewKVOn(be, c, model.KVF32, 4, 16)
	if err != nil {
		t.Fatal(err)
	}
	if s := kv.Memory().Spec(); s.Layers != 2 || s.Type != quant.F32 || s.Layout != (tensor.KVLayout{Blocks: 4, BlockSize: 16, Heads: 3, HeadDim: 4}) {
		t.Errorf("NewKVOn made a cache for %+v", s)
	}
}
