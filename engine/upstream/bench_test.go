package upstream_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"rill/engine/upstream"
	"rill/service"
)

// BenchmarkOverhead measures what rill adds in front of an upstream: each
// iteration streams one request straight from the upstream and one through
// rill (alternating, so that drift hits both alike), and reports
//
//	tok/s-direct, tok/s-rill   streaming throughput of a client,
//	throughput-ratio           rill's tokens per second over direct's,
//	ttft-ms-direct, ttft-ms-rill, ttft-added-ms   time to the first token,
//	us/tok-added               the extra time per token.
//
// Upstreams: "fixture" streams fixed chunks as fast as it can (the worst
// case: rill's per-token work is all there is to see); "native" is rill's
// own service on the embedded model, a real engine generating tokens.
func BenchmarkOverhead(b *testing.B) {
	for _, up := range []string{"fixture", "native"} {
		b.Run(up, func(b *testing.B) {
			const tokens = 256
			var upURL, body string
			switch up {
			case "fixture":
				upURL, _ = serve(b, fastStream(tokens))
				body = `{"model":"m","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":256,"stream":true}`
			case "native":
				upURL, _ = serve(b, service.New(service.Options{Engine: nativeEngine(b, "m"), Logger: discard}))
				body = `{"model":"m","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":256,"ignore_eos":true,"temperature":0,"stream":true}`
			}
			rillURL := front(b, newUpstream(b, "m", upstream.Rill, upURL))
			var direct, proxied timing
			streamOnce(b, upURL, body, &timing{}) // warm up connections and caches
			streamOnce(b, rillURL, body, &timing{})
			b.ResetTimer()
			for range b.N {
				streamOnce(b, upURL, body, &direct)
				streamOnce(b, rillURL, body, &proxied)
			}
			b.StopTimer()
			dRate, pRate := direct.rate(), proxied.rate()
			b.ReportMetric(dRate, "tok/s-direct")
			b.ReportMetric(pRate, "tok/s-rill")
			b.ReportMetric(pRate/dRate, "throughput-ratio")
			b.ReportMetric(direct.ttftMS(), "ttft-ms-direct")
			b.ReportMetric(proxied.ttftMS(), "ttft-ms-rill")
			b.ReportMetric(proxied.ttftMS()-direct.ttftMS(), "ttft-added-ms")
			b.ReportMetric((1/pRate-1/dRate)*1e6, "us/tok-added")
		})
	}
}

// timing accumulates streams: time to first token, then the rest.
type timing struct {
	ttft, rest   time.Duration
	tokens, runs int
}

// rate is tokens per second after the first token.
func (t *timing) rate() float64 { return float64(t.tokens-t.runs) / t.rest.Seconds() }
func (t *timing) ttftMS() float64 {
	return float64(t.ttft) / float64(time.Millisecond) / float64(t.runs)
}

// streamOnce streams one chat request and counts its content chunks.
func streamOnce(b *testing.B, url, body string, t *timing) {
	start := time.Now()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var first time.Time
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if !contentDelta.Match(line) {
			continue
		}
		if n == 0 {
			first = time.Now()
		}
		n++
	}
	if n == 0 {
		b.Fatal("no content")
	}
	end := time.Now()
	t.ttft += first.Sub(start)
	t.rest += end.Sub(first)
	t.tokens += n
	t.runs++
}

// fastStream is an upstream that answers every request with n one-token
// chunks as fast as it can write them, then the usage chunk.
func fastStream(n int) http.HandlerFunc {
	return health(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n")
		fl.Flush()
		for i := range n {
			fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w%d"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
			fl.Flush()
		}
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}`+"\n\n")
		fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", n, n+4)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}
