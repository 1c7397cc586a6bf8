package service

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"rill/engine"
)

// POST /v1/rerank (and /rerank, llama.cpp's alias, and /v2/rerank, Cohere's v2 path), in the shape Jina,
// Cohere, llama.cpp and vLLM share:
//
//	{"model", "query", "documents": [string | {"text"}], "top_n", "return_documents"}
//	  -> {"id", "model", "results": [{"index", "relevance_score", "document": {"text"}}], "usage"}
//
// Results are sorted by relevance_score, highest first, and cut to top_n
// (0 or absent: all). The score is the model's raw output, as llama.cpp
// returns it. The engine of the model must implement engine.Reranker.

const (
	pathRerank      = "/v1/rerank"
	pathRerankAlias = "/rerank"
	// pathRerankV2 is Cohere's v2 path (CohereClientV2.rerank posts
	// there; vLLM serves it too): the same request, whose documents are
	// strings.
	pathRerankV2 = "/v2/rerank"
)

var routeRerank = route{methods: "POST", post: (*Server).handleRerank}

// rerankRequest is the body of POST /v1/rerank.
type rerankRequest struct {
	Model     string            `json:"model"`
	Query     string            `json:"query"`
	Documents []json.RawMessage `json:"documents"`
	TopN      int               `json:"top_n"`
	// ReturnDocuments puts each document's text in its result; absent
	// means true, as in vLLM and Jina.
	ReturnDocuments *bool `json:"return_documents"`
}

// rerankDocument is a document given as an object (Jina's and Cohere's
// {"text": ...}).
type rerankDocument struct {
	Text string `json:"text"`
}

// rerankConvert converts a /v1/rerank body into the engine's request.
// The schema has already held each document to a string or an object
// with a text.
func rerankConvert(r *rerankRequest) (*engine.RerankRequest, *apiError) {
	req := &engine.RerankRequest{Model: r.Model, Query: r.Query, Documents: make([]string, len(r.Documents))}
	if r.Query == "" {
		return nil, invalid("query", "invalid_value", "'query' must not be empty.")
	}
	for i, raw := range r.Documents {
		var text string
		if json.Unmarshal(raw, &text) != nil {
			var d rerankDocument
			if err := json.Unmarshal(raw, &d); err != nil {
				return nil, invalid("documents", "invalid_type", "'documents[%d]' must be a string or an object with a 'text' string.", i)
			}
			text = d.Text
		}
		if text == "" {
			return nil, invalid("documents", "invalid_value", "'documents[%d]' is empty; each document must have some text.", i)
		}
		req.Documents[i] = text
	}
	return req, nil
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Results []rerankResult `json:"results"`
	Usage   embeddingUsage `json:"usage"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *rerankDocument `json:"document,omitempty"`
}

// rerankResults orders scores, one per document of req, by score
// (highest first; equal scores in the documents' order), keeps the first
// topN (0: all), and attaches the documents' texts when withDocs.
func rerankResults(req *engine.RerankRequest, scores []float32, topN int, withDocs bool) []rerankResult {
	out := make([]rerankResult, len(scores))
	for i, s := range scores {
		out[i] = rerankResult{Index: i, RelevanceScore: float64(s)}
		if withDocs {
			out[i].Document = &rerankDocument{Text: req.Documents[i]}
		}
	}
	slices.SortStableFunc(out, func(a, b rerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	if topN > 0 && topN < len(out) {
		out = out[:topN]
	}
	return out
}

// rerankError maps an error of engine.Reranker to the wire: a model that
// does not rerank is the request's fault.
func rerankError(err error, model string) *apiError {
	if errors.Is(err, engine.ErrUnsupported) {
		return invalid("model", "unsupported_model",
			"The model '%s' does not support reranking: %s", clip(model, maxEchoBytes), clip(err.Error(), maxMessageBytes))
	}
	return fromEngine(err, model)
}

func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	var body rerankRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	req, e := rerankConvert(&body)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	rr, ok := s.engine.(engine.Reranker)
	if !ok {
		s.fail(w, r, info, rerankError(fmt.Errorf("%w: the engine does no reranking", engine.ErrUnsupported), body.Model))
		return
	}
	res, err := rr.Rerank(r.Context(), req)
	if err == nil && len(res.Scores) != len(req.Documents) {
		err = fmt.Errorf("the engine gave %d scores for %d documents", len(res.Scores), len(req.Documents))
	}
	if err != nil {
		s.fail(w, r, info, rerankError(err, body.Model))
		return
	}
	info.usage = &Usage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}
	out := rerankResponse{ID: "rerank-" + info.id, Model: body.Model,
		Results: rerankResults(req, res.Scores, body.TopN, body.ReturnDocuments == nil || *body.ReturnDocuments),
		Usage:   embeddingUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	b, err := json.Marshal(out)
	if err != nil {
		s.fail(w, r, info, fromEngine(err, body.Model))
		return
	}
	writeJSON(w, r, append(b, '\n'))
}
