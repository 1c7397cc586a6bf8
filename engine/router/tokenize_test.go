package router

import (
	"context"
	"errors"
	"slices"
	"testing"

	"rill/engine"
)

// tokenizing is a fake with a tokenizer that answers with its model's
// number.
type tokenizing struct {
	*fake
	id int
}

func (t tokenizing) Tokenize(_ context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	return &engine.TokenizeResult{Tokens: []int{t.id}}, nil
}

func (t tokenizing) Detokenize(_ context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	return &engine.DetokenizeResult{Prompt: req.Model}, nil
}

func TestTokenizer(t *testing.T) {
	t.Parallel()
	r, err := New(tokenizing{&fake{models: models("a")}, 1}, &fake{models: models("b")}, tokenizing{&fake{models: models("c")}, 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for model, want := range map[string][]int{"a": {1}, "c": {3}} {
		res, err := r.Tokenize(ctx, &engine.TokenizeRequest{Model: model, Prompt: "x"})
		if err != nil || !slices.Equal(res.Tokens, want) {
			t.Errorf("Tokenize(%s) = %v, %v; want %v", model, res, err, want)
		}
		d, err := r.Detokenize(ctx, &engine.DetokenizeRequest{Model: model})
		if err != nil || d.Prompt != model {
			t.Errorf("Detokenize(%s) = %v, %v", model, d, err)
		}
	}
	if _, err := r.Tokenize(ctx, &engine.TokenizeRequest{Model: "b"}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("model without a tokenizer: %v, want ErrUnsupported", err)
	}
	if _, err := r.Detokenize(ctx, &engine.DetokenizeRequest{Model: "z"}); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("unknown model: %v, want ErrUnknownModel", err)
	}
}
