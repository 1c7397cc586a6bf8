package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/upstream"
)

// TestMaxTokensClamp: a vLLM that refuses a max_tokens beyond its context
// gets the request again without max_tokens under the default policy (and
// generates until its context is full); under MaxTokensPolicy error its
// refusal stands, and a prompt that alone does not fit is refused either
// way.
func TestMaxTokensClamp(t *testing.T) {
	t.Parallel()
	const ctxLen, promptLen = 40960, 12700
	newVLLM := func(t *testing.T, prompt int, policy engine.MaxTokensPolicy) (*upstream.Engine, func() []map[string]any) {
		var mu sync.Mutex
		var bodies []map[string]any
		u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			bodies = append(bodies, req)
			mu.Unlock()
			maxTokens, _ := req["max_tokens"].(float64)
			if prompt >= ctxLen || prompt+int(maxTokens) > ctxLen {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"object":"error","message":"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
					ctxLen, prompt+int(maxTokens), prompt, int(maxTokens))
				return
			}
			sse(w, `{"choices":[{"index":0,"text":"…","finish_reason":"length"}]}`,
				fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, prompt, ctxLen-prompt), `[DONE]`)
		}))
		e, err := upstream.New(upstream.Options{ID: "m", Kind: upstream.VLLM, Replicas: []upstream.Replica{{URL: u}},
			HealthInterval: time.Minute, MaxTokensPolicy: policy, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, func() []map[string]any { mu.Lock(); defer mu.Unlock(); return bodies }
	}
	tests := []struct {
		name      string
		prompt    int
		policy    engine.MaxTokensPolicy
		wantErr   bool
		wantSends []any // max_tokens of each request upstream; nil: absent
	}{
		{"clamp", promptLen, "", false, []any{32000.0, nil}},
		{"error", promptLen, engine.MaxTokensError, true, []any{32000.0}},
		{"clamp, the prompt alone is over", ctxLen + 1, engine.MaxTokensClamp, true, []any{32000.0, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, bodies := newVLLM(t, tc.prompt, tc.policy)
			st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", MaxTokens: 32000})
			var re *engine.RequestError
			switch {
			case tc.wantErr && (!errors.As(err, &re) || re.Code != engine.CodeContextLengthExceeded):
				t.Fatalf("err = %v, want context_length_exceeded", err)
			case !tc.wantErr && err != nil:
				t.Fatal(err)
			case !tc.wantErr:
				r := collect(t, st)
				f := r.finals[0]
				if r.err != nil || f.FinishReason != engine.FinishLength || f.Stats.CompletionTokens != ctxLen-tc.prompt {
					t.Errorf("finish %q, completion %d tokens (%v); want length, %d", f.FinishReason, f.Stats.CompletionTokens, r.err, ctxLen-tc.prompt)
				}
			}
			got := bodies()
			if len(got) != len(tc.wantSends) {
				t.Fatalf("%d requests upstream, want %d", len(got), len(tc.wantSends))
			}
			for i, want := range tc.wantSends {
				if mt, ok := got[i]["max_tokens"]; mt != want || ok != (want != nil) {
					t.Errorf("request %d: max_tokens %v, want %v", i, mt, want)
				}
			}
		})
	}
}
