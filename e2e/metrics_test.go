package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"rill/engine/router"
	"rill/engine/upstream"
	"rill/internal/wait"
	"rill/service"
)

// The metrics check of issue 17: a real rill on loopback serving a native
// model that drafts (the embedded draft model), a native model without
// drafting, and a model behind HTTP (a second rill); /metrics scraped before
// and after a batch of requests over SSE, WebSocket and plain JSON, n > 1
// included; every counter's delta must be the sum of the usage the clients
// received, and every latency histogram must have one observation per
// request.

const (
	draftingModel = "tiny-draft"
	plainModel    = "tiny-plain"
	remoteModel   = "tiny-remote"
	metricsKey    = "sk-metrics"
)

// usageSeen is what a client received for one request.
type usageSeen struct {
	model    string
	prompt   int
	complete int
	cached   *int
	accepted *int
	rejected *int
	finishes []string // finish_reason of each choice
}

// wireUsage decodes the usage object.
type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		Accepted *int `json:"accepted_prediction_tokens"`
		Rejected *int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

type wireChunk struct {
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

func (u *usageSeen) add(c *wireChunk) {
	for _, ch := range c.Choices {
		if ch.FinishReason != nil {
			u.finishes = append(u.finishes, *ch.FinishReason)
		}
	}
	if w := c.Usage; w != nil {
		u.prompt, u.complete = w.PromptTokens, w.CompletionTokens
		if w.PromptTokensDetails != nil {
			u.cached = w.PromptTokensDetails.CachedTokens
		}
		if d := w.CompletionTokensDetails; d != nil {
			u.accepted, u.rejected = d.Accepted, d.Rejected
		}
	}
}

// startStack serves the three models behind one rill with an API key and
// returns its base URL.
func startStack(t *testing.T) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	drafting := startFlags(t, log, "--model-id", draftingModel, "--draft-model", "embedded", "--threads", "1")
	plain := startFlags(t, log, "--model-id", plainModel, "--threads", "1")
	back := startFlags(t, log, "--model-id", remoteModel, "--threads", "1")
	backURL := listen(t, service.New(service.Options{Engine: back, Logger: log}))
	remote, err := upstream.New(upstream.Options{ID: remoteModel, Kind: upstream.Rill,
		Replicas: []upstream.Replica{{URL: backURL}}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(drafting.Natives()[0], plain.Natives()[0], remote)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return listen(t, service.New(service.Options{Engine: r, Logger: log, APIKey: metricsKey}))
}

// listen serves h on a loopback port until the test ends.
func listen(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func apiRequest(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+metricsKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return resp
}

// postSSE streams one request and returns the usage it received.
func postSSE(t *testing.T, base, path, model, body string) usageSeen {
	t.Helper()
	resp := apiRequest(t, base+path, body)
	defer resp.Body.Close()
	u := usageSeen{model: model}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c wireChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		u.add(&c)
	}
	if !done {
		t.Fatalf("%s: stream ended without [DONE]", path)
	}
	return u
}

// postJSON sends one non-streamed request and returns its usage.
func postJSON(t *testing.T, base, path, model, body string) usageSeen {
	t.Helper()
	resp := apiRequest(t, base+path, body)
	defer resp.Body.Close()
	var c wireChunk
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	u := usageSeen{model: model}
	u.add(&c)
	return u
}

// overWebSocket runs bodies as concurrent creates on one connection, the
// API key sent as a browser would (the subprotocol), and returns their usage.
func overWebSocket(t *testing.T, base, path, model string, bodies ...string) []usageSeen {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+path,
		&websocket.DialOptions{Subprotocols: []string{"openai-insecure-api-key." + metricsKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i, b := range bodies {
		msg := fmt.Sprintf(`{"type":"create","request_id":"r%d","body":%s}`, i, b)
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[string]*usageSeen)
	for i := range bodies {
		seen[fmt.Sprintf("r%d", i)] = &usageSeen{model: model}
	}
	for open := len(bodies); open > 0; {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Type      string    `json:"type"`
			RequestID string    `json:"request_id"`
			Chunk     wireChunk `json:"chunk"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case "chunk":
			seen[m.RequestID].add(&m.Chunk)
		case "done":
			open--
		default:
			t.Fatalf("websocket: %s", data)
		}
	}
	out := make([]usageSeen, 0, len(bodies))
	for i := range bodies {
		out = append(out, *seen[fmt.Sprintf("r%d", i)])
	}
	return out
}

// scrape reads /metrics with the API key.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+metricsKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sample finds the series of family name whose labels include want; nil
// when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
series:
	for _, m := range f.GetMetric() {
		have := make(map[string]string)
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue series
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value; NaN when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := sample(fams, name, labels)
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return math.NaN()
}

// histogram is a histogram's count and sum; NaNs when absent.
func histogram(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, float64) {
	m := sample(fams, name, labels)
	if m == nil || m.Histogram == nil {
		return math.NaN(), math.NaN()
	}
	return float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum()
}

func TestMetricsMatchUsage(t *testing.T) {
	t.Parallel()
	base := startStack(t)
	before := scrape(t, base)
	for _, id := range []string{draftingModel, plainModel, remoteModel} {
		if v := value(before, "rill_prompt_tokens_total", map[string]string{"model_name": id}); v != 0 {
			t.Errorf("%s: prompt tokens before any request = %v, want a series at 0", id, v)
		}
	}

	chat := func(model, content string, n, maxTokens int, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": model, "n": n, "max_tokens": maxTokens, "stream": stream,
			"messages":       []map[string]string{{"role": "user", "content": content}},
			"stream_options": map[string]any{"include_usage": true}})
		if !stream {
			b, _ = json.Marshal(map[string]any{"model": model, "n": n, "max_tokens": maxTokens,
				"messages": []map[string]string{{"role": "user", "content": content}}})
		}
		return string(b)
	}
	completion := func(model, prompt string, n, maxTokens int, stream bool) string {
		m := map[string]any{"model": model, "prompt": prompt, "n": n, "max_tokens": maxTokens}
		if stream {
			m["stream"] = true
			m["stream_options"] = map[string]any{"include_usage": true}
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	predicted := func(model, content string, maxTokens int) string {
		// Greedy: sampled, the first token could leave the prediction for
		// good (nothing to realign on), and nothing would be drafted.
		b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "stream": true, "temperature": 0,
			"messages":       []map[string]string{{"role": "user", "content": content}},
			"stream_options": map[string]any{"include_usage": true},
			"prediction":     map[string]any{"type": "content", "content": "there was a river by the mill"}})
		return string(b)
	}
	long := strings.Repeat("The river runs past the mill and under the old stone bridge. ", 6)

	var seen []usageSeen
	for _, id := range []string{draftingModel, plainModel, remoteModel} {
		seen = append(seen,
			postSSE(t, base, "/v1/chat/completions", id, chat(id, long, 1, 12, true)),
			// The same prompt again: a prefix-cache hit.
			postSSE(t, base, "/v1/chat/completions", id, chat(id, long, 2, 9, true)),
			postJSON(t, base, "/v1/chat/completions", id, chat(id, long+"Again.", 1, 7, false)),
			postJSON(t, base, "/v1/completions", id, completion(id, long, 3, 5, false)),
			postSSE(t, base, "/v1/completions", id, completion(id, "Once upon a time", 1, 16, true)),
			postSSE(t, base, "/v1/chat/completions", id, predicted(id, "Say: there was a river", 12)),
		)
		seen = append(seen, overWebSocket(t, base, "/v1/chat/completions", id,
			chat(id, long, 1, 10, true), chat(id, "Tell me about the mill.", 2, 6, true))...)
	}
	after := scrape(t, base)

	type sums struct {
		requests, choices, prompt, completion, queried, cached, drafted, accepted int
		finishes                                                                  map[string]int
	}
	want := make(map[string]*sums)
	for _, u := range seen {
		s := want[u.model]
		if s == nil {
			s = &sums{finishes: make(map[string]int)}
			want[u.model] = s
		}
		s.requests++
		s.choices += len(u.finishes)
		s.prompt += u.prompt
		s.completion += u.complete
		if u.cached != nil {
			s.queried += u.prompt
			s.cached += *u.cached
		}
		if u.accepted != nil {
			s.accepted += *u.accepted
			s.drafted += *u.accepted
		}
		if u.rejected != nil {
			s.drafted += *u.rejected
		}
		for _, f := range u.finishes {
			s.finishes[f]++
		}
	}
	if d := want[draftingModel]; d.drafted == 0 || d.cached == 0 {
		t.Fatalf("the batch did not exercise drafting and the prefix cache: %+v", d)
	}
	if p := want[plainModel]; p.drafted == 0 {
		t.Fatalf("predicted outputs did not draft on %s: %+v", plainModel, p)
	}

	for id, s := range want {
		labels := map[string]string{"model_name": id}
		delta := func(name string) float64 { return value(after, name, labels) - value(before, name, labels) }
		for _, c := range []struct {
			name string
			want int
		}{
			{"rill_prompt_tokens_total", s.prompt},
			{"rill_generation_tokens_total", s.completion},
			{"rill_prefix_cache_queries_total", s.queried},
			{"rill_prefix_cache_hits_total", s.cached},
			{"rill_spec_decode_num_draft_tokens_total", s.drafted},
			{"rill_spec_decode_num_accepted_tokens_total", s.accepted},
		} {
			if got := delta(c.name); got != float64(c.want) {
				t.Errorf("%s{model_name=%q} grew by %v; the clients received %d", c.name, id, got, c.want)
			}
		}
		for reason, n := range s.finishes {
			l := map[string]string{"model_name": id, "finished_reason": reason}
			if got := value(after, "rill_request_success_total", l) - value(before, "rill_request_success_total", l); got != float64(n) {
				t.Errorf("rill_request_success_total{%q,%q} grew by %v, want %d", id, reason, got, n)
			}
		}
		if s.choices == 0 {
			t.Errorf("%s: no finish_reason seen", id)
		}
		for _, h := range []struct {
			name string
			sum  float64 // NaN: not checked
		}{
			{"rill_time_to_first_token_seconds", math.NaN()},
			{"rill_e2e_request_latency_seconds", math.NaN()},
			{"rill_request_prompt_tokens", float64(s.prompt)},
			{"rill_request_generation_tokens", float64(s.completion)},
		} {
			n0, s0 := histogram(before, h.name, labels)
			n1, s1 := histogram(after, h.name, labels)
			if n1-n0 != float64(s.requests) {
				t.Errorf("%s{model_name=%q}: %v new observations for %d requests", h.name, id, n1-n0, s.requests)
			}
			if !math.IsNaN(h.sum) && s1-s0 != h.sum {
				t.Errorf("%s{model_name=%q}: sum grew by %v, want %v", h.name, id, s1-s0, h.sum)
			}
		}
		n0, _ := histogram(before, "rill_inter_token_latency_seconds", labels)
		n1, _ := histogram(after, "rill_inter_token_latency_seconds", labels)
		if n1 <= n0 || n1-n0 > float64(s.completion-s.choices) {
			t.Errorf("rill_inter_token_latency_seconds{model_name=%q}: %v observations for %d tokens of %d choices",
				id, n1-n0, s.completion, s.choices)
		}
	}
}

// TestMetricsGauges: while a stream runs, its model counts it as running
// and uses KV blocks, and the upstream replica has it in flight; when it
// ends, all go back to rest. Replica health is reported.
func TestMetricsGauges(t *testing.T) {
	t.Parallel()
	base := startStack(t)
	idle := func(fams map[string]*dto.MetricFamily) error {
		for _, id := range []string{draftingModel, plainModel, remoteModel} {
			l := map[string]string{"model_name": id}
			if r, w := value(fams, "rill_num_requests_running", l), value(fams, "rill_num_requests_waiting", l); r != 0 || w != 0 {
				return fmt.Errorf("%s: running %v, waiting %v", id, r, w)
			}
		}
		if u := value(fams, "rill_kv_cache_usage_perc", map[string]string{"model_name": plainModel}); u != 0 {
			return fmt.Errorf("kv usage %v at rest", u)
		}
		return nil
	}
	eventually := func(what string, ok func(map[string]*dto.MetricFamily) error) map[string]*dto.MetricFamily {
		t.Helper()
		var fams map[string]*dto.MetricFamily
		var err error
		if !(wait.Options{Interval: 5 * time.Millisecond}).Until(func() bool {
			fams = scrape(t, base)
			err = ok(fams)
			return err == nil
		}) {
			t.Fatalf("%s: %v", what, err)
		}
		return fams
	}
	// The model behind HTTP reports its replica's own KV usage, read from
	// the replica's /metrics at its first health check.
	fams := eventually("at rest, with the replica's KV usage", func(f map[string]*dto.MetricFamily) error {
		if err := idle(f); err != nil {
			return err
		}
		if u := value(f, "rill_kv_cache_usage_perc", map[string]string{"model_name": remoteModel}); u != 0 {
			return fmt.Errorf("kv usage of the model behind HTTP %v, want its replica's 0", u)
		}
		return nil
	})
	replica := sample(fams, "rill_upstream_replica_healthy", map[string]string{"model_name": remoteModel})
	if replica == nil || replica.Gauge.GetValue() != 1 {
		t.Fatalf("replica health: %v", replica)
	}

	// Long streams, held open by reading only their first chunk.
	for _, id := range []string{plainModel, remoteModel} {
		body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","max_tokens":1900,"ignore_eos":true,"stream":true}`, id)
		resp := apiRequest(t, base+"/v1/completions", body)
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q, %v", line, err)
		}
		l := map[string]string{"model_name": id}
		eventually(id+" running", func(f map[string]*dto.MetricFamily) error {
			if r := value(f, "rill_num_requests_running", l); r != 1 {
				return fmt.Errorf("running %v", r)
			}
			if id == plainModel {
				if u := value(f, "rill_kv_cache_usage_perc", l); !(u > 0 && u <= 1) {
					return fmt.Errorf("kv usage %v", u)
				}
			} else if n := value(f, "rill_upstream_replica_requests_in_flight", l); n != 1 {
				return fmt.Errorf("in flight at the replica: %v", n)
			}
			return nil
		})
		resp.Body.Close()
	}
	eventually("at rest after the streams were dropped", idle)
}

// TestMetricsNeedKey: with an API key, /metrics is behind it like /v1.
func TestMetricsNeedKey(t *testing.T) {
	t.Parallel()
	base := startStack(t)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte("invalid_api_key")) {
		t.Errorf("GET /metrics without the key: %d %s", resp.StatusCode, body)
	}
	// With it: the families of issue 17 are all there.
	fams := scrape(t, base)
	for _, name := range []string{"rill_prompt_tokens_total", "rill_generation_tokens_total",
		"rill_prefix_cache_queries_total", "rill_prefix_cache_hits_total",
		"rill_spec_decode_num_draft_tokens_total", "rill_spec_decode_num_accepted_tokens_total",
		"rill_request_success_total", "rill_time_to_first_token_seconds", "rill_inter_token_latency_seconds",
		"rill_e2e_request_latency_seconds", "rill_request_prompt_tokens", "rill_request_generation_tokens",
		"rill_num_requests_running", "rill_num_requests_waiting", "rill_kv_cache_usage_perc",
		"rill_upstream_replica_healthy", "rill_upstream_replica_requests_in_flight", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}
