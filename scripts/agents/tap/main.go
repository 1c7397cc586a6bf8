// Command tap is a logging reverse proxy for scripts/agents/run.sh: it
// stands between a coding agent and rill and prints one line per exchange,
// saying what the agent sent (method, path, model, how many tools of which
// types, the output cap, streaming) and what came back (status, how the
// answer finished, its usage), read from the body whichever of the three
// wire formats it is (Chat Completions, Responses, Anthropic Messages),
// streamed or not. With -dump it also writes every request and response
// body to a folder, numbered, for a failure to be replayed with curl.
//
//	go run ./scripts/agents/tap -listen 127.0.0.1:18432 -upstream http://127.0.0.1:18431 -dump /tmp/tap
//
// It changes nothing it forwards.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18432", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:18431", "rill's base URL")
	dump := flag.String("dump", "", "folder to write each request and response body to (none: no dump)")
	flag.Parse()
	if err := run(*listen, *upstream, *dump); err != nil {
		fmt.Fprintln(os.Stderr, "tap:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, dump string) error {
	if dump != "" {
		if err := os.MkdirAll(dump, 0o755); err != nil {
			return fmt.Errorf("dump folder: %w", err)
		}
	}
	t := &tap{dump: dump, out: os.Stdout}
	proxy, err := newProxy(upstream, t)
	if err != nil {
		return err
	}
	slog.Info("tap listening", "addr", listen, "upstream", upstream, "dump", dump)
	return http.ListenAndServe(listen, t.wrap(proxy))
}

// newProxy forwards to upstream, streaming, and hands each response to t.
func newProxy(upstream string, t *tap) (*httputil.ReverseProxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		FlushInterval:  -1, // stream events through as they come
		ModifyResponse: t.response,
	}, nil
}

// tap numbers the exchanges and prints their summaries.
type tap struct {
	dump string
	out  io.Writer
	n    atomic.Int64
}

// exchange is what the tap learned of one request before forwarding it.
type exchange struct {
	n    int64
	line string // the request's summary
}

type exchangeKey struct{}

// wrap reads each request's body, summarises it, and hands it on unchanged.
func (t *tap) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "tap: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		ex := &exchange{n: t.n.Add(1), line: r.Method + " " + r.URL.Path + describeRequest(body)}
		t.write(ex.n, "request.json", body)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
	})
}

// response wraps the upstream's body so that its summary is printed when
// the client has read it all.
func (t *tap) response(resp *http.Response) error {
	ex, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if ex == nil {
		return nil
	}
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	resp.Body = &watched{ReadCloser: resp.Body, done: func(body []byte) {
		t.write(ex.n, "response.txt", body)
		s := summarize(body, stream)
		if w := resp.Header.Get("Warning"); w != "" {
			s += " warning=" + w
		}
		fmt.Fprintf(t.out, "tap #%d: %s -> %d%s\n", ex.n, ex.line, resp.StatusCode, s)
	}}
	return nil
}

// write saves one body under the dump folder, when there is one.
func (t *tap) write(n int64, name string, body []byte) {
	if t.dump == "" {
		return
	}
	path := filepath.Join(t.dump, fmt.Sprintf("%03d-%s", n, name))
	if err := os.WriteFile(path, body, 0o644); err != nil {
		slog.Warn("tap: dump", "path", path, "err", err)
	}
}

// watched keeps what is read through it and calls done once, at the end
// of the body or when it is closed.
type watched struct {
	io.ReadCloser
	buf  bytes.Buffer
	done func([]byte)
	once atomic.Bool
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	w.buf.Write(p[:n])
	if err == io.EOF && w.once.CompareAndSwap(false, true) {
		w.done(w.buf.Bytes())
	}
	return n, err
}

func (w *watched) Close() error {
	if w.once.CompareAndSwap(false, true) {
		w.done(w.buf.Bytes())
	}
	return w.ReadCloser.Close()
}

