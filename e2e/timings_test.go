package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"

	"rill/service"
)

// llamaTimings is llama.cpp's timings object, as rill sends it.
type llamaTimings struct {
	CacheN             *int    `json:"cache_n"`
	PromptN            *int    `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         *int    `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
	DraftN             *int    `json:"draft_n"`
	DraftNAccepted     *int    `json:"draft_n_accepted"`
}

// extra decodes the extension field name of an openai-go object; false when absent.
func extra(t *testing.T, fields map[string]respjson.Field, name string, v any) bool {
	t.Helper()
	// openai-go keeps fields it does not know with their raw JSON (and
	// reports them as not Valid: no type of its own matched).
	f, ok := fields[name]
	if !ok || f.Raw() == "" || f.Raw() == respjson.Null {
		return false
	}
	if err := json.Unmarshal([]byte(f.Raw()), v); err != nil {
		t.Fatalf("%s: %v: %s", name, err, f.Raw())
	}
	return true
}

// checkTimings holds tm to llama.cpp's definitions against the usage u.
func checkTimings(t *testing.T, tm llamaTimings, u openai.CompletionUsage) {
	t.Helper()
	if tm.CacheN == nil || tm.PromptN == nil || tm.PredictedN == nil {
		t.Fatalf("timings without their counts: %+v", tm)
	}
	if *tm.PromptN+*tm.CacheN != int(u.PromptTokens) || *tm.CacheN != int(u.PromptTokensDetails.CachedTokens) {
		t.Errorf("timings prompt_n %d + cache_n %d; usage prompt_tokens %d, cached_tokens %d",
			*tm.PromptN, *tm.CacheN, u.PromptTokens, u.PromptTokensDetails.CachedTokens)
	}
	if *tm.PredictedN != int(u.CompletionTokens) {
		t.Errorf("timings predicted_n %d, usage completion_tokens %d", *tm.PredictedN, u.CompletionTokens)
	}
	d := u.CompletionTokensDetails
	if tm.DraftN == nil || tm.DraftNAccepted == nil {
		t.Fatalf("drafting was on, but the timings have no draft counts: %+v", tm)
	}
	if *tm.DraftNAccepted != int(d.AcceptedPredictionTokens) || *tm.DraftN != int(d.AcceptedPredictionTokens+d.RejectedPredictionTokens) {
		t.Errorf("timings draft_n %d, draft_n_accepted %d; usage accepted %d, rejected %d",
			*tm.DraftN, *tm.DraftNAccepted, d.AcceptedPredictionTokens, d.RejectedPredictionTokens)
	}
	if tm.PromptMS <= 0 || tm.PromptPerSecond <= 0 || tm.PredictedMS <= 0 || tm.PredictedPerSecond <= 0 {
		t.Errorf("timings without times or rates: %+v", tm)
	}
}

// TestTimingsAndProgress runs the test model with its draft model and a
// 32-token prefill budget behind rill's HTTP service, driven by openai-go:
// "timings": true gives llama.cpp's timings, equal to the usage, on a
// response and on a stream's last chunk, cold and with the prompt cached;
// "timings_per_token" and "return_progress" on a stream of a prompt
// several chunks long (as llama.cpp's web UI sends them) give running
// timings on every content chunk and prompt_progress chunks before the
// first token, growing to the whole prompt.
func TestTimingsAndProgress(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, "--draft-model", "embedded", "--batch-tokens", "32")
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	prompt := strings.Repeat("The river sang a quiet song to the stones. ", 10)
	params := openai.ChatCompletionNewParams{
		Model:     "rill-tiny",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(24), Temperature: openai.Float(0),
	}

	for _, round := range []string{"cold", "cached"} {
		resp, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("timings", true))
		if err != nil {
			t.Fatal(err)
		}
		var tm llamaTimings
		if !extra(t, resp.JSON.ExtraFields, "timings", &tm) {
			t.Fatalf("%s: no timings in %s", round, resp.RawJSON())
		}
		checkTimings(t, tm, resp.Usage)
		if round == "cached" && *tm.CacheN == 0 {
			t.Errorf("the repeated prompt found nothing cached: %+v", tm)
		}
	}

	// A new prompt (so that little of it is cached), streamed.
	params.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once more: " + prompt)}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	// As llama.cpp's web UI asks: timings on every chunk, and progress.
	stream := client.Chat.Completions.NewStreaming(ctx, params,
		option.WithJSONSet("timings_per_token", true), option.WithJSONSet("return_progress", true))
	type progress struct{ Total, Cache, Processed, TimeMS int }
	var seen []progress
	var last openai.ChatCompletionChunk
	content := false
	for stream.Next() {
		chunk := stream.Current()
		var p struct {
			Total     int `json:"total"`
			Cache     int `json:"cache"`
			Processed int `json:"processed"`
			TimeMS    int `json:"time_ms"`
		}
		if extra(t, chunk.JSON.ExtraFields, "prompt_progress", &p) {
			if content || len(chunk.Choices) > 0 {
				t.Fatalf("a progress chunk after content, or with choices: %s", chunk.RawJSON())
			}
			seen = append(seen, progress(p))
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			content = true
			var running llamaTimings
			if !extra(t, chunk.JSON.ExtraFields, "timings", &running) || running.PredictedN == nil || *running.PredictedN < 1 {
				t.Fatalf("a content chunk without running timings: %s", chunk.RawJSON())
			}
		}
		last = chunk
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	var tm llamaTimings
	if !extra(t, last.JSON.ExtraFields, "timings", &tm) {
		t.Fatalf("no timings on the last chunk: %s", last.RawJSON())
	}
	checkTimings(t, tm, last.Usage)
	u := last.Usage
	if len(seen) < 2 {
		t.Fatalf("%d progress chunks for a prompt of %d tokens in 32-token passes", len(seen), u.PromptTokens)
	}
	for i, p := range seen {
		if p.Total != int(u.PromptTokens) || p.Cache != int(u.PromptTokensDetails.CachedTokens) {
			t.Errorf("progress %d: %+v; want total %d, cache %d", i, p, u.PromptTokens, u.PromptTokensDetails.CachedTokens)
		}
		if i > 0 && p.Processed <= seen[i-1].Processed {
			t.Errorf("progress %d: processed %d after %d", i, p.Processed, seen[i-1].Processed)
		}
	}
	end := seen[len(seen)-1]
	if end.Processed != end.Total || end.Processed-end.Cache != *tm.PromptN {
		t.Errorf("last progress %+v: want the whole prompt, %d computed", end, *tm.PromptN)
	}
}
