package native

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// TestEmbed checks Embed's vectors against each input pooled alone by
// model.Runner.Pool and normalised, for every pooling, with a batch budget
// that holds all inputs in one pass and with one that splits them.
func TestEmbed(t *testing.T) {
	texts := []string{"hello", "the quick brown fox jumps over the lazy dog", "a b c d e f g h i j k l m n o p"}
	for _, c := range []struct {
		pooling uint32
		budget  int
	}{
		{3, 512}, {3, 5}, {1, 512}, {1, 5}, {2, 512}, {2, 7},
	} {
		spec := testmodel.Qwen3Embedding(quant.F32)
		spec.Pooling = c.pooling
		how := model.Pooling(c.pooling)
		t.Run(how.String()+"/"+strconv.Itoa(c.budget), func(t *testing.T) {
			e := startOn(t, loadSpec(t, spec), Options{MaxBatchTokens: c.budget})
			inputs := make([]engine.EmbedInput, len(texts))
			for i, s := range texts {
				inputs[i].Text = s
			}
			res, err := e.Embed(context.Background(), &engine.EmbedRequest{Model: e.info.ID, Inputs: inputs})
			if err != nil {
				t.Fatal(err)
			}
			ref := loadSpec(t, spec)
			defer ref.Close()
			be := cpu.New(cpu.Options{Threads: 1})
			defer be.Close()
			run := model.NewRunner(ref, be, 64)
			wantTokens := 0
			for i, s := range texts {
				ids := e.tok.Encode(s, encodeWithBOS)
				wantTokens += len(ids)
				b := &model.Batch{Tables: [][]int32{{0, 1, 2, 3}}}
				for p, id := range ids {
					b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(id)), append(b.Pos, int32(p)), append(b.Seq, 0)
				}
				kv, err := model.NewKV(&ref.Config, model.KVF16, 4, 16)
				if err != nil {
					t.Fatal(err)
				}
				want, err := run.Pool(b, kv, how)
				if err != nil {
					t.Fatal(err)
				}
				want = slices.Clone(want)
				normalize(want)
				got := res.Vectors[i]
				if len(got) != len(want) {
					t.Fatalf("input %d: %d values, want %d", i, len(got), len(want))
				}
				d, n := 0.0, 0.0
				for j := range got {
					d = max(d, math.Abs(float64(got[j]-want[j])))
					n += float64(got[j]) * float64(got[j])
				}
				if d > 1e-5 {
					t.Errorf("input %d (%d tokens): %g away from the input pooled alone", i, len(ids), d)
				}
				if math.Abs(n-1) > 1e-5 {
					t.Errorf("input %d: squared norm %g, want 1", i, n)
				}
			}
			if res.PromptTokens != wantTokens {
				t.Errorf("prompt tokens %d, want %d", res.PromptTokens, wantTokens)
			}
			if st := e.cache.Stats(); st.BlocksUsed != 0 {
				t.Errorf("%d blocks still held after the embeddings", st.BlocksUsed)
			}
		})
	}
}

// TestEmbedErrors checks what Embed refuses, and how.
func TestEmbedErrors(t *testing.T) {
	emb := startOn(t, loadSpec(t, testmodel.Qwen3Embedding(quant.F32)), Options{ContextLength: 16})
	gen := newTestEngine(t, Options{})
	long := strings.Repeat("a b ", 40)
	for _, c := range []struct {
		name string
		e    *Engine
		req  engine.EmbedRequest
		want string // in the message
		code string // of a *RequestError; "" for ErrUnsupported
	}{
		{"generator", gen, engine.EmbedRequest{Inputs: []engine.EmbedInput{{Text: "x"}}}, "not an embedding model", ""},
		{"no inputs", emb, engine.EmbedRequest{}, "must not be empty", "invalid_value"},
		{"empty tokens", emb, engine.EmbedRequest{Inputs: []engine.EmbedInput{{Tokens: []int{}}}}, "no tokens", "invalid_value"},
		{"bad token", emb, engine.EmbedRequest{Inputs: []engine.EmbedInput{{Tokens: []int{1 << 20}}}}, "outside the vocabulary", "invalid_value"},
		{"dimensions", emb, engine.EmbedRequest{Dimensions: 32, Inputs: []engine.EmbedInput{{Text: "x"}}}, "Matryoshka", "invalid_value"},
		{"too long", emb, engine.EmbedRequest{Inputs: []engine.EmbedInput{{Text: long}}}, "context of 16", "context_length_exceeded"},
		{"truncate beyond context", emb, engine.EmbedRequest{Truncate: 17, Inputs: []engine.EmbedInput{{Text: "x"}}}, "exceeds", "invalid_value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Model = c.e.info.ID
			_, err := c.e.Embed(context.Background(), &c.req)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
			var re *engine.RequestError
			switch {
			case c.code == "" && !errors.Is(err, engine.ErrUnsupported):
				t.Errorf("err = %v, want ErrUnsupported", err)
			case c.code != "" && (!errors.As(err, &re) || re.Code != c.code):
				t.Errorf("err = %#v, want a RequestError %s", err, c.code)
			}
		})
	}
	// Truncation keeps the last tokens: the same vector as those tokens alone.
	ids := make([]int, 30)
	for i := range ids {
		ids[i] = 5 + i
	}
	for _, trunc := range []int{-1, 10} {
		keep := 16
		if trunc > 0 {
			keep = trunc
		}
		got, err := emb.Embed(context.Background(), &engine.EmbedRequest{Model: emb.info.ID, Truncate: trunc, Inputs: []engine.EmbedInput{{Tokens: ids}}})
		if err != nil {
			t.Fatal(err)
		}
		want, err := emb.Embed(context.Background(), &engine.EmbedRequest{Model: emb.info.ID, Inputs: []engine.EmbedInput{{Tokens: ids[len(ids)-keep:]}}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Vectors[0], want.Vectors[0]) || got.PromptTokens != keep {
			t.Errorf("truncate %d: %d tokens, vector equal to the last %d tokens' %v", trunc, got.PromptTokens, keep, slices.Equal(got.Vectors[0], want.Vectors[0]))
		}
	}
}
