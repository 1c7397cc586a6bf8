package app

import (
	"context"
	"fmt"
	"io"
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
		metrics        string // /metrics after the request
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
		var metrics string
		if mresp, merr := http.Get("http://" + addr + "/metrics"); merr == nil {
			body, _ := io.ReadAll(mresp.Body)
			mresp.Body.Close()
			metrics = string(body)
		}
		// A shutdown saves the cache before Serve returns.
		cancel()
		if serr := <-errc; serr != nil {
			t.Fatalf("serve: %v", serr)
		}
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.Choices[0].Text, resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens, metrics}
	}
	first := serveOnce(t)
	if first.cached != 0 {
		t.Fatalf("the first server: cached_tokens %d, want 0", first.cached)
	}
	second := serveOnce(t)
	want := (first.prompt - 1) / 16 * 16
	if second.cached != want || second.text != first.text {
		t.Fatalf("after a restart: cached_tokens %d of %d, want %d; text %q, want %q",
			second.cached, second.prompt, want, second.text, first.text)
	}
	// /metrics counts the disk tier's blocks: the second server loaded
	// exactly the cached blocks and refused none.
	for _, line := range []string{
		fmt.Sprintf(`rill_prompt_cache_disk_blocks_total{event="loaded",model_name="rill-tiny"} %d`, want/16),
		`rill_prompt_cache_disk_blocks_total{event="refused",model_name="rill-tiny"} 0`,
	} {
		if !strings.Contains(second.metrics, line+"\n") {
			t.Errorf("/metrics after the restart lacks %q", line)
		}
	}
	if !strings.Contains(first.metrics, `rill_prompt_cache_disk_blocks_total{event="loaded",model_name="rill-tiny"} 0`) {
		t.Errorf("/metrics of the first server lacks its disk counters")
	}
}
