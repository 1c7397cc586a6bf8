package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"rill/engine"
)

// rerankEngine is the engine double with engine.Reranker: each
// document's score is its length in bytes; a model but "tiny" is unknown.
type rerankEngine struct {
	*fakeEngine
}

func (f *rerankEngine) Rerank(_ context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	if req.Model != "tiny" {
		return nil, engine.ErrUnknownModel
	}
	res := &engine.RerankResult{PromptTokens: len(req.Query) * len(req.Documents)}
	for _, d := range req.Documents {
		res.Scores = append(res.Scores, float32(len(d)))
		res.PromptTokens += len(d)
	}
	return res, nil
}

func TestRerankEndpoint(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(New(Options{Engine: &rerankEngine{&fakeEngine{models: testModels}}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(ts.Close)
	type result struct {
		Index          int                    `json:"index"`
		RelevanceScore float64                `json:"relevance_score"`
		Document       *struct{ Text string } `json:"document"`
	}
	type answer struct {
		ID      string   `json:"id"`
		Model   string   `json:"model"`
		Results []result `json:"results"`
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	// Lengths 2, 1, 4, 3, 1: sorted 2, 3, 0, then the ties 1 and 4 in order.
	const docs = `["bb","a",{"text":"dddd"},"ccc",{"text":"e"}]`
	for _, c := range []struct {
		name, path, extra string
		order             []int
		docs              bool
	}{
		{"all", "/v1/rerank", ``, []int{2, 3, 0, 1, 4}, true},
		{"alias", "/rerank", ``, []int{2, 3, 0, 1, 4}, true},
		{"cohere v2 path", "/v2/rerank", ``, []int{2, 3, 0, 1, 4}, true},
		{"top_n", "/v1/rerank", `,"top_n":2`, []int{2, 3}, true},
		{"top_n 0 is all", "/v1/rerank", `,"top_n":0`, []int{2, 3, 0, 1, 4}, true},
		{"top_n past the end", "/v1/rerank", `,"top_n":9`, []int{2, 3, 0, 1, 4}, true},
		{"without documents", "/v1/rerank", `,"return_documents":false`, []int{2, 3, 0, 1, 4}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := post(t, ts.Client(), ts.URL+c.path, `{"model":"tiny","query":"qq","documents":`+docs+c.extra+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			mustValidate(t, "RerankResponse", body)
			var a answer
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatal(err)
			}
			texts := []string{"bb", "a", "dddd", "ccc", "e"}
			if a.Model != "tiny" || !strings.HasPrefix(a.ID, "rerank-") || a.Usage.PromptTokens != 21 || a.Usage.TotalTokens != 21 {
				t.Errorf("answer %s", body)
			}
			var order []int
			for _, r := range a.Results {
				order = append(order, r.Index)
				if r.RelevanceScore != float64(len(texts[r.Index])) {
					t.Errorf("result %d: score %g, want %d", r.Index, r.RelevanceScore, len(texts[r.Index]))
				}
				switch {
				case c.docs && (r.Document == nil || r.Document.Text != texts[r.Index]):
					t.Errorf("result %d: document %v, want %q", r.Index, r.Document, texts[r.Index])
				case !c.docs && r.Document != nil:
					t.Errorf("result %d: document %v with return_documents false", r.Index, r.Document)
				}
			}
			if !reflect.DeepEqual(order, c.order) {
				t.Errorf("order %v, want %v", order, c.order)
			}
		})
	}

	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{"model":"tiny","documents":["a"]}`, 400, "query"},
		{`{"model":"tiny","query":"","documents":["a"]}`, 400, "query"},
		{`{"model":"tiny","query":"q"}`, 400, "documents"},
		{`{"model":"tiny","query":"q","documents":[]}`, 400, "documents"},
		{`{"model":"tiny","query":"q","documents":[7]}`, 400, "documents[0]"},
		{`{"model":"tiny","query":"q","documents":[{"title":"x"}]}`, 400, "documents[0].text"},
		{`{"model":"tiny","query":"q","documents":["a",""]}`, 400, "documents"},
		{`{"model":"tiny","query":"q","documents":["a"],"top_n":-1}`, 400, "top_n"},
		{`{"model":"nope","query":"q","documents":["a"]}`, 404, "model"},
	} {
		resp, body := post(t, ts.Client(), ts.URL+"/v1/rerank", tc.body)
		var e struct {
			Error struct {
				Param *string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode != tc.status || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: %d %s, want %d on %q", tc.body, resp.StatusCode, body, tc.status, tc.param)
		}
	}

	// An engine without reranking says so, with a 400.
	plain := newTestServer(t, &fakeEngine{models: testModels}, Options{})
	resp, body := post(t, plain.Client(), plain.URL+"/v1/rerank", `{"model":"tiny","query":"q","documents":["a"]}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "unsupported_model") {
		t.Errorf("rerank on an engine without it: %d %s", resp.StatusCode, body)
	}
}
