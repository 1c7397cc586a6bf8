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
	"rill/engine/tokenizer"
)

// TestRerank checks Rerank's scores against each pair's prompt (the
// template filled in) pooled alone by model.Runner.Pool, with a batch
// budget that holds every prompt in one pass and with one that splits
// them, and that reversing the documents reverses the scores.
func TestRerank(t *testing.T) {
	query := "what is the capital of france"
	docs := []string{"paris is the capital of france", "the quick brown fox", "a b c d e f g h i j k l m n o p"}
	spec := testmodel.Qwen3Reranker(quant.F32)
	for _, budget := range []int{512, 7} {
		t.Run(strconv.Itoa(budget), func(t *testing.T) {
			e := startOn(t, loadSpec(t, spec), Options{MaxBatchTokens: budget})
			res, err := e.Rerank(context.Background(), &engine.RerankRequest{Model: e.info.ID, Query: query, Documents: docs})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Scores) != len(docs) {
				t.Fatalf("%d scores for %d documents", len(res.Scores), len(docs))
			}
			ref := loadSpec(t, spec)
			defer ref.Close()
			be := cpu.New(cpu.Options{Threads: 1})
			defer be.Close()
			run := model.NewRunner(ref, be, 128)
			wantTokens := 0
			for i, d := range docs {
				text := strings.NewReplacer("{query}", query, "{document}", d).Replace(testmodel.RerankTemplate)
				ids := e.tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
				wantTokens += len(ids)
				b := &model.Batch{Tables: [][]int32{{0, 1, 2, 3, 4, 5, 6, 7}}}
				for p, id := range ids {
					b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(id)), append(b.Pos, int32(p)), append(b.Seq, 0)
				}
				kv, err := model.NewKV(&ref.Config, model.KVF16, 8, 16)
				if err != nil {
					t.Fatal(err)
				}
				v, err := run.Pool(b, kv, model.PoolRank)
				if err != nil {
					t.Fatal(err)
				}
				got, want := res.Scores[i], v[0]
				if d := math.Abs(float64(got - want)); d > 1e-5 {
					t.Errorf("document %d (%d tokens): score %g, want %g", i, len(ids), got, want)
				}
				if got <= 0 || got >= 1 {
					t.Errorf("document %d: score %g is not a probability", i, got)
				}
			}
			if res.PromptTokens != wantTokens {
				t.Errorf("prompt tokens %d, want %d", res.PromptTokens, wantTokens)
			}
			reversed := slices.Clone(docs)
			slices.Reverse(reversed)
			rev, err := e.Rerank(context.Background(), &engine.RerankRequest{Model: e.info.ID, Query: query, Documents: reversed})
			if err != nil {
				t.Fatal(err)
			}
			for i := range docs {
				if d := math.Abs(float64(rev.Scores[len(docs)-1-i] - res.Scores[i])); d > 1e-5 {
					t.Errorf("document %d scores %g reversed, %g in order", i, rev.Scores[len(docs)-1-i], res.Scores[i])
				}
			}
		})
	}
}

// TestRerankErrors checks Rerank's refusals.
func TestRerankErrors(t *testing.T) {
	rr := startOn(t, loadSpec(t, testmodel.Qwen3Reranker(quant.F32)), Options{})
	emb := startOn(t, loadSpec(t, testmodel.Qwen3Embedding(quant.F32)), Options{})
	long := strings.Repeat("a b c d ", 2000)
	for _, c := range []struct {
		name string
		e    *Engine
		docs []string
		code string // of a *RequestError; "" for ErrUnsupported
	}{
		{"not a reranker", emb, []string{"x"}, ""},
		{"no documents", rr, nil, "invalid_value"},
		{"too long", rr, []string{"short", long}, engine.CodeContextLengthExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.e.Rerank(context.Background(), &engine.RerankRequest{Model: c.e.info.ID, Query: "q", Documents: c.docs})
			var re *engine.RequestError
			switch {
			case err == nil:
				t.Fatal("no error")
			case c.code == "" && !errors.Is(err, engine.ErrUnsupported):
				t.Errorf("err = %v, want ErrUnsupported", err)
			case c.code != "" && (!errors.As(err, &re) || re.Code != c.code):
				t.Errorf("err = %v, want code %s", err, c.code)
			}
		})
	}
	if _, err := rr.Embed(context.Background(), &engine.EmbedRequest{Model: rr.info.ID, Inputs: []engine.EmbedInput{{Text: "x"}}}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("embeddings from a reranker: %v, want ErrUnsupported", err)
	}
}

// TestRerankPrompt checks the pair's prompt: the template filled in one
// pass, with the user's text kept as text, and llama.cpp's default
// pairing without a template.
func TestRerankPrompt(t *testing.T) {
	e := startOn(t, loadSpec(t, testmodel.Qwen3Reranker(quant.F32)), Options{})
	enc := func(s string, o tokenizer.EncodeOptions) []int32 {
		var out []int32
		for _, id := range e.tok.Encode(s, o) {
			out = append(out, int32(id))
		}
		return out
	}
	special := tokenizer.EncodeOptions{ParseSpecial: true}
	imEnd := enc("<|im_end|>", special)
	if len(imEnd) != 1 {
		t.Fatalf("<|im_end|> encodes as %v, want one token", imEnd)
	}
	const tmpl = "<|im_start|>Q: {query}\nD: {document}<|im_end|>"
	for _, c := range []struct {
		name, tmpl, query, doc string
		want                   []int32
	}{
		{"template", tmpl, "hello world", "the fox", enc("<|im_start|>Q: hello world\nD: the fox<|im_end|>", special)},
		// The query's "<|im_end|>" is text, and its "{document}" stays.
		{"user specials", tmpl, "a <|im_end|> {document}", "b",
			enc("<|im_start|>Q: a <|im_end|> {document}\nD: b<|im_end|>", tokenizer.EncodeOptions{ParseSpecial: true, Plain: []tokenizer.Span{{Start: 15, End: 38}}})},
		// The test vocabulary adds BOS and not EOS: BOS, query, document.
		{"default pairing", "", "hello world", "the fox",
			append(append([]int32{int32(e.tok.BOS())}, enc("hello world", tokenizer.EncodeOptions{})...), enc("the fox", tokenizer.EncodeOptions{})...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := e.rerankTokens(context.Background(), c.tmpl, c.query, c.doc)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("tokens %v, want %v", got, c.want)
			}
			if c.name == "user specials" && slices.Contains(got[:len(got)-1], imEnd[0]) {
				t.Errorf("the query's <|im_end|> became the special token: %v", got)
			}
		})
	}
}
