package service

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rill/engine"
	"rill/internal/shared"
)

// refdata returns ../shared/refdata, skipping the test when absent.
func refdata(t *testing.T) string { return shared.Path(t, "refdata") }

// peerChunk is what the replay reads from a llama.cpp chunk.
type peerChunk struct {
	Choices []struct {
		Text         string
		Delta        struct{ Content *string }
		FinishReason *string `json:"finish_reason"`
	}
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens float64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	Timings *struct {
		DraftN         *int `json:"draft_n"`
		DraftNAccepted *int `json:"draft_n_accepted"`
	}
}

// TestPeerReplay replays llama.cpp's recorded streams through rill: the
// recorded request, and an engine double that emits the peer's text pieces
// and counters. rill must keep the peer's framing and text, answer with its
// own usage rules, and its schema must accept the peer's chunks too.
func TestPeerReplay(t *testing.T) {
	t.Parallel()
	ref := refdata(t)
	cases := []string{
		"llamacpp/a_usage/chat_stream_usage",
		"llamacpp/a_usage/chat_stream_usage_2nd",
		"llamacpp/a_usage/chat_stream_nousage",
		"llamacpp/a_usage/chat_stream_usage_false",
		"llamacpp/a_usage/comp_stream_usage",
		"llamacpp/a_usage/comp_stream_nousage",
		"llamacpp/a_usage/comp_stop_string_stream",
		"llamacpp/c_spec/draft_same_model/chat_stream_usage",
		"llamacpp/c_spec/ngram_simple_n3_m4/comp_stream_usage",
	}
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			request, err := os.ReadFile(filepath.Join(ref, name+".request.json"))
			if err != nil {
				t.Skipf("recording missing: %v", err)
			}
			body, err := os.ReadFile(filepath.Join(ref, name+".body"))
			if err != nil {
				t.Skipf("recording missing: %v", err)
			}
			isChat := strings.Contains(name, "chat_")
			component := completionComponent
			if isChat {
				component = chatComponent
			}

			// Read the peer's stream: pieces, finish reason, counters.
			var pieces []string
			var reason string
			stats := engine.Stats{}
			for _, c := range dataEvents(t, parseSSE(t, body)) {
				mustValidate(t, component, c) // the schema accepts a real peer
				var pc peerChunk
				if err := json.Unmarshal(c, &pc); err != nil {
					t.Fatal(err)
				}
				for _, ch := range pc.Choices {
					piece := ch.Text
					if ch.Delta.Content != nil {
						piece = *ch.Delta.Content
					}
					if piece != "" {
						pieces = append(pieces, piece)
					}
					if ch.FinishReason != nil {
						reason = *ch.FinishReason
					}
				}
				if u := pc.Usage; u != nil {
					stats.PromptTokens, stats.CompletionTokens = u.PromptTokens, u.CompletionTokens
					if d := u.PromptTokensDetails; d != nil {
						stats.CachedTokens = &d.CachedTokens
					}
				}
				if tm := pc.Timings; tm != nil && tm.DraftN != nil && tm.DraftNAccepted != nil {
					accepted, rejected := *tm.DraftNAccepted, *tm.DraftN-*tm.DraftNAccepted
					stats.DraftAccepted, stats.DraftRejected = &accepted, &rejected
				}
			}
			if len(pieces) == 0 || reason == "" {
				t.Fatalf("recording without text or finish reason")
			}

			fake := &fakeEngine{models: []engine.ModelCard{{ID: "stories260K"}},
				respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
					st := stats
					return &fakeStream{ctx: ctx, events: script(1, pieces, engine.FinishReason(reason),
						func(int) engine.Stats { return st })}, nil
				}}
			ts := newTestServer(t, fake, Options{})
			path := "/v1/completions"
			if isChat {
				path = "/v1/chat/completions"
			}
			resp, data := post(t, ts.Client(), ts.URL+path, string(request))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			var req struct {
				StreamOptions *struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
				Stop []string
			}
			if err := json.Unmarshal(request, &req); err != nil {
				t.Fatal(err)
			}
			includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
			if got := fake.requests()[0]; len(got.Stop) != len(req.Stop) || got.Sampling.Temperature != 0 || got.MaxTokens == 0 {
				t.Errorf("engine request %+v", got)
			}

			var text strings.Builder
			var gotReason string
			var usage json.RawMessage
			for i, c := range dataEvents(t, parseSSE(t, data)) {
				mustValidate(t, component, c)
				m := decodeMap(t, c)
				u, has := m["usage"]
				if has != includeUsage {
					t.Errorf("chunk %d: usage key %v with include_usage %v", i, has, includeUsage)
				}
				if u != nil {
					usage = json.RawMessage(c[strings.Index(string(c), `"usage":`)+len(`"usage":`) : len(c)-1])
				}
				var pc peerChunk
				if err := json.Unmarshal(c, &pc); err != nil {
					t.Fatal(err)
				}
				for _, ch := range pc.Choices {
					text.WriteString(ch.Text)
					if ch.Delta.Content != nil {
						text.WriteString(*ch.Delta.Content)
					}
					if ch.FinishReason != nil {
						gotReason = *ch.FinishReason
					}
				}
			}
			if text.String() != strings.Join(pieces, "") || gotReason != reason {
				t.Errorf("text %q reason %q, peer %q %q", text.String(), gotReason, strings.Join(pieces, ""), reason)
			}
			if includeUsage {
				want := AssembleUsage([][]engine.Stats{{stats}})
				if string(usage) != string(want.AppendJSON(nil)) {
					t.Errorf("usage %s, want %s", usage, want.AppendJSON(nil))
				}
				if stats.DraftAccepted != nil && !strings.Contains(string(usage), `"accepted_prediction_tokens"`) {
					t.Errorf("drafting recording without draft counters in usage: %s", usage)
				}
			}
		})
	}
}
