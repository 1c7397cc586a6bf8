package service

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"rill/engine"
)

// POST /v1/embeddings, in OpenAI's shape:
//
//	{"model", "input", "encoding_format", "dimensions", "truncate_prompt_tokens"}
//	  -> {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}
//
// The engine of the model must implement engine.Embedder.

const pathEmbeddings = "/v1/embeddings"

var routeEmbeddings = route{methods: "POST", post: (*Server).handleEmbeddings}

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     int             `json:"dimensions"`
	// TruncatePromptTokens is vLLM's: keep each input's last N tokens
	// (-1: as many as the context holds).
	TruncatePromptTokens *int `json:"truncate_prompt_tokens"`
}

// embeddingConvert converts a /v1/embeddings body into the engine's
// request. The schema has already held input to one of its four shapes.
func embeddingConvert(r *embeddingRequest) (*engine.EmbedRequest, *apiError) {
	req := &engine.EmbedRequest{Model: r.Model, Dimensions: r.Dimensions}
	if r.TruncatePromptTokens != nil {
		req.Truncate = *r.TruncatePromptTokens
	}
	var text string
	var texts []string
	var ids []int
	var idss [][]int
	switch {
	case json.Unmarshal(r.Input, &text) == nil:
		req.Inputs = []engine.EmbedInput{{Text: text}}
	case json.Unmarshal(r.Input, &texts) == nil:
		for _, t := range texts {
			req.Inputs = append(req.Inputs, engine.EmbedInput{Text: t})
		}
	case json.Unmarshal(r.Input, &ids) == nil:
		req.Inputs = []engine.EmbedInput{{Tokens: ids}}
	case json.Unmarshal(r.Input, &idss) == nil:
		for _, t := range idss {
			req.Inputs = append(req.Inputs, engine.EmbedInput{Tokens: t})
		}
	default:
		return nil, invalid("input", "invalid_type", "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids.")
	}
	for i, in := range req.Inputs {
		if in.Tokens == nil && in.Text == "" {
			// OpenAI refuses empty strings: they have no tokens to pool.
			return nil, invalid("input", "invalid_value", "'input[%d]' is an empty string; each input must have at least one token.", i)
		}
	}
	return req, nil
}

// embeddingResponse is the answer's shape; Embedding is []float32 or,
// for encoding_format base64, a string.
type embeddingResponse struct {
	Object string          `json:"object"`
	Data   []embeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddingBase64 is v as OpenAI's base64 encoding_format has it: the
// little-endian bytes of its float32s.
func embeddingBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// embeddingError maps an error of engine.Embedder to the wire: a model
// that does not embed is the request's fault, as vLLM answers it.
func embeddingError(err error, model string) *apiError {
	if errors.Is(err, engine.ErrUnsupported) {
		return invalid("model", "unsupported_model",
			"The model '%s' does not support embeddings: %s", clip(model, maxEchoBytes), clip(err.Error(), maxMessageBytes))
	}
	return fromEngine(err, model)
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	var body embeddingRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	req, e := embeddingConvert(&body)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	em, ok := s.engine.(engine.Embedder)
	if !ok {
		s.fail(w, r, info, embeddingError(fmt.Errorf("%w: the engine serves no embeddings", engine.ErrUnsupported), body.Model))
		return
	}
	res, err := em.Embed(r.Context(), req)
	if err != nil {
		s.fail(w, r, info, embeddingError(err, body.Model))
		return
	}
	info.usage = &Usage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}
	out := embeddingResponse{Object: "list", Model: body.Model, Data: make([]embeddingData, len(res.Vectors)),
		Usage: embeddingUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	for i, v := range res.Vectors {
		d := embeddingData{Object: "embedding", Index: i, Embedding: v}
		if body.EncodingFormat == "base64" {
			d.Embedding = embeddingBase64(v)
		}
		out.Data[i] = d
	}
	b, err := json.Marshal(out)
	if err != nil {
		s.fail(w, r, info, fromEngine(err, body.Model))
		return
	}
	writeJSON(w, r, append(b, '\n'))
}
