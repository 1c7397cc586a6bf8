package engine

import (
	"context"
	"errors"
)

// Tokenizer is implemented by engines that can show a model's tokens:
// POST /tokenize and /detokenize (vLLM's endpoints), which clients use to
// count a prompt before sending it or to find the ids a logit_bias names.
// It is optional; the service asks for it with a type assertion.
// Implementations are safe for concurrent use.
type Tokenizer interface {
	// Tokenize returns the token ids of req's prompt or, for messages,
	// of the prompt a chat completion of them would run. Errors are those
	// of Generate: a wrapped ErrUnknownModel, a *RequestError for bad
	// input (a template that rejects the messages, an unknown parameter),
	// ErrUpstream when an engine behind HTTP failed, or ErrUnsupported
	// (wrapped) when the model's engine cannot tokenize.
	Tokenize(ctx context.Context, req *TokenizeRequest) (*TokenizeResult, error)
	// Detokenize returns the text of req.Tokens, special tokens spelt out
	// ("<|im_start|>"), as vLLM and llama.cpp do. An id outside the
	// vocabulary is a *RequestError.
	Detokenize(ctx context.Context, req *DetokenizeRequest) (*DetokenizeResult, error)
}

// TokenizeRequest asks for the tokens of a text prompt (Prompt) or of a
// chat (Messages with Tools and ChatTemplateKwargs, rendered by the model's
// template with the cue for the assistant's reply, as Generate renders
// them).
type TokenizeRequest struct {
	Model string

	Prompt   string
	Messages []Message
	Tools    []Tool
	// ToolChoice is the request's tool_choice (the zero value: auto), which
	// decides whether a model without tool syntax of its own is shown
	// rill's instructions for calling the tools.
	ToolChoice         ToolChoice
	ChatTemplateKwargs map[string]any

	// AddSpecialTokens adds the tokens the vocabulary puts around a text
	// (BOS, and EOS where it asks for one). Nil means what Generate does:
	// added, for prompts and chats alike. With false a chat keeps only
	// the special tokens its template writes.
	AddSpecialTokens *bool
	// AddGenerationPrompt false renders a chat without the template's cue
	// for the assistant's reply; nil means with it, as Generate renders.
	AddGenerationPrompt *bool
}

// TokenizeResult is the answer to a TokenizeRequest.
type TokenizeResult struct {
	Tokens []int
	// MaxModelLen is the model's context length in tokens; 0 if unknown.
	MaxModelLen int
}

// DetokenizeRequest asks for the text of token ids.
type DetokenizeRequest struct {
	Model  string
	Tokens []int
}

// DetokenizeResult is the answer to a DetokenizeRequest.
type DetokenizeResult struct {
	Prompt string
}

// ErrUnsupported is returned (wrapped) by an optional capability, such as
// Tokenizer, that the engine of a model does not have. Transports answer it
// with a 400 naming what is missing.
var ErrUnsupported = errors.New("not supported")
