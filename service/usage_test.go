package service

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"rill/engine"
)

func TestCachedTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cached float64
		prompt int
		want   int
	}{
		{899.4, 2000, 899},
		{899.5, 2000, 900},
		{900.5, 2000, 900}, // half to even, not half up
		{1791.6, 2000, 1792},
		{0.5, 10, 0},
		{1.5, 10, 2},
		{0, 10, 0},
		{-3, 10, 0},
		{12, 10, 10}, // above the prompt: clamped
		{9.6, 10, 10},
		{math.NaN(), 10, 0},
		{math.Inf(1), 10, 10},
		{5, 0, 0},
	}
	for _, tt := range tests {
		if got := CachedTokens(tt.cached, tt.prompt); got != tt.want {
			t.Errorf("CachedTokens(%v, %d) = %d, want %d", tt.cached, tt.prompt, got, tt.want)
		}
	}
}

func TestAssembleUsage(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	tests := []struct {
		name    string
		prompts [][]engine.Stats
		want    string
	}{
		{
			name:    "plain engine is byte-identical to the three counters",
			prompts: [][]engine.Stats{{{PromptTokens: 12, CompletionTokens: 5}}},
			want:    `{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`,
		},
		{
			name:    "cold cache reports 0, not absence",
			prompts: [][]engine.Stats{{{PromptTokens: 12, CompletionTokens: 5, CachedTokens: f(0)}}},
			want:    `{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":0}}`,
		},
		{
			name:    "fractional cached rounds half to even",
			prompts: [][]engine.Stats{{{PromptTokens: 2000, CompletionTokens: 1, CachedTokens: f(900.5)}}},
			want:    `{"prompt_tokens":2000,"completion_tokens":1,"total_tokens":2001,"prompt_tokens_details":{"cached_tokens":900}}`,
		},
		{
			name:    "cached above prompt is clamped",
			prompts: [][]engine.Stats{{{PromptTokens: 10, CompletionTokens: 1, CachedTokens: f(14)}}},
			want:    `{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":10}}`,
		},
		{
			name: "drafting: the example of docs/design.md §3",
			prompts: [][]engine.Stats{{{PromptTokens: 1985, CompletionTokens: 73, CachedTokens: f(1984),
				DraftAccepted: i(48), DraftRejected: i(27)}}},
			want: `{"prompt_tokens":1985,"completion_tokens":73,"total_tokens":2058,"prompt_tokens_details":{"cached_tokens":1984},"completion_tokens_details":{"accepted_prediction_tokens":48,"rejected_prediction_tokens":27}}`,
		},
		{
			name:    "drafting active with nothing accepted reports zeros",
			prompts: [][]engine.Stats{{{PromptTokens: 3, CompletionTokens: 2, DraftAccepted: i(0), DraftRejected: i(0)}}},
			want:    `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"completion_tokens_details":{"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
		},
		{
			name:    "reasoning alone",
			prompts: [][]engine.Stats{{{PromptTokens: 3, CompletionTokens: 9, ReasoningTokens: i(4)}}},
			want:    `{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12,"completion_tokens_details":{"reasoning_tokens":4}}`,
		},
		{
			name: "n=2: prompt and cached once, completion and drafts summed",
			prompts: [][]engine.Stats{{
				{PromptTokens: 40, CompletionTokens: 7, CachedTokens: f(32), DraftAccepted: i(3), DraftRejected: i(1)},
				{PromptTokens: 40, CompletionTokens: 9, CachedTokens: f(32), DraftAccepted: i(5), DraftRejected: i(2)},
			}},
			want: `{"prompt_tokens":40,"completion_tokens":16,"total_tokens":56,"prompt_tokens_details":{"cached_tokens":32},"completion_tokens_details":{"accepted_prediction_tokens":8,"rejected_prediction_tokens":3}}`,
		},
		{
			name: "n=2: a sibling's reuse of the prompt is not a cache hit",
			prompts: [][]engine.Stats{{
				{PromptTokens: 40, CompletionTokens: 1, CachedTokens: f(0)},
				{PromptTokens: 40, CompletionTokens: 1, CachedTokens: f(39)},
			}},
			want: `{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":0}}`,
		},
		{
			name: "two prompts, n=2: each prompt once",
			prompts: [][]engine.Stats{
				{{PromptTokens: 10, CompletionTokens: 1, CachedTokens: f(4.5)}, {PromptTokens: 10, CompletionTokens: 2, CachedTokens: f(4.5)}},
				{{PromptTokens: 20, CompletionTokens: 3, CachedTokens: f(16)}, {PromptTokens: 20, CompletionTokens: 4, CachedTokens: f(16)}},
			},
			want: `{"prompt_tokens":30,"completion_tokens":10,"total_tokens":40,"prompt_tokens_details":{"cached_tokens":20}}`,
		},
		{
			name: "drafting on one prompt only still reports the counters",
			prompts: [][]engine.Stats{
				{{PromptTokens: 5, CompletionTokens: 2}},
				{{PromptTokens: 6, CompletionTokens: 3, DraftAccepted: i(2), DraftRejected: i(0)}},
			},
			want: `{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16,"completion_tokens_details":{"accepted_prediction_tokens":2,"rejected_prediction_tokens":0}}`,
		},
		{
			name:    "no prompts",
			prompts: nil,
			want:    `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := AssembleUsage(tt.prompts)
			if got := string(u.AppendJSON(nil)); got != tt.want {
				t.Errorf("usage\n got %s\nwant %s", got, tt.want)
			}
			if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("total %d != prompt %d + completion %d", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
			}
			mustValidate(t, "CompletionUsage", u.AppendJSON(nil))
			viaJSON, err := json.Marshal(u)
			if err != nil || string(viaJSON) != tt.want {
				t.Errorf("json.Marshal = %s, %v; want %s", viaJSON, err, tt.want)
			}
		})
	}
}

// TestAssembleUsageCacheWrites pins the cache write count (docs/design.md §3 rule
// 12): each prompt once, the largest any choice measured, clamped so that
// cached + written <= prompt; absent when no choice measured it.
func TestAssembleUsageCacheWrites(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	tests := []struct {
		name    string
		prompts [][]engine.Stats
		want    *int
	}{
		{"not measured", [][]engine.Stats{{{PromptTokens: 50, CachedTokens: f(0)}}}, nil},
		{"a cold prompt", [][]engine.Stats{{{PromptTokens: 50, CachedTokens: f(0), CacheWriteTokens: i(48)}}}, i(48)},
		{"measured, nothing written", [][]engine.Stats{{{PromptTokens: 50, CachedTokens: f(48), CacheWriteTokens: i(0)}}}, i(0)},
		{"n=3 share one prompt: counted once", [][]engine.Stats{{
			{PromptTokens: 40, CacheWriteTokens: i(32)}, {PromptTokens: 40, CacheWriteTokens: i(32)}, {PromptTokens: 40, CacheWriteTokens: i(32)},
		}}, i(32)},
		{"n=2 split upstream: the sibling reports none", [][]engine.Stats{{
			{PromptTokens: 46, CachedTokens: f(0), CacheWriteTokens: i(46)}, {PromptTokens: 46},
		}}, i(46)},
		{"n=2: the sibling found the prompt written", [][]engine.Stats{{
			{PromptTokens: 40, CacheWriteTokens: i(0)}, {PromptTokens: 40, CacheWriteTokens: i(39)},
		}}, i(39)},
		{"clamped to what the cache did not serve", [][]engine.Stats{{{PromptTokens: 10, CachedTokens: f(8), CacheWriteTokens: i(5)}}}, i(2)},
		{"clamped against the rounded cached count", [][]engine.Stats{{{PromptTokens: 10, CachedTokens: f(5.5), CacheWriteTokens: i(9)}}}, i(4)},
		{"negative is 0", [][]engine.Stats{{{PromptTokens: 10, CacheWriteTokens: i(-3)}}}, i(0)},
		{"two prompts: summed", [][]engine.Stats{
			{{PromptTokens: 20, CachedTokens: f(0), CacheWriteTokens: i(16)}},
			{{PromptTokens: 40, CachedTokens: f(0), CacheWriteTokens: i(32)}},
		}, i(48)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := AssembleUsage(tt.prompts)
			if (u.CacheWriteTokens == nil) != (tt.want == nil) || u.CacheWriteTokens != nil && *u.CacheWriteTokens != *tt.want {
				t.Fatalf("cache write tokens %v, want %v", show(u.CacheWriteTokens), show(tt.want))
			}
			// Chat's usage has no such field.
			if strings.Contains(string(u.AppendJSON(nil)), "cache_write") {
				t.Errorf("chat usage %s names cache writes", u.AppendJSON(nil))
			}
		})
	}
}

// show prints a count, nil as "absent".
func show(p *int) string {
	if p == nil {
		return "absent"
	}
	return strconv.Itoa(*p)
}

// TestUsageShapes checks the two APIs' usage objects, which share one
// writer: names, the order of the details, details only when set, and no
// allocation into a buffer with room.
func TestUsageShapes(t *testing.T) {
	n := func(v int) *int { return &v }
	tests := []struct {
		name string
		json func([]byte) []byte
		want string
	}{
		{"chat, bare", (&Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}).AppendJSON,
			`{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}`},
		{"chat, every detail", (&Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, CachedTokens: n(0), ReasoningTokens: n(1), AcceptedPredictionTokens: n(2), RejectedPredictionTokens: n(3)}).AppendJSON,
			`{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":2,"rejected_prediction_tokens":3,"reasoning_tokens":1}}`},
		{"responses, nothing measured", (&ResponseUsage{InputTokens: 5, OutputTokens: 6, TotalTokens: 11}).AppendJSON,
			`{"input_tokens":5,"output_tokens":6,"total_tokens":11,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`},
		{"responses, every detail", (&ResponseUsage{InputTokens: 5, OutputTokens: 6, TotalTokens: 11, CachedTokens: 1, CacheWriteTokens: 3, ReasoningTokens: 1, AcceptedPredictionTokens: n(2), RejectedPredictionTokens: n(0)}).AppendJSON,
			`{"input_tokens":5,"output_tokens":6,"total_tokens":11,"input_tokens_details":{"cached_tokens":1,"cache_write_tokens":3},"output_tokens_details":{"reasoning_tokens":1,"accepted_prediction_tokens":2,"rejected_prediction_tokens":0}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.json(nil)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			buf := make([]byte, 0, 512)
			if a := testing.AllocsPerRun(100, func() { buf = tt.json(buf[:0]) }); a != 0 {
				t.Errorf("%v allocations per call", a)
			}
		})
	}
}
