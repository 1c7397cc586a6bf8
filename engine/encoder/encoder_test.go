package encoder

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/testmodel"
	"rill/engine/tokenizer"
)

func open(t *testing.T, s testmodel.BertSpec, opts Options) *Engine {
	t.Helper()
	var buf bytes.Buffer
	if err := testmodel.WriteBert(&buf, s); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(f, cpu.New(cpu.Options{Threads: 1}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func tokens32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func unit(v []float32) []float32 {
	out := append([]float32(nil), v...)
	normalize(out)
	return out
}

func close32(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol {
			return false
		}
	}
	return true
}

// TestEmbed checks that each vector is the encoder's pooled vector of
// the text framed as the tokenizer frames it with special tokens, L2-
// normalised (or raw with Raw), whatever the packing of the passes.
func TestEmbed(t *testing.T) {
	t.Parallel()
	texts := []string{"hello world", "the quick brown fox jumps over the lazy dog", "a"}
	for _, tc := range []struct {
		name  string
		batch int
		raw   bool
	}{{"one pass", 0, false}, {"a pass per input", 4, false}, {"raw", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := open(t, testmodel.TinyBert(), Options{ID: "bert", MaxBatchTokens: tc.batch})
			req := &engine.EmbedRequest{Model: "bert", Raw: tc.raw}
			var seqs [][]int32
			want := 0
			for _, s := range texts {
				req.Inputs = append(req.Inputs, engine.EmbedInput{Text: s})
				ids := tokens32(e.tok.Encode(s, tokenizer.EncodeOptions{AddSpecial: true}))
				seqs, want = append(seqs, ids), want+len(ids)
			}
			res, err := e.Embed(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.PromptTokens != want {
				t.Errorf("PromptTokens = %d, want %d", res.PromptTokens, want)
			}
			for i, s := range seqs {
				ref, err := e.enc.Embed(context.Background(), [][]int32{s}, model.PoolMean)
				if err != nil {
					t.Fatal(err)
				}
				w := ref[0]
				if !tc.raw {
					w = unit(w)
				}
				if !close32(res.Vectors[i], w, 1e-5) {
					t.Errorf("vector %d = %v, want %v", i, res.Vectors[i], w)
				}
			}
		})
	}
}

// TestEmbedTruncate checks that truncation keeps the last tokens of a
// text inside its special tokens, and token ids as they are.
func TestEmbedTruncate(t *testing.T) {
	t.Parallel()
	e := open(t, testmodel.TinyBert(), Options{ID: "bert"})
	text := "the quick brown fox jumps over the lazy dog"
	full := tokens32(e.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true}))
	if len(full) < 8 || full[0] != int32(e.tok.BOS()) {
		t.Fatalf("framing %v: want BOS first and 8 tokens or more", full)
	}
	kept := append([]int32{full[0]}, full[len(full)-4:]...) // BOS + last 3 + EOS
	for _, tc := range []struct {
		name string
		in   engine.EmbedInput
		want []int32
	}{
		{"text", engine.EmbedInput{Text: text}, kept},
		{"tokens", engine.EmbedInput{Tokens: []int{5, 6, 7, 8, 9, 10, 11}}, []int32{7, 8, 9, 10, 11}},
	} {
		res, err := e.Embed(context.Background(), &engine.EmbedRequest{Model: "bert", Truncate: 5, Inputs: []engine.EmbedInput{tc.in}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ref, err := e.enc.Embed(context.Background(), [][]int32{tc.want}, model.PoolMean)
		if err != nil {
			t.Fatal(err)
		}
		if res.PromptTokens != 5 || !close32(res.Vectors[0], unit(ref[0]), 1e-5) {
			t.Errorf("%s: %d tokens, vector %v; want 5 tokens, the vector of %v", tc.name, res.PromptTokens, res.Vectors[0], tc.want)
		}
	}
}

// TestRerank checks each score against the classification head's first
// output for the pair as llama.cpp forms it: BOS, query, EOS, document,
// EOS for the test vocabulary (which adds BOS and EOS).
func TestRerank(t *testing.T) {
	t.Parallel()
	e := open(t, testmodel.TinyBertReranker(), Options{ID: "rr", MaxBatchTokens: 16})
	query := "what is a fox"
	docs := []string{"the quick brown fox", "a dog sleeps", "foxes are small wild canines", "x"}
	res, err := e.Rerank(context.Background(), &engine.RerankRequest{Model: "rr", Query: query, Documents: docs})
	if err != nil {
		t.Fatal(err)
	}
	plain := func(s string) []int32 { return tokens32(e.tok.Encode(s, tokenizer.EncodeOptions{})) }
	bos, eos := int32(e.tok.BOS()), int32(e.tok.EOS())
	total := 0
	distinct := map[float32]bool{}
	for i, d := range docs {
		pair := append(append(append(append([]int32{bos}, plain(query)...), eos), plain(d)...), eos)
		total += len(pair)
		ref, err := e.enc.Embed(context.Background(), [][]int32{pair}, model.PoolRank)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(res.Scores[i]-ref[0][0])) > 1e-5 {
			t.Errorf("score %d = %g, want %g", i, res.Scores[i], ref[0][0])
		}
		distinct[res.Scores[i]] = true
	}
	if len(distinct) != len(docs) {
		t.Errorf("scores %v are not distinct: the test cannot tell documents apart", res.Scores)
	}
	if res.PromptTokens != total {
		t.Errorf("PromptTokens = %d, want %d", res.PromptTokens, total)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	emb := open(t, testmodel.TinyBert(), Options{ID: "bert"})
	rr := open(t, testmodel.TinyBertReranker(), Options{ID: "rr"})
	long := strings.Repeat("fox ", 100)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
		want error  // errors.Is, or nil
		code string // RequestError code when want is nil
	}{
		{"generate", func() error { _, err := emb.Generate(ctx, &engine.Request{Model: "bert"}); return err }, nil, "unsupported_model"},
		{"generate unknown", func() error { _, err := emb.Generate(ctx, &engine.Request{Model: "x"}); return err }, engine.ErrUnknownModel, ""},
		{"embed unknown", func() error { _, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "x"}); return err }, engine.ErrUnknownModel, ""},
		{"embed none", func() error { _, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "bert"}); return err }, nil, "invalid_value"},
		{"embed dimensions", func() error {
			_, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "bert", Dimensions: 8, Inputs: []engine.EmbedInput{{Text: "a"}}})
			return err
		}, nil, "invalid_value"},
		{"embed too long", func() error {
			_, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "bert", Inputs: []engine.EmbedInput{{Text: long}}})
			return err
		}, nil, engine.CodeContextLengthExceeded},
		{"embed truncate past context", func() error {
			_, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "bert", Truncate: 65, Inputs: []engine.EmbedInput{{Text: "a"}}})
			return err
		}, nil, "invalid_value"},
		{"embed bad token", func() error {
			_, err := emb.Embed(ctx, &engine.EmbedRequest{Model: "bert", Inputs: []engine.EmbedInput{{Tokens: []int{1 << 20}}}})
			return err
		}, nil, "invalid_value"},
		{"embed on a reranker", func() error {
			_, err := rr.Embed(ctx, &engine.EmbedRequest{Model: "rr", Inputs: []engine.EmbedInput{{Text: "a"}}})
			return err
		}, engine.ErrUnsupported, ""},
		{"embed cancelled", func() error {
			_, err := emb.Embed(cancelled, &engine.EmbedRequest{Model: "bert", Inputs: []engine.EmbedInput{{Text: "a"}}})
			return err
		}, context.Canceled, ""},
		{"rerank on an embedder", func() error {
			_, err := emb.Rerank(ctx, &engine.RerankRequest{Model: "bert", Query: "q", Documents: []string{"d"}})
			return err
		}, engine.ErrUnsupported, ""},
		{"rerank unknown", func() error { _, err := rr.Rerank(ctx, &engine.RerankRequest{Model: "x"}); return err }, engine.ErrUnknownModel, ""},
		{"rerank no documents", func() error { _, err := rr.Rerank(ctx, &engine.RerankRequest{Model: "rr", Query: "q"}); return err }, nil, "invalid_value"},
		{"rerank too long", func() error {
			_, err := rr.Rerank(ctx, &engine.RerankRequest{Model: "rr", Query: "q", Documents: []string{"d", long}})
			return err
		}, nil, engine.CodeContextLengthExceeded},
		{"tokenize messages", func() error {
			_, err := emb.Tokenize(ctx, &engine.TokenizeRequest{Model: "bert", Messages: []engine.Message{{Role: "user"}}})
			return err
		}, nil, "invalid_value"},
	} {
		err := tc.call()
		var re *engine.RequestError
		switch {
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		case tc.want == nil && (!errors.As(err, &re) || re.Code != tc.code):
			t.Errorf("%s: %v, want a RequestError %q", tc.name, err, tc.code)
		}
	}
}

func TestTokenize(t *testing.T) {
	t.Parallel()
	e := open(t, testmodel.TinyBert(), Options{ID: "bert", ContextLength: 32})
	no := false
	for _, tc := range []struct {
		special *bool
		opts    tokenizer.EncodeOptions
	}{{nil, tokenizer.EncodeOptions{AddSpecial: true}}, {&no, tokenizer.EncodeOptions{}}} {
		res, err := e.Tokenize(context.Background(), &engine.TokenizeRequest{Model: "bert", Prompt: "hello world", AddSpecialTokens: tc.special})
		if err != nil {
			t.Fatal(err)
		}
		want := e.tok.Encode("hello world", tc.opts)
		if !slices.Equal(res.Tokens, want) || res.MaxModelLen != 32 {
			t.Errorf("Tokenize(special %v) = %v (max %d), want %v (max 32)", tc.special, res.Tokens, res.MaxModelLen, want)
		}
	}
	if got := e.Models()[0]; got.ID != "bert" || got.ContextLength != 32 || !strings.Contains(got.Description, "embedding model") {
		t.Errorf("card %+v", got)
	}
}
