package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/config"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/app"
	"rill/service"
)

// TestCatalogCapOfTwo serves a folder of three tiny models with at most
// two loaded: requests across the three, with the official client, all
// succeed (none meets a 5xx while its model loads or another is
// evicted), and /v1/models and /metrics show the loads and evictions.
func TestCatalogCapOfTwo(t *testing.T) {
	dir := t.TempDir()
	ids := []string{"alpha", "beta", "gamma"}
	for _, id := range ids {
		if err := testmodel.WriteFile(filepath.Join(dir, id+".gguf"), testmodel.Target(quant.F32)); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	e, err := app.OpenCatalog(t.Context(), &config.File{Catalog: config.Catalog{ModelsDir: dir, MaxLoaded: 2}},
		&config.Native{KVCacheMem: 4 << 20}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	t.Cleanup(ts.Close)
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))

	states := func() map[string]string {
		t.Helper()
		resp, err := http.Get(ts.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Data []struct {
				ID     string `json:"id"`
				Status struct {
					Value string `json:"value"`
				} `json:"status"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range list.Data {
			out[m.ID] = m.Status.Value
		}
		return out
	}
	if got, want := fmt.Sprint(states()), "map[alpha:unloaded beta:unloaded gamma:unloaded]"; got != want {
		t.Fatalf("states at start %s, want %s", got, want)
	}

	complete := func(model string) error {
		c, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("The fox")},
			MaxTokens: openai.Int(8), Temperature: openai.Float(0),
		})
		if err == nil && (len(c.Choices) != 1 || c.Usage.CompletionTokens == 0) {
			err = fmt.Errorf("completion %+v", c)
		}
		return err
	}
	// In order, then all three at once, four rounds: each round after the
	// first makes the catalogue evict one model for another.
	for _, id := range ids {
		if err := complete(id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if got, want := fmt.Sprint(states()), "map[alpha:unloaded beta:loaded gamma:loaded]"; got != want {
		t.Errorf("states after alpha, beta, gamma: %s, want %s", got, want)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 4 {
		for _, id := range ids {
			wg.Go(func() {
				if err := complete(id); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err) // a 5xx, among others
	}
	loaded := 0
	for _, s := range states() {
		if s == "loaded" {
			loaded++
		}
	}
	if loaded > 2 {
		t.Errorf("%d models loaded, over the cap of 2", loaded)
	}

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var loads, evictions float64
	for line := range strings.Lines(string(body)) {
		var v float64
		switch {
		case strings.HasPrefix(line, "rill_model_loads_total{"):
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			loads += v
		case strings.HasPrefix(line, "rill_model_unloads_total{") && strings.Contains(line, `reason="evicted"`):
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			evictions += v
		}
	}
	// Three models under a cap of two: at least one eviction (alpha's for
	// gamma), and every load beyond the resident two evicted one.
	if loads < 3 || evictions < 1 || loads-evictions != float64(loaded) {
		t.Errorf("metrics: %v loads, %v evictions, %d loaded now; want loads - evictions = loaded, at least 3 and 1", loads, evictions, loaded)
	}
}
