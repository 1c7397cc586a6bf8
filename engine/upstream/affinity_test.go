package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"rill/engine"
	"rill/engine/upstream"
)

// TestCacheKeyAffinity: requests with the same prompt_cache_key go to the
// same replica, also when their prompts differ from the first byte on (the
// prompt alone would route them apart).
func TestCacheKeyAffinity(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	served := map[string][]int{} // request tag -> replicas that served it
	var urls []string
	for i := range 4 {
		u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
			var req struct{ Prompt string }
			json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			served[req.Prompt] = append(served[req.Prompt], i)
			mu.Unlock()
			sse(w, `{"choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, `[DONE]`)
		}))
		urls = append(urls, u)
	}
	e := newUpstream(t, "m", upstream.VLLM, urls...)
	for k := range 8 {
		key := fmt.Sprintf("session-%d", k)
		for _, prompt := range []string{"alpha " + key, "omega " + key} {
			st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: prompt, CacheKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if r := collect(t, st); r.err != nil {
				t.Fatal(r.err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range 8 {
		key := fmt.Sprintf("session-%d", k)
		a, b := served["alpha "+key], served["omega "+key]
		if len(a) != 1 || len(b) != 1 || a[0] != b[0] {
			t.Errorf("key %s: the two prompts went to replicas %v and %v, want one", key, a, b)
		}
	}
}
