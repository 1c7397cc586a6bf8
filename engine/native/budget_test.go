package native

import (
	"context"
	"errors"
	"strings"
	"testing"

	"rill/engine"
)

// TestMaxTokensPolicy: a budget beyond what the context leaves runs to the
// context's end under the default policy (finish length, the counts
// exact) and is refused under MaxTokensPolicy error; a prompt that alone
// fills the context is refused under both.
func TestMaxTokensPolicy(t *testing.T) {
	t.Parallel()
	const ctxLen = 64
	clamp := newTestEngine(t, Options{ContextLength: ctxLen})
	strict := newTestEngine(t, Options{ContextLength: ctxLen, MaxTokensPolicy: engine.MaxTokensError})
	id := clamp.Models()[0].ID
	near := strings.Repeat("the river ran past the hill ", 5)
	nearLen := len(clamp.tok.Encode(near, encodeWithBOS))
	if nearLen >= ctxLen-2 || nearLen < ctxLen/2 {
		t.Fatalf("the prompt is %d tokens; want one near but under %d", nearLen, ctxLen)
	}
	long := strings.Repeat("the river ran past the hill ", 40)
	tests := []struct {
		name      string
		e         *Engine
		req       engine.Request
		wantParam string // "": runs
		wantTotal int
	}{
		{"clamp: an agent's budget", clamp, engine.Request{Model: id, Prompt: near, MaxTokens: 32000, IgnoreEOS: true}, "", ctxLen},
		{"clamp: one token over", clamp, engine.Request{Model: id, Prompt: near, MaxTokens: ctxLen - nearLen + 1, IgnoreEOS: true}, "", ctxLen},
		{"clamp: a budget that fits", clamp, engine.Request{Model: id, Prompt: near, MaxTokens: 3, IgnoreEOS: true}, "", nearLen + 3},
		{"clamp: the prompt alone is over", clamp, engine.Request{Model: id, Prompt: long, MaxTokens: 32000}, "prompt", 0},
		{"error: an agent's budget", strict, engine.Request{Model: id, Prompt: near, MaxTokens: 32000}, "max_tokens", 0},
		{"error: a budget that fits", strict, engine.Request{Model: id, Prompt: near, MaxTokens: 3, IgnoreEOS: true}, "", nearLen + 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantParam != "" {
				_, err := tc.e.Generate(context.Background(), &tc.req)
				var re *engine.RequestError
				if !errors.As(err, &re) || re.Code != engine.CodeContextLengthExceeded || re.Param != tc.wantParam {
					t.Fatalf("err = %v, want context_length_exceeded naming %s", err, tc.wantParam)
				}
				return
			}
			r := collect(t, tc.e, &tc.req)
			st := r.final[0].Stats
			if r.final[0].FinishReason != engine.FinishLength {
				t.Errorf("finish %q, want length", r.final[0].FinishReason)
			}
			if st.PromptTokens != nearLen || st.PromptTokens+st.CompletionTokens != tc.wantTotal {
				t.Errorf("prompt %d + completion %d tokens, want %d + %d", st.PromptTokens, st.CompletionTokens, nearLen, tc.wantTotal-nearLen)
			}
		})
	}
}
