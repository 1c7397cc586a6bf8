package service

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"rill/engine"
)

// embeddingEngine is the engine double with engine.Embedder: each input's
// vector is (its length, its index + 0.5, 1/3), and the requests it got.
type embeddingEngine struct {
	*fakeEngine
	mu   sync.Mutex
	reqs []engine.EmbedRequest
}

func (f *embeddingEngine) Embed(_ context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	f.mu.Unlock()
	if req.Model != "tiny" {
		return nil, engine.ErrUnknownModel
	}
	if req.Dimensions != 0 && req.Dimensions != 3 {
		return nil, engine.Errorf("invalid_value", "dimensions", "dimensions must be 3")
	}
	res := &engine.EmbedResult{}
	for i, in := range req.Inputs {
		n := len(in.Text) + len(in.Tokens)
		res.Vectors = append(res.Vectors, []float32{float32(n), float32(i) + 0.5, 1.0 / 3})
		res.PromptTokens += n
	}
	return res, nil
}

func TestEmbeddingsEndpoint(t *testing.T) {
	t.Parallel()
	fake := &embeddingEngine{fakeEngine: &fakeEngine{models: testModels}}
	ts := httptest.NewServer(New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(ts.Close)
	type data struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	}
	type answer struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []data `json:"data"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	for _, c := range []struct {
		name, input string
		inputs      []engine.EmbedInput
		tokens      int
	}{
		{"string", `"hello"`, []engine.EmbedInput{{Text: "hello"}}, 5},
		{"strings", `["a","bcd"]`, []engine.EmbedInput{{Text: "a"}, {Text: "bcd"}}, 4},
		{"token ids", `[1,2,3]`, []engine.EmbedInput{{Tokens: []int{1, 2, 3}}}, 3},
		{"arrays of token ids", `[[1],[2,3]]`, []engine.EmbedInput{{Tokens: []int{1}}, {Tokens: []int{2, 3}}}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got [2]answer
			for i, format := range []string{"float", "base64"} {
				resp, body := post(t, ts.Client(), ts.URL+"/v1/embeddings", `{"model":"tiny","input":`+c.input+`,"encoding_format":"`+format+`"}`)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", format, resp.StatusCode, body)
				}
				mustValidate(t, "CreateEmbeddingResponse", body)
				if err := json.Unmarshal(body, &got[i]); err != nil {
					t.Fatal(err)
				}
				a := got[i]
				if a.Object != "list" || a.Model != "tiny" || len(a.Data) != len(c.inputs) ||
					a.Usage.PromptTokens != c.tokens || a.Usage.TotalTokens != c.tokens {
					t.Errorf("%s: %s", format, body)
				}
			}
			for j := range c.inputs {
				var floats []float32
				if err := json.Unmarshal(got[0].Data[j].Embedding, &floats); err != nil {
					t.Fatal(err)
				}
				var s string
				if err := json.Unmarshal(got[1].Data[j].Embedding, &s); err != nil {
					t.Fatal(err)
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				decoded := make([]float32, len(raw)/4)
				for k := range decoded {
					decoded[k] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
				}
				want := []float32{float32(len(c.inputs[j].Text) + len(c.inputs[j].Tokens)), float32(j) + 0.5, 1.0 / 3}
				if !reflect.DeepEqual(floats, want) || !reflect.DeepEqual(decoded, want) ||
					got[0].Data[j].Index != j || got[0].Data[j].Object != "embedding" {
					t.Errorf("input %d: float %v, base64 %v, want %v", j, floats, decoded, want)
				}
			}
		})
	}
	fake.mu.Lock()
	first := fake.reqs[0]
	fake.mu.Unlock()
	if !reflect.DeepEqual(first, engine.EmbedRequest{Model: "tiny", Inputs: []engine.EmbedInput{{Text: "hello"}}}) {
		t.Errorf("engine got %+v", first)
	}

	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{"model":"tiny"}`, 400, "input"},
		{`{"model":"tiny","input":7}`, 400, "input"},
		{`{"model":"tiny","input":[]}`, 400, "input"},
		{`{"model":"tiny","input":""}`, 400, "input"},
		{`{"model":"tiny","input":["a",""]}`, 400, "input"},
		{`{"model":"tiny","input":"a","encoding_format":"hex"}`, 400, "encoding_format"},
		{`{"model":"tiny","input":"a","dimensions":0}`, 400, "dimensions"},
		{`{"model":"tiny","input":"a","dimensions":2}`, 400, "dimensions"},
		{`{"model":"nope","input":"a"}`, 404, "model"},
	} {
		resp, body := post(t, ts.Client(), ts.URL+"/v1/embeddings", tc.body)
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

	// An engine without embeddings says so, with a 400.
	plain := newTestServer(t, &fakeEngine{models: testModels}, Options{})
	resp, body := post(t, plain.Client(), plain.URL+"/v1/embeddings", `{"model":"tiny","input":"a"}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "unsupported_model") {
		t.Errorf("embeddings on an engine without them: %d %s", resp.StatusCode, body)
	}
}
