package app

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/internal/wait"
)

// TestServePromptCacheDir runs `rill serve --prompt-cache-dir` twice on one
// directory: the second server answers a prompt the first one saw with its
// whole blocks cached (usage.prompt_tokens_details.cached_tokens) and the
// same greedy text.
func TestServePromptCacheDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "kv")
	var b strings.Builder
	for i := range 80 {
		fmt.Fprintf(&b, "line %d of the song, ", i)
	}
	prompt := b.String()

	type answer struct {
		text           string
		prompt, cached int64
	}
	serveOnce := func(t *testing.T) answer {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			errc <- Serve(ctx, []string{"--addr", addr, "--log-level", "error",
				"--prompt-cache-dir", dir, "--prompt-cache-size", "64MiB"})
		}()
		wait.Options{Bound: 30 * time.Second, Interval: 20 * time.Millisecond}.For(t, "rill serve to come up", func() bool {
			resp, err := http.Get("http://" + addr + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return true
		})
		client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("none"))
		resp, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model: "rill-tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
		// A shutdown saves the cache before Serve returns.
		cancel()
		if serr := <-errc; serr != nil {
			t.Fatalf("serve: %v", serr)
		}
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.Choices[0].Text, resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens}
	}
	first := serveOnce(t)
	if first.cached != 0 {
		t.Fatalf("the first server: cached_tokens %d, want 0", first.cached)
	}
	second := serveOnce(t)
	if want := (first.prompt - 1) / 16 * 16; second.cached != want || second.text != first.text {
		t.Fatalf("after a restart: cached_tokens %d of %d, want %d; text %q, want %q",
			second.cached, second.prompt, want, second.text, first.text)
	}
}
