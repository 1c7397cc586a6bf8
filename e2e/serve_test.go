package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"rill/config"
	"rill/internal/app"
	"rill/service"
)

// streamText posts a streamed greedy completion and returns its text and
// the completion tokens its usage reports.
func streamText(t *testing.T, client *http.Client, url, prompt string, maxTokens int) (string, int) {
	body, _ := json.Marshal(map[string]any{
		"model": "rill-tiny", "prompt": prompt, "max_tokens": maxTokens, "temperature": 0,
		"ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true},
	})
	resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return "", 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
		return "", 0
	}
	var text strings.Builder
	completion := 0
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Errorf("chunk %q: %v", data, err)
			return "", 0
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Text)
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	if !done {
		t.Errorf("stream for %q ended without [DONE]", prompt)
	}
	return text.String(), completion
}

// startFlags opens the engine that serve's flags args describe and runs it
// until the test ends.
func startFlags(t *testing.T, log *slog.Logger, args ...string) *app.Engines {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	m := config.Model{Native: &config.Native{}}
	m.RegisterNativeFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	e, err := app.OpenFlags(&m, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	wait := e.Run(ctx, log)
	t.Cleanup(func() {
		stop()
		wait()
		e.Close()
	})
	return e
}

// TestConcurrentStreams: 8 and 32 greedy streams at once over loopback HTTP
// all complete, each with the text it gets alone and the usage it asked for.
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log)
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

	const n, maxTokens = 32, 40
	prompts := make([]string, n)
	alone := make([]string, n)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("The fox %d came down the hill", i)
		alone[i], _ = streamText(t, client, ts.URL, prompts[i], maxTokens)
	}
	for _, conc := range []int{8, 32} {
		got := make([]string, conc)
		tokens := make([]int, conc)
		var wg sync.WaitGroup
		for i := range conc {
			wg.Go(func() { got[i], tokens[i] = streamText(t, client, ts.URL, prompts[i], maxTokens) })
		}
		wg.Wait()
		for i := range conc {
			if got[i] != alone[i] || tokens[i] != maxTokens {
				t.Fatalf("%d streams: stream %d got %q (%d tokens), alone %q (%d)", conc, i, got[i], tokens[i], alone[i], maxTokens)
			}
		}
	}
}
