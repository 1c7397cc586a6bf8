package app

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"testing"

	"rill/config"
	"rill/engine"
)

// TestMaxTokensPolicyFlag: --max-tokens-policy reaches the native engine.
// With a 64-token context a max_tokens of 1000 runs to the context's end
// by default (finish length, prompt + completion = 64) and is refused with
// context_length_exceeded under error.
func TestMaxTokensPolicyFlag(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"default", nil, false},
		{"clamp", []string{"--max-tokens-policy", "clamp"}, false},
		{"error", []string{"--max-tokens-policy", "error"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			m := config.Model{Native: &config.Native{}}
			m.RegisterNativeFlags(fs)
			if err := fs.Parse(append([]string{"--ctx", "64", "--kv-cache-mem", "4MiB"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			es, err := OpenFlags(&m, log)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			wait := es.Run(ctx, log)
			t.Cleanup(func() { cancel(); wait(); es.Close() })

			req := &engine.Request{Model: es.Models()[0].ID, Prompt: "Once upon a time", MaxTokens: 1000, IgnoreEOS: true}
			st, err := es.Generate(ctx, req)
			var re *engine.RequestError
			if tc.wantErr {
				if !errors.As(err, &re) || re.Code != engine.CodeContextLengthExceeded {
					t.Fatalf("err = %v, want context_length_exceeded", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var final engine.Event
			for {
				ev, err := engine.Recv(st)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ev.Final {
					final = ev
				}
			}
			if s := final.Stats; final.FinishReason != engine.FinishLength || s == nil || s.PromptTokens+s.CompletionTokens != 64 {
				t.Errorf("finish %q, stats %+v; want length at 64 tokens", final.FinishReason, final.Stats)
			}
		})
	}
}
