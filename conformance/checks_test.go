package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Plain unit tests of the client side and the checks, on synthetic input:
// a checker that cannot fail would let every server pass.

func chunks(docs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = json.RawMessage(d)
	}
	return out
}

const (
	c0       = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`
	c0fin    = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	c1fin    = `{"object":"chat.completion.chunk","choices":[{"index":1,"delta":{},"finish_reason":"length"}]}`
	c0null   = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"usage":null}`
	c0finNul = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`
	c1finNul = `{"object":"chat.completion.chunk","choices":[{"index":1,"delta":{},"finish_reason":"stop"}],"usage":null}`
	usageC   = `{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
	badTotal = `{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":8}}`
	finUsage = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
)

func TestCheckStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks []json.RawMessage
		done   bool
		want   StreamWant
		// problem is a substring one of the problems must contain; "" means none.
		problem string
	}{
		{"plain stream", chunks(c0, c0fin), true, StreamWant{Choices: 1}, ""},
		{"usage stream", chunks(c0null, c0finNul, usageC), true, StreamWant{IncludeUsage: true, Choices: 1}, ""},
		{"two choices with usage", chunks(c0null, c0finNul, c1finNul, usageC), true, StreamWant{IncludeUsage: true, Choices: 2}, ""},
		{"usage key without include_usage", chunks(c0null, c0finNul), true, StreamWant{Choices: 1}, "chunk 0 has a usage key (null) although include_usage is not true"},
		{"usage on the finish chunk (llama.cpp)", chunks(c0, finUsage), true, StreamWant{Choices: 1}, "chunk 1 has a usage key (an object)"},
		{"no usage key with include_usage", chunks(c0, c0finNul, usageC), true, StreamWant{IncludeUsage: true, Choices: 1}, "chunk 0 has no usage key although include_usage is true"},
		{"no usage chunk", chunks(c0null, c0finNul), true, StreamWant{IncludeUsage: true, Choices: 1}, "no chunk carries usage"},
		{"usage chunk not last", chunks(c0null, usageC, c0finNul), true, StreamWant{IncludeUsage: true, Choices: 1}, "the usage chunk is chunk 1 of 3"},
		{"usage twice", chunks(c0null, c0finNul, usageC, usageC), true, StreamWant{IncludeUsage: true, Choices: 1}, "2 chunks carry a usage object"},
		{"usage with choices", chunks(c0null, finUsage), true, StreamWant{IncludeUsage: true, Choices: 1}, "carries usage together with 1 choice(s)"},
		{"choice never finished", chunks(c0null, c0finNul, usageC), true, StreamWant{IncludeUsage: true, Choices: 2}, "choice 1 never got a finish_reason"},
		{"choice out of range", chunks(c0, c0fin, c1fin), true, StreamWant{Choices: 1}, "choice index 1"},
		{"chunk after finish", chunks(c0fin, c0), true, StreamWant{Choices: 1}, "continues choice 0 after its finish_reason"},
		{"no end marker", chunks(c0, c0fin), false, StreamWant{Choices: 1}, "no end marker (data: [DONE])"},
		{"bad arithmetic", chunks(c0null, c0finNul, badTotal), true, StreamWant{IncludeUsage: true, Choices: 1}, "total_tokens 8 != prompt_tokens 5 + completion_tokens 2"},
		{"empty choices outside usage", chunks(`{"choices":[]}`, c0, c0fin), true, StreamWant{Choices: 1}, `chunk 0 has "choices": [] but is not the usage chunk`},
		{"not an object", chunks(`[1]`, c0, c0fin), true, StreamWant{Choices: 1}, "chunk 0 cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &Transcript{Transport: "SSE", Status: 200, Chunks: tt.chunks, Done: tt.done}
			got := CheckStream(tr, tt.want)
			if tt.problem == "" {
				if len(got) != 0 {
					t.Fatalf("want no problems, got %q", got)
				}
				return
			}
			if !containsProblem(got, tt.problem) {
				t.Fatalf("want a problem containing %q, got %q", tt.problem, got)
			}
		})
	}
}

