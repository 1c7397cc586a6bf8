package native

import (
	"context"
	"fmt"
	"strings"

	"rill/engine"
	"rill/engine/tokenizer"
)

var _ engine.Tokenizer = (*Engine)(nil)

// Tokenize implements engine.Tokenizer: a text prompt is tokenised as a
// completion's (special-token text parsed), messages as a chat
// completion's prompt exactly, so that the count is the prompt_tokens that
// request reports. It runs on the caller's goroutine, not the engine loop.
func (e *Engine) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	var ids []int
	var err error
	if req.Messages != nil {
		// The messages as Generate renders them: with the generic format's
		// tool instructions where the template has no tool syntax.
		chatReq := &engine.Request{Messages: req.Messages, Tools: req.Tools, ToolChoice: req.ToolChoice}
		k, kerr := e.constraintFor(chatReq)
		if kerr != nil {
			return nil, kerr
		}
		msgs := promptRequest(chatReq, k).Messages
		var text string
		var opts tokenizer.EncodeOptions
		text, opts, err = e.renderChat(chatRender{msgs: msgs, tools: req.Tools, kwargs: req.ChatTemplateKwargs,
			noSpecial: !addSpecial, noGeneration: req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt})
		if err == nil {
			ids, err = e.tok.EncodeContext(ctx, text, opts)
		}
	} else {
		opts := encodeWithBOS
		opts.AddSpecial = addSpecial
		ids, err = e.tok.EncodeContext(ctx, req.Prompt, opts)
	}
	if err != nil {
		return nil, err
	}
	if ids == nil {
		ids = []int{}
	}
	return &engine.TokenizeResult{Tokens: ids, MaxModelLen: e.ctxLen}, nil
}

// Detokenize implements engine.Tokenizer: every token's output text, with
// control tokens spelt as their text ("<|im_end|>") where generated text
// leaves them out, so that a tokenised prompt reads back as it was written.
// Bytes that do not form UTF-8 become U+FFFD.
func (e *Engine) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	types := e.tok.Vocab().Types
	var b []byte
	for i, id := range req.Tokens {
		if !e.tok.Valid(id) {
			return nil, engine.Errorf("invalid_value", "tokens", "token %d at index %d is outside the vocabulary of %d tokens", id, i, e.tok.Size())
		}
		switch types[id] {
		case tokenizer.Control, tokenizer.Unknown:
			b = append(b, e.tok.Text(id)...)
		default:
			b = append(b, e.tok.Piece(id)...)
		}
		if i%4096 == 4095 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return &engine.DetokenizeResult{Prompt: strings.ToValidUTF8(string(b), "\uFFFD")}, nil
}
