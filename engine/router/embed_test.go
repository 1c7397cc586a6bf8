package router

import (
	"context"
	"errors"
	"testing"

	"rill/engine"
)

// embedding is a fake embedder whose one vector holds its model's number.
type embedding struct {
	*fake
	id float32
}

func (e embedding) Embed(_ context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	return &engine.EmbedResult{Vectors: [][]float32{{e.id}}, PromptTokens: 1}, nil
}

func TestEmbedder(t *testing.T) {
	t.Parallel()
	r, err := New(embedding{&fake{models: models("a")}, 1}, &fake{models: models("b")}, embedding{&fake{models: models("c")}, 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		model string
		want  float32
		err   error
	}{
		{"a", 1, nil}, {"c", 3, nil}, {"b", 0, engine.ErrUnsupported}, {"z", 0, engine.ErrUnknownModel},
	} {
		res, err := r.Embed(ctx, &engine.EmbedRequest{Model: c.model})
		switch {
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("Embed(%s): %v, want %v", c.model, err, c.err)
		case c.err == nil && (err != nil || res.Vectors[0][0] != c.want):
			t.Errorf("Embed(%s) = %v, %v; want the vector of engine %v", c.model, res, err, c.want)
		}
	}
}

// ranking is a fake reranker whose one score is its model's number.
type ranking struct {
	*fake
	id float32
}

func (e ranking) Rerank(_ context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	return &engine.RerankResult{Scores: []float32{e.id}, PromptTokens: 1}, nil
}

func TestReranker(t *testing.T) {
	t.Parallel()
	r, err := New(ranking{&fake{models: models("a")}, 1}, &fake{models: models("b")}, ranking{&fake{models: models("c")}, 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		model string
		want  float32
		err   error
	}{
		{"a", 1, nil}, {"c", 3, nil}, {"b", 0, engine.ErrUnsupported}, {"z", 0, engine.ErrUnknownModel},
	} {
		res, err := r.Rerank(ctx, &engine.RerankRequest{Model: c.model})
		switch {
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("Rerank(%s): %v, want %v", c.model, err, c.err)
		case c.err == nil && (err != nil || res.Scores[0] != c.want):
			t.Errorf("Rerank(%s) = %v, %v; want the score of engine %v", c.model, res, err, c.want)
		}
	}
}
