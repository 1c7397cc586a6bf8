package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/engine/testmodel"
	"rill/service"
)

// TestServeEncoders serves tiny bert files as `rill serve --model FILE`
// does: the embedder answers the official openai-go client's
// Embeddings.New with unit vectors and refuses chat with a 400; the
// reranker answers /v1/rerank (plain HTTP: no Cohere or Jina client is
// available offline) with every document, most relevant first.
func TestServeEncoders(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	emb, rr := filepath.Join(dir, "tiny-bert.gguf"), filepath.Join(dir, "tiny-rr.gguf")
	if err := testmodel.WriteBertFile(emb, testmodel.TinyBert()); err != nil {
		t.Fatal(err)
	}
	if err := testmodel.WriteBertFile(rr, testmodel.TinyBertReranker()); err != nil {
		t.Fatal(err)
	}

	es := startFlags(t, log, "--model", emb, "--threads", "1")
	if n := len(es.Natives()); n != 0 {
		t.Errorf("%d native engines for an encoder file, want 0", n)
	}
	ts := httptest.NewServer(service.New(service.Options{Engine: es, Logger: log}))
	t.Cleanup(ts.Close)
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	texts := []string{"the quick brown fox", "jumps over the lazy dog", "the quick brown fox"}
	res := embedTexts(t, client, "tiny-bert", texts, 32)
	if res.Usage.PromptTokens <= int64(2*len(texts)) {
		t.Fatalf("usage %+v", res.Usage)
	}
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "tiny-bert",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "unsupported_model" {
		t.Errorf("chat with an embedder: %v, want a 400 unsupported_model", err)
	}

	es2 := startFlags(t, log, "--model", rr, "--threads", "1")
	ts2 := httptest.NewServer(service.New(service.Options{Engine: es2, Logger: log}))
	t.Cleanup(ts2.Close)
	docs := []string{"a fox is a small wild dog", "the weather is fine", "foxes jump", "x"}
	body, _ := json.Marshal(map[string]any{"model": "tiny-rr", "query": "what is a fox", "documents": docs, "top_n": 3})
	resp, err := http.Post(ts2.URL+"/v1/rerank", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var got struct {
		Model   string `json:"model"`
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "tiny-rr" || len(got.Results) != 3 || got.Usage.PromptTokens <= len(docs)*3 {
		t.Fatalf("answer %s", raw)
	}
	seen := map[int]bool{}
	for i, r := range got.Results {
		if r.Document.Text != docs[r.Index] || seen[r.Index] || i > 0 && r.RelevanceScore > got.Results[i-1].RelevanceScore {
			t.Errorf("results %s: want distinct documents with their texts, highest score first", raw)
		}
		seen[r.Index] = true
	}
	// The reranker embeds nothing and the embedder ranks nothing.
	resp, err = http.Post(ts.URL+"/v1/rerank", "application/json", strings.NewReader(`{"model":"tiny-bert","query":"q","documents":["d"]}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "unsupported_model") {
		t.Errorf("rerank with an embedder: %d %s", resp.StatusCode, raw)
	}
}