// describeRequest is the summary of a JSON request body: model, tools by
// type, the output cap by its field name, streaming, and the count of
// messages or input items.
func describeRequest(body []byte) string {
	var req struct {
		Model    string            `json:"model"`
		Stream   *bool             `json:"stream"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
		System   json.RawMessage   `json:"system"`
	}
	if len(body) == 0 || json.Unmarshal(body, &req) != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " model=%s", req.Model)
	if req.Stream != nil {
		fmt.Fprintf(&b, " stream=%t", *req.Stream)
	}
	if len(req.Messages) > 0 {
		fmt.Fprintf(&b, " messages=%d", len(req.Messages))
	}
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil && len(items) > 0 {
		fmt.Fprintf(&b, " input_items=%d", len(items))
	}
	if len(req.System) > 0 {
		fmt.Fprintf(&b, " system_bytes=%d", len(req.System))
	}
	types := map[string]int{}
	for _, raw := range req.Tools {
		var tool struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(raw, &tool)
		if tool.Type == "" {
			tool.Type = "custom" // Anthropic's client tools carry no type
		}
		types[tool.Type]++
	}
	if len(req.Tools) > 0 {
		parts := make([]string, 0, len(types))
		for _, k := range slices.Sorted(maps.Keys(types)) {
			parts = append(parts, fmt.Sprintf("%s:%d", k, types[k]))
		}
		fmt.Fprintf(&b, " tools=%d(%s)", len(req.Tools), strings.Join(parts, ","))
	}
	var all map[string]json.RawMessage
	_ = json.Unmarshal(body, &all)
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens", "tool_choice", "temperature", "prompt_cache_key"} {
		if v, ok := all[k]; ok {
			fmt.Fprintf(&b, " %s=%s", k, clip(string(v), 60))
		}
	}
	fmt.Fprintf(&b, " bytes=%d", len(body))
	return b.String()
}

// summarize says how a response body finished and with what usage: the
// last finish (finish_reason, a Responses status, a stop_reason) and usage
// (Anthropic's message_start and message_delta usages merged), or the
// error's message.
func summarize(body []byte, stream bool) string {
	var docs [][]byte
	if stream {
		for line := range strings.Lines(string(body)) {
			if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data:"); ok {
				docs = append(docs, []byte(strings.TrimSpace(data)))
			}
		}
	} else {
		docs = [][]byte{body}
	}
	var finish, errMsg string
	usage := map[string]any{}
	events := 0
	for _, doc := range docs {
		var ev map[string]any
		if json.Unmarshal(doc, &ev) != nil {
			continue
		}
		events++
		if e, ok := ev["error"].(map[string]any); ok {
			errMsg = fmt.Sprint(e["message"])
		}
		// A Responses event carries the response; a stored response is one.
		if r, ok := ev["response"].(map[string]any); ok {
			ev = r
		}
		if ev["object"] == "response" {
			if s, ok := ev["status"].(string); ok {
				finish = s
				if d, ok := ev["incomplete_details"].(map[string]any); ok {
					finish += fmt.Sprintf("(%v)", d["reason"])
				}
			}
		}
		// Anthropic: message_start has the message, message_delta the delta.
		if m, ok := ev["message"].(map[string]any); ok && ev["type"] == "message_start" {
			ev = m
		}
		if d, ok := ev["delta"].(map[string]any); ok {
			if s, ok := d["stop_reason"].(string); ok {
				finish = s
			}
		}
		if s, ok := ev["stop_reason"].(string); ok {
			finish = s
		}
		if cs, ok := ev["choices"].([]any); ok {
			for _, c := range cs {
				if c, ok := c.(map[string]any); ok {
					if s, ok := c["finish_reason"].(string); ok {
						finish = s
					}
				}
			}
		}
		if u, ok := ev["usage"].(map[string]any); ok {
			maps.Copy(usage, u)
		}
	}
	var b strings.Builder
	if stream {
		fmt.Fprintf(&b, " events=%d", events)
	}
	if finish != "" {
		fmt.Fprintf(&b, " finish=%s", finish)
	}
	if len(usage) > 0 {
		u, _ := json.Marshal(usage)
		fmt.Fprintf(&b, " usage=%s", u)
	}
	if errMsg != "" {
		fmt.Fprintf(&b, " error=%q", clip(errMsg, 300))
	}
	return b.String()
}

// clip shortens s to n bytes, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
