package e2e

import (
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/config"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/app"
	"rill/service"
)

// TestEmbeddingsWithOpenAIClient serves a decoder embedder (the tiny
// qwen3 marked pooling_type last) and a text generator from a catalogue,
// and asks both for embeddings with the official client's Embeddings.New,
// unchanged: the embedder answers unit vectors in order with their usage,
// the generator a 400.
func TestEmbeddingsWithOpenAIClient(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.WriteFile(filepath.Join(dir, "embedder.gguf"), testmodel.Qwen3Embedding(quant.F32)); err != nil {
		t.Fatal(err)
	}
	if err := testmodel.WriteFile(filepath.Join(dir, "generator.gguf"), testmodel.Target(quant.F32)); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	e, err := app.OpenCatalog(t.Context(), &config.File{Catalog: config.Catalog{ModelsDir: dir}}, &config.Native{KVCacheMem: 4 << 20}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	t.Cleanup(ts.Close)
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))

	texts := []string{"The fox", "jumps over the lazy dog", "The fox"}
	res := embedTexts(t, client, "embedder", texts, 64)
	if res.Usage.PromptTokens <= int64(len(texts)) || res.Usage.TotalTokens != res.Usage.PromptTokens {
		t.Fatalf("usage %+v", res.Usage)
	}

	_, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "generator",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("The fox")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "unsupported_model" {
		t.Errorf("embeddings of a generator: %v, want a 400 unsupported_model", err)
	}
}

// embedTexts asks model for the embeddings of texts, whose first and last
// are equal and whose second differs, with the official client, and checks
// what any embedder must answer: one unit vector of dim values per text, in
// order, equal for equal texts and apart for different ones.
func embedTexts(t *testing.T, client openai.Client, model string, texts []string, dim int) *openai.CreateEmbeddingResponse {
	t.Helper()
	res, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
	})
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			t.Fatal(apiErr.RawJSON())
		}
		t.Fatal(err)
	}
	if len(res.Data) != len(texts) {
		t.Fatalf("%d vectors, usage %+v", len(res.Data), res.Usage)
	}
	for i, d := range res.Data {
		n := 0.0
		for _, x := range d.Embedding {
			n += x * x
		}
		if d.Index != int64(i) || len(d.Embedding) != dim || math.Abs(n-1) > 1e-5 {
			t.Errorf("vector %d: index %d, %d values, squared norm %g", i, d.Index, len(d.Embedding), n)
		}
	}
	same, differ := 0.0, 0.0
	for j := range res.Data[0].Embedding {
		same = max(same, math.Abs(res.Data[0].Embedding[j]-res.Data[2].Embedding[j]))
		differ = max(differ, math.Abs(res.Data[0].Embedding[j]-res.Data[1].Embedding[j]))
	}
	if same > 1e-6 || differ < 1e-3 {
		t.Errorf("equal texts %g apart, different texts %g apart", same, differ)
	}
	return res
}
