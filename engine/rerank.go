package engine

import "context"

// Reranker is implemented by engines that can score documents against a
// query: POST /v1/rerank (Jina's and Cohere's shape, llama.cpp's and
// vLLM's endpoint). It is optional; the service asks for it with a type
// assertion, and an engine whose model is not a reranker (no rank
// pooling) answers with a wrapped ErrUnsupported. Implementations are
// safe for concurrent use.
type Reranker interface {
	// Rerank returns one score per document, in the documents' order;
	// ordering and top_n are the caller's. Errors are those of Embedder.
	Rerank(ctx context.Context, req *RerankRequest) (*RerankResult, error)
}

// RerankRequest asks how relevant each of Documents is to Query.
type RerankRequest struct {
	Model     string
	Query     string
	Documents []string
}

// RerankResult is the answer to a RerankRequest.
type RerankResult struct {
	// Scores holds one relevance score per document, in order, as the
	// model's head gives it (a logit, not a probability, as llama.cpp
	// returns it): higher is more relevant.
	Scores []float32
	// PromptTokens is the number of tokens run, all pairs together.
	PromptTokens int
}
