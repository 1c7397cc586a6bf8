package conformance

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rill/internal/shared"
)

func intp(n int) *int { return &n }

func TestCheckCold(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cached *int
		bound  ColdBound
		// problem is a substring one of the problems must contain; "" means none.
		problem string
	}{
		{"not measured", nil, ColdBound{}, "cached_tokens is absent although the target measures a prefix cache"},
		{"block cache, nothing shared", intp(0), ColdBound{BlockSize: 16}, ""},
		{"block cache reports a block for nothing", intp(16), ColdBound{BlockSize: 16}, "it shares nothing every fresh prompt shares with earlier ones (the probe saw 0), plus at most 3 tokens its fresh nonce can match by chance, which fill 0 whole 16-token blocks: want at most 0"},
		{"block cache reports part of a block", intp(5), ColdBound{BlockSize: 16}, "reported 5 tokens cached, not a whole number of 16-token blocks"},
		{"block cache, a long preamble fills a block", intp(16), ColdBound{Shared: 16, BlockSize: 16}, ""},
		{"block cache, preamble plus a chance match", intp(16), ColdBound{Shared: 14, BlockSize: 16}, ""},
		{"block cache reports two blocks for one", intp(32), ColdBound{Shared: 16, BlockSize: 16}, "want at most 16"},
		{"token cache, the preamble", intp(15), ColdBound{Shared: 15}, ""},
		{"token cache, preamble and a chance match", intp(18), ColdBound{Shared: 15}, ""},
		{"token cache reports more than it shares", intp(19), ColdBound{Shared: 15}, "it shares the 15 tokens every fresh prompt shares with earlier ones (BOS, a chat template's preamble; learned by the probe), plus at most 3 tokens its fresh nonce can match by chance: want at most 18"},
		{"token cache, nothing shared", intp(0), ColdBound{}, ""},
		{"token cache reports a hit for nothing", intp(40), ColdBound{}, "want at most 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := &Usage{PromptTokens: 70, CompletionTokens: 2, TotalTokens: 72, CachedTokens: tc.cached}
			expectProblem(t, CheckCold(u, tc.bound), tc.problem)
		})
	}
}

// expectProblem fails unless problems is empty (want "") or one of them
// contains want.
func expectProblem(t *testing.T, problems []string, want string) {
	t.Helper()
	if want == "" {
		if len(problems) > 0 {
			t.Fatalf("want no problem, got %q", problems)
		}
		return
	}
	for _, p := range problems {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Fatalf("want a problem containing %q, got %q", want, problems)
}

// recordedUsage reads the usage of a llama.cpp recording (refdata/llamacpp):
// the last usage of a stream, or a response's.
func recordedUsage(t *testing.T, name string) *Usage {
	t.Helper()
	body, err := os.ReadFile(shared.Path(t, "refdata", "llamacpp", filepath.FromSlash(name)+".body"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(body, []byte("data: ")) {
		tr := &Transcript{Transport: "SSE"}
		if err := ReadSSE(bytes.NewReader(body), tr); err != nil {
			t.Fatal(err)
		}
		u, err := tr.FinalUsage()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return u
	}
	_, u, err := ResponseUsage(body)
	if err != nil || u == nil {
		t.Fatalf("%s: no usage (%v)", name, err)
	}
	return u
}

// TestCheckColdRecordings holds the cold rule against what llama.cpp's
// server (b10587, stories260K, a token-grained cache) really reported, in
// the order the recordings were made on one server. llama.cpp puts BOS
// first in every prompt of this model, so a completions prompt that follows
// a chat prompt shares exactly one token with it; the rule must accept
// that honest hit, where the old "0 on a cold prompt" failed it, and still
// name a warm hit passed off as cold.
func TestCheckColdRecordings(t *testing.T) {
	t.Parallel()
	var tok struct {
		Tokens []struct {
			ID int `json:"id"`
		} `json:"tokens"`
	}
	raw, err := os.ReadFile(shared.Path(t, "refdata", "llamacpp", "b_oracle", "tokenize_Once_upon_a_time_addspecial.body"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &tok); err != nil || len(tok.Tokens) == 0 || tok.Tokens[0].ID != 1 {
		t.Fatalf("llama.cpp's tokenisation of the completions prompt does not start with BOS (id 1): %s", raw)
	}
	const bos = 1
	tests := []struct {
		name, recording string
		bound           ColdBound
		problem         string
	}{
		// The first request the server saw: nothing to share.
		{"first request", "a_usage/chat_stream_usage", ColdBound{Shared: 0}, ""},
		{"first request, rill's grain", "a_usage/chat_stream_usage", ColdBound{Shared: 0, BlockSize: 16}, ""},
		// A completions prompt after the chat prompts: BOS is shared, and
		// llama.cpp reports it (cached_tokens 1).
		{"BOS shared", "a_usage/comp_stream_usage", ColdBound{Shared: bos}, ""},
		{"BOS shared, judged as a 16-token block cache", "a_usage/comp_stream_usage", ColdBound{Shared: bos, BlockSize: 16},
			"reported 1 token cached, not a whole number of 16-token blocks"},
		// cache_prompt false: the server reused nothing.
		{"cache off", "a_usage/comp_long_3_nocache", ColdBound{Shared: bos}, ""},
		// Not cold: the same chat prompt again (45 of 46 tokens reused), and
		// a prompt that repeats the previous request's prompt and output.
		{"a repeated prompt is not cold", "a_usage/chat_stream_usage_2nd", ColdBound{Shared: 16}, "reported 45 tokens cached; it shares the 16 tokens"},
		{"a continued prompt is not cold", "a_usage/comp_long_1", ColdBound{Shared: bos}, "reported 28 tokens cached; it shares the 1 token every"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := recordedUsage(t, tc.recording)
			expectNone(t, CheckUsage(u))
			expectProblem(t, CheckCold(u, tc.bound), tc.problem)
		})
	}
}

func expectNone(t *testing.T, problems []string) {
	t.Helper()
	if len(problems) > 0 {
		t.Fatalf("unexpected problems: %q", problems)
	}
}
