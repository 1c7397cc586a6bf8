// Command load streams completions from an OpenAI-compatible server with N
// concurrent clients over loopback and reports time to first token,
// aggregate and per-stream decode throughput, and errors — the measurement
// behind refdata/llamacpp/perf/server_stream_*.txt, so rill and llama.cpp's
// server can be compared with the same method.
//
//	go run ./scripts/load -url http://127.0.0.1:8080 -model rill-tiny -c 8 -rounds 4
//
// Every stream must end with [DONE] and report, in its usage chunk, exactly
// the completion tokens asked for (ignore_eos), or it counts as an error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

type result struct {
	ttft       time.Duration
	total      time.Duration
	completion int
	err        error
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "server base URL")
	model := flag.String("model", "rill-tiny", "model id")
	conc := flag.Int("c", 8, "concurrent streams")
	rounds := flag.Int("rounds", 4, "requests per client")
	maxTokens := flag.Int("max-tokens", 128, "tokens per request")
	prompt := flag.String("prompt", "Once upon a time", "prompt (each client appends its number)")
	keepalive := flag.Bool("keepalive", true, "reuse connections")
	chat := flag.Bool("chat", false, "use /v1/chat/completions instead of /v1/completions")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: !*keepalive, MaxIdleConnsPerHost: *conc}}
	var mu sync.Mutex
	var results []result
	start := time.Now()
	var wg sync.WaitGroup
	for c := range *conc {
		wg.Go(func() {
			for r := range *rounds {
				res := stream(client, *url, *model, fmt.Sprintf("%s %d.%d", *prompt, c, r), *maxTokens, *chat)
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)

	var ttfts []time.Duration
	var rates []float64
	tokens, errs := 0, 0
	for _, r := range results {
		if r.err != nil {
			errs++
			fmt.Fprintln(os.Stderr, "error:", r.err)
			continue
		}
		ttfts = append(ttfts, r.ttft)
		tokens += r.completion
		if d := r.total - r.ttft; d > 0 && r.completion > 1 {
			rates = append(rates, float64(r.completion-1)/d.Seconds())
		}
	}
	slices.Sort(ttfts)
	slices.Sort(rates)
	pct := func(p float64) time.Duration {
		if len(ttfts) == 0 {
			return 0
		}
		return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))]
	}
	median := 0.0
	if len(rates) > 0 {
		median = rates[len(rates)/2]
	}
	fmt.Printf("keepalive=%v conc=%d rounds=%d max_tokens=%d requests=%d errors=%d wall=%.3fs\n",
		*keepalive, *conc, *rounds, *maxTokens, len(results), errs, wall.Seconds())
	fmt.Printf("TTFT p50=%.2fms p95=%.2fms max=%.2fms\n", ms(pct(0.5)), ms(pct(0.95)), ms(pct(1)))
	fmt.Printf("completion tokens (usage) total=%d aggregate=%.1f tok/s; per-stream decode median=%.1f tok/s\n",
		tokens, float64(tokens)/wall.Seconds(), median)
	if errs > 0 {
		os.Exit(1)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stream runs one streamed request and checks its framing and usage.
func stream(client *http.Client, url, model, prompt string, maxTokens int, chat bool) result {
	body := map[string]any{
		"model": model, "max_tokens": maxTokens, "stream": true, "temperature": 0, "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
	}
	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		body["prompt"] = prompt
	}
	b, _ := json.Marshal(body)
	start := time.Now()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return result{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	var res result
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return result{err: fmt.Errorf("chunk: %w", err)}
		}
		if chunk.Error != nil {
			return result{err: fmt.Errorf("stream error: %s", chunk.Error.Message)}
		}
		if res.ttft == 0 && len(chunk.Choices) > 0 && (chunk.Choices[0].Text != "" || chunk.Choices[0].Delta.Content != "") {
			res.ttft = time.Since(start)
		}
		if chunk.Usage != nil {
			res.completion = chunk.Usage.CompletionTokens
		}
	}
	res.total = time.Since(start)
	if err := sc.Err(); err != nil {
		return result{err: err}
	}
	if !done {
		return result{err: fmt.Errorf("stream ended without [DONE]")}
	}
	if res.completion != maxTokens {
		return result{err: fmt.Errorf("usage.completion_tokens %d, asked for %d with ignore_eos", res.completion, maxTokens)}
	}
	return res
}
