package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// complete sends body to /v1/chat/completions (not streamed) and wants a 200.
func complete(ctx context.Context, h *harness, body []byte) ([]byte, error) {
	return post(ctx, h.client, h.srv, "/v1/chat/completions", body, http.StatusOK)
}

// post sends body to path and wants status; it returns the answer.
func post(ctx context.Context, client *http.Client, srv *child, path string, body []byte, status int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.url(path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	srv.auth(req.Header)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return got, err
	}
	if resp.StatusCode != status {
		return got, fmt.Errorf("status %d, want %d: %s", resp.StatusCode, status, clipQ(got))
	}
	return got, nil
}

// sseResult is what one SSE stream delivered.
type sseResult struct {
	status int
	chunks int
	usage  bool // a usage chunk came
	// completionTokens is the usage's completion_tokens.
	completionTokens int
	done             bool   // data: [DONE] came
	errMsg           string // an error event, or the error status's body
	err              error  // the transport's error
}

// streamSSE runs one streamed request to its end (or ctx's) and reads it
// all. firstChunk, when not nil, is called at the first data event.
func streamSSE(ctx context.Context, client *http.Client, srv *child, path string, body []byte, firstChunk func()) sseResult {
	var r sseResult
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.url(path), bytes.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	srv.auth(req.Header)
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.errMsg = clipQ(b)
		return r
	}
	r = readSSE(resp.Body, firstChunk)
	r.status = resp.StatusCode
	return r
}

// readSSE reads an SSE stream to its end; firstChunk, when not nil, is
// called at the first data event.
func readSSE(body io.Reader, firstChunk func()) sseResult {
	var r sseResult
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		switch {
		case data == "[DONE]":
			r.done = true
		case strings.HasPrefix(data, `{"error"`):
			r.errMsg = clipQ([]byte(data))
		default:
			if r.chunks == 0 && firstChunk != nil {
				firstChunk()
			}
			r.chunks++
			if strings.Contains(data, `"choices":[]`) && strings.Contains(data, `"usage":{`) {
				r.usage = true
				var u struct {
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				if json.Unmarshal([]byte(data), &u) == nil {
					r.completionTokens = u.Usage.CompletionTokens
				}
			}
		}
	}
	r.err = sc.Err()
	return r
}

// streamBody is a streamed chat request of max tokens, with usage.
func streamBody(maxTokens int, extra ...string) []byte {
	kv := append([]string{"stream", "true", "stream_options", `{"include_usage":true}`,
		"max_tokens", fmt.Sprint(maxTokens), "ignore_eos", "true"}, extra...)
	return chat(kv...)
}

// checkConcurrent runs 300 streams at once; every one must complete with
// its usage and [DONE] (300 is within --max-seqs 64 + --max-queued-requests).
func checkConcurrent(ctx context.Context, h *harness) (string, error) {
	const streams = 300
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	results := make([]sseResult, streams)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range streams {
		wg.Go(func() {
			results[i] = streamSSE(ctx, client, h.srv, "/v1/chat/completions", streamBody(16), nil)
		})
	}
	wg.Wait()
	took := time.Since(start)
	var bad []string
	complete := 0
	for i, r := range results {
		if r.status == http.StatusOK && r.done && r.usage && r.completionTokens == 16 && r.errMsg == "" && r.err == nil {
			complete++
			continue
		}
		if len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("stream %d: status %d, %d chunks, usage %v (%d tokens), done %v, %s %v", i, r.status, r.chunks, r.usage, r.completionTokens, r.done, r.errMsg, r.err))
		}
	}
	figures := fmt.Sprintf("%d/%d complete in %v", complete, streams, took.Round(10*time.Millisecond))
	if complete != streams {
		return figures, errors.New(strings.Join(bad, "\n"))
	}
	return figures, nil
}

// checkDisconnectStorm opens 500 long streams, waits until every one has
// its response headers (the engine holds them, running or queued), then
// drops every connection at once: the server must end them all and free
// their KV blocks, goroutines and descriptors.
func checkDisconnectStorm(ctx context.Context, h *harness) (string, error) {
	const streams = 500
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, DisableKeepAlives: true}}
	var opened, failed atomic.Int32
	var firstErr atomic.Value
	var wg sync.WaitGroup
	bodies := make([]io.ReadCloser, streams)
	for i := range streams {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.url("/v1/chat/completions"),
				bytes.NewReader(streamBody(1500)))
			req.Header.Set("Content-Type", "application/json")
			h.srv.auth(req.Header)
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d: %s", resp.StatusCode, clipQ(b)))
				return
			}
			opened.Add(1)
			bodies[i] = resp.Body
		})
	}
	wg.Wait()
	st, _ := h.srv.scrape(ctx)
	peakKV := st.kvUsage
	// The storm: every connection dropped at once.
	cancel()
	for _, b := range bodies {
		if b != nil {
			b.Close()
		}
	}
	figures := fmt.Sprintf("%d opened (running %d, waiting %d, KV %.0f%% at the storm)", opened.Load(), st.running, st.waiting, 100*peakKV)
	if failed.Load() > 0 {
		return figures, fmt.Errorf("%d streams did not open: %v", failed.Load(), firstErr.Load())
	}
	return figures, nil
}