func containsProblem(problems []string, sub string) bool {
	for _, p := range problems {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		chunks   int
		done     bool
		hasError bool
		problem  string
	}{
		{"plain", "data: {\"a\":1}\n\ndata: [DONE]\n\n", 1, true, false, ""},
		{"crlf and no space", "data:{\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n", 1, true, false, ""},
		{"comments and fields", ": ping\n\nevent: x\nid: 3\ndata: {\"a\":1}\n\n: ping\n\ndata: [DONE]\n\n", 1, true, false, ""},
		{"multi-line data", "data: {\"a\":\ndata: 1}\n\ndata: [DONE]\n\n", 1, true, false, ""},
		{"error event", "data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n", 1, false, true, ""},
		{"after done", "data: [DONE]\n\ndata: {\"a\":1}\n\n", 0, true, false, "arrives after data: [DONE]"},
		{"not json", "data: hello\n\ndata: [DONE]\n\n", 0, true, false, "is not JSON"},
		{"unterminated", "data: {\"a\":1}\n\ndata: [DONE]", 1, true, false, "ends inside an event"},
		{"unknown field", "foo: bar\n\ndata: [DONE]\n\n", 0, true, false, "is not an SSE field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &Transcript{}
			if err := ReadSSE(strings.NewReader(tt.in), tr); err != nil {
				t.Fatal(err)
			}
			if len(tr.Chunks) != tt.chunks || tr.Done != tt.done || (tr.Error != nil) != tt.hasError {
				t.Fatalf("chunks %d done %v error %s; want %d %v %v", len(tr.Chunks), tr.Done, tr.Error, tt.chunks, tt.done, tt.hasError)
			}
			if tt.problem == "" && len(tr.Problems) > 0 || tt.problem != "" && !containsProblem(tr.Problems, tt.problem) {
				t.Fatalf("problems %q, want one containing %q", tr.Problems, tt.problem)
			}
		})
	}
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		cached  int // -1: nil
		draft   bool
		wantErr string
	}{
		{"plain", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`, -1, false, ""},
		{"cached", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}`, 0, false, ""},
		{"null details", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":null,"completion_tokens_details":null}`, -1, false, ""},
		{"null cached", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":null}}`, -1, false, ""},
		{"draft", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"completion_tokens_details":{"accepted_prediction_tokens":1,"rejected_prediction_tokens":0}}`, -1, true, ""},
		{"fractional cached", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1.5}}`, -1, false, "cached_tokens is 1.5, not an integer"},
		{"missing total", `{"prompt_tokens":3,"completion_tokens":2}`, -1, false, "total_tokens is missing"},
		{"not an object", `[1]`, -1, false, "not a usage object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := ParseUsage(json.RawMessage(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (u.CachedTokens == nil) != (tt.cached < 0) || u.CachedTokens != nil && *u.CachedTokens != tt.cached {
				t.Fatalf("cached %v, want %d", u.CachedTokens, tt.cached)
			}
			if (u.AcceptedPredictionTokens != nil) != tt.draft {
				t.Fatalf("accepted %v, want present %v", u.AcceptedPredictionTokens, tt.draft)
			}
		})
	}
}

func TestCheckUsageAndDraft(t *testing.T) {
	t.Parallel()
	p := func(n int) *int { return &n }
	tests := []struct {
		name    string
		u       Usage
		k, n    int
		problem string
	}{
		{"consistent", Usage{PromptTokens: 10, CompletionTokens: 8, TotalTokens: 18, CachedTokens: p(0),
			AcceptedPredictionTokens: p(5), RejectedPredictionTokens: p(7)}, 4, 1, ""},
		{"cached above prompt", Usage{PromptTokens: 10, CompletionTokens: 1, TotalTokens: 11, CachedTokens: p(11)}, 4, 1, "cached_tokens 11 exceeds prompt_tokens 10"},
		{"one draft counter", Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2, AcceptedPredictionTokens: p(0)}, 4, 1, "only one of"},
		{"accepted above completion", Usage{PromptTokens: 1, CompletionTokens: 3, TotalTokens: 4,
			AcceptedPredictionTokens: p(4), RejectedPredictionTokens: p(0)}, 4, 1, "accepted_prediction_tokens 4 exceeds completion_tokens 3"},
		// 8 tokens, 5 accepted: at most 4 steps of k=4, so at most 16 drafted.
		{"too many drafted", Usage{PromptTokens: 1, CompletionTokens: 8, TotalTokens: 9,
			AcceptedPredictionTokens: p(5), RejectedPredictionTokens: p(12)}, 4, 1, "exceed 16"},
		{"two choices widen the bound", Usage{PromptTokens: 1, CompletionTokens: 8, TotalTokens: 9,
			AcceptedPredictionTokens: p(5), RejectedPredictionTokens: p(12)}, 4, 2, ""},
		{"negative", Usage{PromptTokens: -1, CompletionTokens: 1, TotalTokens: 0}, 4, 1, "prompt_tokens is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := CheckUsage(&tt.u)
			if tt.u.AcceptedPredictionTokens != nil && tt.u.RejectedPredictionTokens != nil {
				got = append(got, CheckDraft(&tt.u, tt.k, tt.n)...)
			}
			if tt.problem == "" && len(got) > 0 || tt.problem != "" && !containsProblem(got, tt.problem) {
				t.Fatalf("problems %q, want one containing %q", got, tt.problem)
			}
		})
	}
}

