package encoder

import (
	"context"

	"rill/engine"
)

// Tokenize implements engine.Tokenizer for a text prompt: its tokens as
// Embed runs them, with the special tokens around it unless
// AddSpecialTokens is false. An encoder has no chat template, so messages
// are refused.
func (e *Engine) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	if err := e.checkModel(req.Model); err != nil {
		return nil, err
	}
	if len(req.Messages) > 0 {
		return nil, engine.Errorf("invalid_value", "messages", "model %q is an encoder and has no chat template: send a prompt", e.card.ID)
	}
	body, err := e.encode(ctx, req.Prompt)
	if err != nil {
		return nil, err
	}
	if req.AddSpecialTokens == nil || *req.AddSpecialTokens {
		body = e.frame(body)
	}
	ids := make([]int, len(body))
	for i, id := range body {
		ids[i] = int(id)
	}
	return &engine.TokenizeResult{Tokens: ids, MaxModelLen: e.ctxLen}, nil
}

// Detokenize implements engine.Tokenizer.
func (e *Engine) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	if err := e.checkModel(req.Model); err != nil {
		return nil, err
	}
	for _, id := range req.Tokens {
		if !e.tok.Valid(id) {
			return nil, engine.Errorf("invalid_value", "tokens", "token %d is outside the vocabulary of %d tokens", id, e.tok.Size())
		}
	}
	return &engine.DetokenizeResult{Prompt: e.tok.Decode(req.Tokens)}, nil
}