// stalledReader is a raw TCP client that sends one request and then never
// reads: its receive buffer fills, then the server's send buffer, then the
// server's write blocks.
type stalledReader struct {
	conn net.Conn
}

// stall sends req (a whole HTTP/1.1 request) on a new connection to addr
// and reads nothing more. The receive buffer is kept small (64 KiB), so
// that the stall shows after little output, as behind a slow link.
func stall(addr string, req []byte) (*stalledReader, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10)
	}
	if _, err := conn.Write(req); err != nil {
		conn.Close()
		return nil, err
	}
	return &stalledReader{conn: conn}, nil
}

// rawPost is an HTTP/1.1 POST of body to path on srv, with the API key.
func rawPost(srv *child, path string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, srv.addr, len(body))
	if srv.apiKey != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", srv.apiKey)
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// stalledBody is the request of the stalled-reader cases: 128 choices of
// up to 1,900 tokens each with 20 top logprobs, which never stop on their
// own. The prompt is short: 1,900 + prompt fits the 2,048 context.
func stalledBody() []byte {
	return chat("stream", "true", "n", "128", "max_tokens", "1900", "ignore_eos", "true",
		"logprobs", "true", "top_logprobs", "20")
}

// waitIdle polls the shared server until nothing runs and no KV block is in
// use, up to d, and says how long that took.
func waitIdle(ctx context.Context, h *harness, d time.Duration) (time.Duration, serverStat, error) {
	start := time.Now()
	for {
		st, err := h.srv.scrape(ctx)
		if err != nil {
			return 0, st, err
		}
		if st.running == 0 && st.waiting == 0 && st.kvUsage == 0 {
			return time.Since(start), st, nil
		}
		if time.Since(start) > d {
			return time.Since(start), st, fmt.Errorf("still %d running, %d waiting, KV %.1f%% after %v", st.running, st.waiting, 100*st.kvUsage, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitBusy polls until the engine runs something, up to d.
func waitBusy(ctx context.Context, h *harness, d time.Duration) (serverStat, error) {
	start := time.Now()
	for {
		st, err := h.srv.scrape(ctx)
		if err != nil {
			return st, err
		}
		if st.running > 0 {
			return st, nil
		}
		if time.Since(start) > d {
			return st, fmt.Errorf("nothing running after %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverLetGo waits, up to d, until the shared server holds no more
// descriptors than before the case: a stalled client still holds its end
// of the connection, the server must have closed its own.
func serverLetGo(h *harness, d time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		st, err := readProc(h.srv.pid())
		if err != nil {
			return 0, err
		}
		if st.fds <= h.base.proc.fds+fdSlack {
			return time.Since(start), nil
		}
		if time.Since(start) > d {
			return time.Since(start), fmt.Errorf("the server still holds %d descriptors (%d before) %v later", st.fds, h.base.proc.fds, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkStalledSSE is defect 2 over SSE: the client stops reading a stream
// of 128 choices × 1,900 tokens with 20 top logprobs. The engine must pause
// the request (bounded queues), and --write-idle-timeout (3 s) must end it:
// requests and KV blocks freed, the server's side of the connection closed
// while the client still holds its own open.
func checkStalledSSE(ctx context.Context, h *harness) (string, error) {
	sr, err := stall(h.srv.addr, rawPost(h.srv, "/v1/chat/completions", stalledBody()))
	if err != nil {
		return "", err
	}
	defer sr.conn.Close()
	busy, err := waitBusy(ctx, h, 20*time.Second)
	if err != nil {
		return "", err
	}
	start := time.Now()
	cpuBefore, _ := readProc(h.srv.pid())
	took, st, err := waitIdle(ctx, h, 60*time.Second)
	cpuAfter, _ := readProc(h.srv.pid())
	figures := fmt.Sprintf("%d choices running, then idle after %v (KV %.0f%%, server CPU %v meanwhile)", busy.running, took.Round(100*time.Millisecond), 100*st.kvUsage, cpuAfter.cpu-cpuBefore.cpu)
	if err != nil {
		return figures, fmt.Errorf("the stalled stream was not ended: %w", err)
	}
	// The server's end of the connection must be gone, though the
	// client never read nor closed.
	if _, err := serverLetGo(h, 10*time.Second); err != nil {
		return figures, err
	}
	figures += fmt.Sprintf(", connection closed by the server within %v", time.Since(start).Round(100*time.Millisecond))
	return figures, nil
}
