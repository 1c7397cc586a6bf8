package e2e

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/service"
)

// TestServeDecoderReranker serves a tiny qwen3 reranker (rank pooling,
// shaped as llama.cpp converts Qwen3-Reranker) as `rill serve --model
// FILE` does: /v1/rerank answers with every document asked for, most
// relevant first, each score a probability of "yes".
func TestServeDecoderReranker(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	path := filepath.Join(dir, "tiny-qwen3-rr.gguf")
	if err := testmodel.WriteFile(path, testmodel.Qwen3Reranker(quant.F32)); err != nil {
		t.Fatal(err)
	}
	es := startFlags(t, log, "--model", path, "--threads", "1")
	ts := httptest.NewServer(service.New(service.Options{Engine: es, Logger: log}))
	t.Cleanup(ts.Close)
	docs := []string{"paris is the capital of france", "the quick brown fox", "a b c d e f g", "x"}
	body, _ := json.Marshal(map[string]any{"model": "tiny-qwen3-rr", "query": "what is the capital of france", "documents": docs, "top_n": 3})
	resp, err := http.Post(ts.URL+"/v1/rerank", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var got struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	// Every prompt holds the template's tens of tokens.
	if len(got.Results) != 3 || got.Usage.PromptTokens <= len(docs)*30 {
		t.Fatalf("answer %s", raw)
	}
	seen := map[int]bool{}
	for i, r := range got.Results {
		if seen[r.Index] || r.Index < 0 || r.Index >= len(docs) || r.RelevanceScore <= 0 || r.RelevanceScore >= 1 ||
			i > 0 && r.RelevanceScore > got.Results[i-1].RelevanceScore {
			t.Errorf("results %s: want distinct documents, scores in (0, 1), highest first", raw)
		}
		seen[r.Index] = true
	}
}
