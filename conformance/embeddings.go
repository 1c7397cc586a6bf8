package conformance

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
)

// EmbeddingsPath is OpenAI's embeddings endpoint.
const EmbeddingsPath = "/v1/embeddings"

// EnvEmbeddingModel names a model of the target that embeds; empty: the
// main model if POST /v1/embeddings answers for it.
const EnvEmbeddingModel = "RILL_CONFORMANCE_EMBEDDING_MODEL"

// Embeddings is a decoded answer of POST /v1/embeddings.
type Embeddings struct {
	Model        string
	Vectors      [][]float32
	PromptTokens int
	TotalTokens  int
}

// ParseEmbeddings decodes an embeddings answer for n inputs and checks its
// shape: object "list", n data items each of object "embedding" with
// index i at position i, a non-empty model, vectors of one non-zero length
// (float arrays, or with base64 the little-endian bytes of float32s), and
// usage with prompt_tokens > 0 and total_tokens equal to it. It returns
// what it could decode and the problems it found.
func ParseEmbeddings(body []byte, n int) (*Embeddings, []string) {
	var doc struct {
		Object *string `json:"object"`
		Model  *string `json:"model"`
		Data   []struct {
			Object    *string         `json:"object"`
			Index     *int            `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage *struct {
			PromptTokens *int `json:"prompt_tokens"`
			TotalTokens  *int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, []string{fmt.Sprintf("the body is not an embeddings object: %v (%s)", err, clip(body))}
	}
	var p []string
	e := &Embeddings{}
	if doc.Object == nil || *doc.Object != "list" {
		p = append(p, fmt.Sprintf("object is %s, want \"list\"", show(doc.Object)))
	}
	if doc.Model == nil || *doc.Model == "" {
		p = append(p, "model is missing or empty")
	} else {
		e.Model = *doc.Model
	}
	if len(doc.Data) != n {
		p = append(p, fmt.Sprintf("data has %d items for %d inputs", len(doc.Data), n))
	}
	for i, d := range doc.Data {
		if d.Object == nil || *d.Object != "embedding" {
			p = append(p, fmt.Sprintf("data[%d].object is %s, want \"embedding\"", i, show(d.Object)))
		}
		if d.Index == nil || *d.Index != i {
			p = append(p, fmt.Sprintf("data[%d].index is %s, want %d (items in input order)", i, show(d.Index), i))
		}
		v, err := DecodeEmbedding(d.Embedding)
		if err != nil {
			p = append(p, fmt.Sprintf("data[%d].embedding: %v", i, err))
		}
		if len(v) == 0 && err == nil {
			p = append(p, fmt.Sprintf("data[%d].embedding is empty", i))
		}
		if i > 0 && len(v) != len(e.Vectors[0]) {
			p = append(p, fmt.Sprintf("data[%d].embedding has %d values, data[0]'s %d", i, len(v), len(e.Vectors[0])))
		}
		e.Vectors = append(e.Vectors, v)
	}
	switch u := doc.Usage; {
	case u == nil:
		p = append(p, "usage is missing")
	case u.PromptTokens == nil || *u.PromptTokens <= 0:
		p = append(p, fmt.Sprintf("usage.prompt_tokens is %s, want a count > 0", show(u.PromptTokens)))
	case u.TotalTokens == nil || *u.TotalTokens != *u.PromptTokens:
		p = append(p, fmt.Sprintf("usage.total_tokens is %s, want prompt_tokens (%d): embeddings generate nothing", show(u.TotalTokens), *u.PromptTokens))
	default:
		e.PromptTokens, e.TotalTokens = *u.PromptTokens, *u.TotalTokens
	}
	return e, p
}

// DecodeEmbedding decodes one data[i].embedding: an array of numbers, or a
// base64 string of little-endian float32s (encoding_format base64).
func DecodeEmbedding(raw json.RawMessage) ([]float32, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("not standard base64: %w", err)
		}
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("base64 of %d bytes, not a whole number of float32s", len(b))
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("neither an array of numbers nor a base64 string: %s", clip(raw))
	}
	return v, nil
}

// Norm returns v's Euclidean length.
func Norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// CosineDistance returns 1 - cos(a, b); 2 when the lengths differ or a
// vector is zero, so that a mismatch never reads as close.
func CosineDistance(a, b []float32) float64 {
	if len(a) != len(b) {
		return 2
	}
	dot := 0.0
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	na, nb := Norm(a), Norm(b)
	if na == 0 || nb == 0 {
		return 2
	}
	return 1 - dot/(na*nb)
}

// ProbeEmbeddings asks t for the embedding of one short text with model
// and reports whether it answered one; the reason says why not.
func ProbeEmbeddings(ctx context.Context, t *Target, model string) (bool, string) {
	r, err := t.Post(ctx, EmbeddingsPath, map[string]any{"model": model, "input": "probe"})
	if err != nil {
		return false, err.Error()
	}
	if r.Status != http.StatusOK {
		return false, fmt.Sprintf("POST %s for model %q: status %d (%s); set %s to a model that embeds", EmbeddingsPath, model, r.Status, clip(r.Body), EnvEmbeddingModel)
	}
	// A malformed answer is for the specs to name: the target embeds.
	return true, ""
}

func show[T any](v *T) string {
	if v == nil {
		return "missing"
	}
	b, _ := json.Marshal(*v)
	return string(b)
}
