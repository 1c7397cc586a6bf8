package engine

import "context"

// Embedder is implemented by engines that can turn texts into vectors:
// POST /v1/embeddings. It is optional; the service asks for it with a type
// assertion, and an engine whose model does not pool (a generator) answers
// with a wrapped ErrUnsupported. Implementations are safe for concurrent
// use.
type Embedder interface {
	// Embed returns one vector per input, in order. Errors are those of
	// Generate: a wrapped ErrUnknownModel, a *RequestError for bad input
	// (an input longer than the context without Truncate, dimensions the
	// model cannot give), ErrUpstream, or a wrapped ErrUnsupported.
	Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error)
}

// EmbedInput is one input of an EmbedRequest: a text, or (when Tokens is
// not nil) token ids taken as they are.
type EmbedInput struct {
	Text   string
	Tokens []int
}

// EmbedRequest asks for the embeddings of Inputs.
type EmbedRequest struct {
	Model  string
	Inputs []EmbedInput
	// Dimensions, when positive, keeps the first Dimensions values of each
	// vector and renormalises them (Matryoshka truncation); a model not
	// trained for it refuses any size but its own.
	Dimensions int
	// Truncate, when positive, keeps only the last Truncate tokens of each
	// input (vLLM's truncate_prompt_tokens); -1 keeps the last tokens that
	// fit the context. 0 refuses an input longer than the context.
	Truncate int
	// Raw returns the pooled vectors without the L2 normalisation the
	// zero value applies (llama.cpp's embd_normalize 2).
	Raw bool
}

// EmbedResult is the answer to an EmbedRequest.
type EmbedResult struct {
	Vectors [][]float32
	// PromptTokens is the number of tokens run, all inputs together.
	PromptTokens int
}
