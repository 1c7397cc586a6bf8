package upstream

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"rill/engine"
)

// show prints Stats' counters in a fixed shape, nil as "-".
func show(st engine.Stats) string {
	f := func(p *int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	cached := "-"
	if st.CachedTokens != nil {
		cached = fmt.Sprint(*st.CachedTokens)
	}
	return fmt.Sprintf("prompt=%d cached=%s written=%s completion=%d accepted=%s rejected=%s reasoning=%s",
		st.PromptTokens, cached, f(st.CacheWriteTokens), st.CompletionTokens, f(st.DraftAccepted), f(st.DraftRejected), f(st.ReasoningTokens))
}

func TestKindStats(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		kind      Kind
		chunk     string // the counters' chunk as the upstream sends it
		predicted bool
		want      string
	}{
		{"llamacpp cold", LlamaCpp,
			`{"usage":{"completion_tokens":24,"prompt_tokens":46,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":46}}`,
			false, "prompt=46 cached=0 written=46 completion=24 accepted=- rejected=- reasoning=-"},
		{"llamacpp drafted", LlamaCpp,
			`{"usage":{"completion_tokens":64,"prompt_tokens":5},"timings":{"cache_n":4,"prompt_n":1,"draft_n":86,"draft_n_accepted":40}}`,
			false, "prompt=5 cached=4 written=1 completion=64 accepted=40 rejected=46 reasoning=-"},
		{"llamacpp draft fields absent: no drafting", LlamaCpp,
			`{"usage":{"completion_tokens":64,"prompt_tokens":5},"timings":{"cache_n":1,"prompt_n":4}}`,
			false, "prompt=5 cached=1 written=4 completion=64 accepted=- rejected=- reasoning=-"},
		{"llamacpp timings only", LlamaCpp,
			`{"timings":{"cache_n":45,"prompt_n":1,"predicted_n":24}}`,
			false, "prompt=46 cached=45 written=1 completion=24 accepted=- rejected=- reasoning=-"},
		{"llamacpp usage details without timings", LlamaCpp,
			`{"usage":{"completion_tokens":3,"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":8}}}`,
			false, "prompt=9 cached=8 written=- completion=3 accepted=- rejected=- reasoning=-"},
		{"vllm cache report", VLLM,
			`{"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":96}}}`,
			false, "prompt=100 cached=96 written=- completion=7 accepted=- rejected=- reasoning=-"},
		{"vllm cached absent is not measured", VLLM,
			`{"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":null}}`,
			false, "prompt=100 cached=- written=- completion=7 accepted=- rejected=- reasoning=-"},
		{"sglang with completion details", SGLang,
			`{"usage":{"prompt_tokens":10,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":12}}}`,
			false, "prompt=10 cached=0 written=- completion=20 accepted=- rejected=- reasoning=12"},
		{"tabbyapi fractional", TabbyAPI,
			`{"usage":{"prompt_tokens":30,"completion_tokens":3,"cached_tokens":12.5}}`,
			false, "prompt=30 cached=12.5 written=- completion=3 accepted=- rejected=- reasoning=-"},
		{"openai predicted", OpenAI,
			`{"usage":{"prompt_tokens":30,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":12,"rejected_prediction_tokens":3,"reasoning_tokens":0}}}`,
			true, "prompt=30 cached=0 written=- completion=20 accepted=12 rejected=3 reasoning=0"},
		{"openai zeros without a prediction", OpenAI,
			`{"usage":{"prompt_tokens":30,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":0,"rejected_prediction_tokens":0,"reasoning_tokens":0}}}`,
			false, "prompt=30 cached=0 written=- completion=20 accepted=- rejected=- reasoning=0"},
		{"rill drafted", Rill,
			`{"usage":{"prompt_tokens":27,"completion_tokens":32,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"accepted_prediction_tokens":20,"rejected_prediction_tokens":6}}}`,
			false, "prompt=27 cached=16 written=- completion=32 accepted=20 rejected=6 reasoning=-"},
		// The Responses API's input_tokens_details, restated in chat's
		// names (see wireResponsesUsage.chat).
		{"openai responses write count", OpenAI,
			`{"usage":{"prompt_tokens":300,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":128,"cache_write_tokens":172}}}`,
			false, "prompt=300 cached=128 written=172 completion=2 accepted=- rejected=- reasoning=-"},
		{"no counters at all", VLLM, `{}`,
			false, "prompt=0 cached=- written=- completion=0 accepted=- rejected=- reasoning=-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ch wireChunk
			if err := json.Unmarshal([]byte(tc.chunk), &ch); err != nil {
				t.Fatal(err)
			}
			if got := show(tc.kind.stats(ch.Usage, ch.Timings, tc.predicted)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestKindStatsTimings(t *testing.T) {
	t.Parallel()
	var ch wireChunk
	if err := json.Unmarshal([]byte(`{"timings":{"prompt_ms":5.03,"predicted_ms":14.733}}`), &ch); err != nil {
		t.Fatal(err)
	}
	st := LlamaCpp.stats(nil, ch.Timings, false)
	if st.PromptTime != 5030*time.Microsecond || st.GenerationTime != 14733*time.Microsecond {
		t.Errorf("times %v %v", st.PromptTime, st.GenerationTime)
	}
}

func TestParseKind(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Kind
		ok   bool
	}{
		{"llamacpp", LlamaCpp, true},
		{"llama.cpp", LlamaCpp, true},
		{"VLLM", VLLM, true},
		{" sglang ", SGLang, true},
		{"tabbyAPI", TabbyAPI, true},
		{"openai", OpenAI, true},
		{"rill", Rill, true},
		{"vlm", "", false},
		{"", "", false},
	}
	for _, tc := range cases {
		got, err := ParseKind(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseKind(%q) = %q, %v; want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