func TestCheckError(t *testing.T) {
	t.Parallel()
	good := `{"error":{"message":"bad","type":"invalid_request_error","param":"n","code":null}}`
	tests := []struct {
		name    string
		status  int
		body    string
		problem string
	}{
		{"openai shape", 400, good, ""},
		{"server error", 500, good, "status 500, want a 4xx"},
		{"success", 200, good, "status 200"},
		{"plain text", 400, `bad request`, "not {\"error\""},
		{"no param", 404, `{"error":{"message":"bad","type":"x","code":null}}`, "error.param is missing"},
		{"numeric code", 400, `{"error":{"message":"bad","type":"x","param":null,"code":400}}`, "error.code is 400"},
		{"empty message", 400, `{"error":{"message":"","type":"x","param":null,"code":null}}`, "error.message is missing or empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := CheckError(tt.status, []byte(tt.body))
			if tt.problem == "" && len(got) > 0 || tt.problem != "" && !containsProblem(got, tt.problem) {
				t.Fatalf("problems %q, want one containing %q", got, tt.problem)
			}
		})
	}
}

func TestValidateTranscript(t *testing.T) {
	t.Parallel()
	good := `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`
	bad := `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"exploded"}]}`
	if p := ValidateTranscript(&Transcript{Chunks: chunks(good)}, Chat); len(p) != 0 {
		t.Fatalf("valid chunk: %q", p)
	}
	if p := ValidateTranscript(&Transcript{Chunks: chunks(good, bad)}, Chat); !containsProblem(p, "chunk 1 breaks CreateChatCompletionStreamResponse") {
		t.Fatalf("invalid finish_reason: %q", p)
	}
}

func TestProbeWebSocketWithoutUpgrade(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		http.Error(w, `{"error":{"message":"no"}}`, http.StatusMethodNotAllowed)
	}))
	defer srv.Close()
	ok, reason := ProbeWebSocket(context.Background(), NewTarget(srv.URL+"/v1/", "m", ""))
	if ok || !strings.Contains(reason, "HTTP 405") {
		t.Fatalf("ProbeWebSocket = %v, %q; want false and a reason naming HTTP 405", ok, reason)
	}
}

func TestConfigFromEnv(t *testing.T) {
	// t.Setenv forbids t.Parallel.
	tests := []struct {
		name      string
		env       map[string]string
		blockSize int
		draftK    int
		wantErr   bool
	}{
		{"in-process defaults", map[string]string{EnvURL: ""}, DefaultBlockSize, DefaultDraftK, false},
		{"other server: block size unknown", map[string]string{EnvURL: "http://x"}, 0, DefaultDraftK, false},
		{"explicit", map[string]string{EnvURL: "http://x", EnvBlockSize: "32", EnvDraftK: "8"}, 32, 8, false},
		{"bad block size", map[string]string{EnvBlockSize: "sixteen"}, 0, 0, true},
		{"zero draft k", map[string]string{EnvDraftK: "0"}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{EnvURL, EnvBlockSize, EnvDraftK} {
				t.Setenv(k, tt.env[k])
			}
			c, err := ConfigFromEnv()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (c.BlockSize != tt.blockSize || c.DraftK != tt.draftK) {
				t.Fatalf("block size %d draft k %d, want %d %d", c.BlockSize, c.DraftK, tt.blockSize, tt.draftK)
			}
		})
	}
}
