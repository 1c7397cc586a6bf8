package service

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"rill/engine"
)

// TestResponsesUsageRequiredFields reads Responses usage with the official
// openai-go client, as a typed client does, over JSON, SSE (the final
// response.completed) and WebSocket: input_tokens_details.cached_tokens,
// input_tokens_details.cache_write_tokens and
// output_tokens_details.reasoning_tokens are present and numbers, as
// OpenAI's schema requires, for a model that does not reason and for an
// engine that measures no cache (docs/design.md §3 rule 12).
func TestResponsesUsageRequiredFields(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name  string
		stats engine.Stats
		// want are cached, cache write and reasoning tokens.
		want [3]int64
	}{
		{"nothing measured", engine.Stats{PromptTokens: 9, CompletionTokens: 2}, [3]int64{0, 0, 0}},
		{"a cold prompt", engine.Stats{PromptTokens: 40, CompletionTokens: 2, CachedTokens: f(0), CacheWriteTokens: ptr(32)}, [3]int64{0, 32, 0}},
		{"the same prompt again", engine.Stats{PromptTokens: 40, CompletionTokens: 2, CachedTokens: f(32), CacheWriteTokens: ptr(0)}, [3]int64{32, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeEngine{respond: replay([]string{"Hel", "lo"}, engine.FinishStop, func(int) engine.Stats { return tc.stats })}
			ts := newTestServer(t, fake, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
			params := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}

			res, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			checkUsageFields(t, "JSON", res.Usage, tc.want)

			s := client.Responses.NewStreaming(ctx, params)
			var completed *responses.Response
			for s.Next() {
				if ev := s.Current(); ev.Type == "response.completed" {
					r := ev.Response
					completed = &r
				}
			}
			if err := s.Err(); err != nil || completed == nil {
				t.Fatalf("SSE: %v, response.completed seen: %v", err, completed != nil)
			}
			checkUsageFields(t, "SSE", completed.Usage, tc.want)

			conn, err := client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = conn.Create(ctx, responses.ResponsesClientEventResponseCreateParam{Model: "tiny",
				Input: responses.ResponsesClientEventResponseCreateInputUnionParam{OfString: openai.String("hi")}})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := conn.Recv(ctx)
				if err != nil {
					t.Fatalf("WebSocket: %v", err)
				}
				if ev.Type == "error" {
					t.Fatalf("WebSocket: %s", ev.RawJSON())
				}
				if ev.Type == "response.completed" {
					checkUsageFields(t, "WebSocket", ev.OfResponsesServerEventResponseWsCompleted.Response.Usage, tc.want)
					break
				}
			}
		})
	}
}

// checkUsageFields fails unless u carries both details objects and the
// three counts OpenAI's schema requires, with the values in want (cached,
// cache write, reasoning).
func checkUsageFields(t *testing.T, via string, u responses.ResponseUsage, want [3]int64) {
	t.Helper()
	in, out := u.InputTokensDetails, u.OutputTokensDetails
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"input_tokens_details", u.JSON.InputTokensDetails.Valid()},
		{"input_tokens_details.cached_tokens", in.JSON.CachedTokens.Valid()},
		{"input_tokens_details.cache_write_tokens", in.JSON.CacheWriteTokens.Valid()},
		{"output_tokens_details", u.JSON.OutputTokensDetails.Valid()},
		{"output_tokens_details.reasoning_tokens", out.JSON.ReasoningTokens.Valid()},
	} {
		if !f.ok {
			t.Errorf("%s: %s is absent, null or not a number: %s", via, f.name, u.RawJSON())
		}
	}
	if got := [3]int64{in.CachedTokens, in.CacheWriteTokens, out.ReasoningTokens}; got != want {
		t.Errorf("%s: cached, cache write and reasoning tokens %v, want %v: %s", via, got, want, u.RawJSON())
	}
}
