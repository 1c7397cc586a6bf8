package e2e

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"rill/internal/app"
	rshared "rill/internal/shared"
	"rill/service"
)

// TestJSONWhitespaceFlagAndConfig: --json-whitespace and the file's
// native.json_whitespace reach the engine. On stories260K a strict
// json_schema reply at T=0 within 120 tokens is compact JSON that ends
// (finish "stop") by default and with compact, and has whitespace between
// its tokens with bounded; an unknown policy stops serve at startup with an
// error that names the flag or key.
func TestJSONWhitespaceFlagAndConfig(t *testing.T) {
	t.Parallel()
	model := rshared.Path(t, "models", "stories260K.gguf")
	log := slog.New(slog.DiscardHandler)
	schema := schemaOf(t, weatherParams)
	ask := func(t *testing.T, e *app.Engines) (content, finish string) {
		t.Helper()
		ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
		defer ts.Close()
		client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
		res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: e.Models()[0].ID, Messages: userMessage("What is the weather in Paris?"),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Schema: weatherParams, Strict: openai.Bool(true)}}},
			Temperature: openai.Float(0), MaxTokens: openai.Int(120)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Choices[0].Message.Content, string(res.Choices[0].FinishReason)
	}
	check := func(t *testing.T, policy string, e *app.Engines) {
		t.Helper()
		content, finish := ask(t, e)
		spaced := hasInterTokenSpace(content)
		t.Logf("%q: finish %q: %q", policy, finish, content)
		if policy == "bounded" {
			if !spaced {
				t.Errorf("bounded: no whitespace between tokens in %q", content)
			}
			return
		}
		if finish != "stop" || spaced {
			t.Errorf("%q: finish %q, want stop with compact JSON: %q", policy, finish, content)
		}
		mustValidate(t, schema, content, policy)
	}
	for _, policy := range []string{"", "compact", "bounded"} {
		name := "flag " + policy
		if policy == "" {
			name = "flag default"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"--model", model}
			if policy != "" {
				args = append(args, "--json-whitespace", policy)
			}
			check(t, policy, startFlags(t, log, args...))
		})
	}
	t.Run("config bounded", func(t *testing.T) {
		t.Parallel()
		e, err := app.OpenConfig(writeConfig(t, "models:\n  - id: stories\n    native: {model: "+model+", json_whitespace: bounded}\n"), log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		wait := e.Run(ctx, log)
		defer func() { stop(); wait(); e.Close() }()
		check(t, "bounded", e)
	})
	t.Run("unknown policy", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--json-whitespace", "pretty"}, `--json-whitespace "pretty": want compact or bounded`},
			{[]string{"--config", writeConfig(t, "models:\n  - id: m\n    native: {model: embedded, json_whitespace: 20}\n")},
				`native.json_whitespace "20": want compact or bounded`},
		} {
			err := app.Serve(context.Background(), append(tc.args, "--addr", "127.0.0.1:0", "--log-level", "error"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
			}
		}
	})
}

// hasInterTokenSpace reports whether the JSON text s (whole or cut short)
// has whitespace outside its strings.
func hasInterTokenSpace(s string) bool {
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && strings.IndexByte(" \t\n\r", c) >= 0:
			return true
		}
	}
	return false
}

// writeConfig writes a configuration file of body for the test.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rill.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
