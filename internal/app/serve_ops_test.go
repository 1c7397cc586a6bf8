package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"rill/internal/wait"
	"strings"
	"testing"
	"time"
)

// TestNewLogger: --log-format and --log-level do what they say.
func TestNewLogger(t *testing.T) {
	t.Parallel()
	tests := []struct {
		format, level string
		wantErr       string
		check         func(out string) bool
	}{
		{"json", "info", "", func(out string) bool {
			var m map[string]any
			return json.Unmarshal([]byte(out), &m) == nil && m["msg"] == "request" && m["status"] == 200.0 && m["level"] == "INFO"
		}},
		{"text", "info", "", func(out string) bool {
			return strings.Contains(out, "level=INFO msg=request status=200")
		}},
		{"JSON", "warn", "", func(out string) bool { return out == "" }}, // info is below warn
		{"text", "debug", "", func(out string) bool { return strings.Contains(out, "msg=request") }},
		{"logfmt", "info", "--log-format", nil},
		{"text", "loud", "--log-level", nil},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := newLogger(&buf, tt.format, tt.level)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s/%s: error %v, want one about %s", tt.format, tt.level, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", tt.format, tt.level, err)
		}
		log.Info("request", "status", 200)
		if out := strings.TrimSpace(buf.String()); !tt.check(out) {
			t.Errorf("%s/%s logged %q", tt.format, tt.level, out)
		}
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeOpsFlags runs `rill serve` with an API key, --metrics-addr and
// --cors-allowed-origins: /metrics needs the key on --addr and not on
// --metrics-addr, the page is public, and CORS preflights follow the flag.
func TestServeOpsFlags(t *testing.T) {
	t.Parallel()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, []string{"--addr", addr, "--metrics-addr", metricsAddr, "--api-key", "sk-flags",
			"--cors-allowed-origins", "https://app.example.com", "--log-level", "error"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	get := func(url string, header map[string]string, method string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header, string(b)
	}
	wait.Options{Bound: 30 * time.Second, Interval: 20 * time.Millisecond}.For(t, "rill serve to come up", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("serve ended: %v", err)
		default:
		}
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})

	if status, _, _ := get("http://"+addr+"/metrics", nil, http.MethodGet); status != http.StatusUnauthorized {
		t.Errorf("/metrics on --addr without the key: %d", status)
	}
	if status, _, body := get("http://"+addr+"/metrics", map[string]string{"Authorization": "Bearer sk-flags"}, http.MethodGet); status != 200 || !strings.Contains(body, "rill_prompt_tokens_total") {
		t.Errorf("/metrics on --addr with the key: %d", status)
	}
	if status, _, body := get("http://"+metricsAddr+"/metrics", nil, http.MethodGet); status != 200 || !strings.Contains(body, `rill_num_requests_running{model_name="rill-tiny"} 0`) {
		t.Errorf("/metrics on --metrics-addr: %d %.200s", status, body)
	}
	if status, _, _ := get("http://"+metricsAddr+"/v1/models", nil, http.MethodGet); status != http.StatusNotFound {
		t.Errorf("--metrics-addr serves the API: %d", status)
	}
	if status, h, body := get("http://"+addr+"/", nil, http.MethodGet); status != 200 || !strings.Contains(body, `data-testid="prompt"`) || h.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /: %d %v", status, h)
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
	preflight["Origin"] = "https://app.example.com"
	if status, h, _ := get("http://"+addr+"/v1/chat/completions", preflight, http.MethodOptions); status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("preflight from the allowed origin: %d %v", status, h)
	}
	preflight["Origin"] = "https://other.example.com"
	if status, h, _ := get("http://"+addr+"/v1/chat/completions", preflight, http.MethodOptions); status != http.StatusForbidden || h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from a foreign origin: %d %v", status, h)
	}
}

// TestServeOpsFlagErrors: bad values are refused at start.
func TestServeOpsFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cors-allowed-origins", "[bad"}, "--cors-allowed-origins"},
		{[]string{"--metrics-addr", "256.0.0.1:x"}, "--metrics-addr"},
		{[]string{"--log-format", "xml"}, "--log-format"},
	} {
		err := Serve(context.Background(), append(tc.args, "--addr", "127.0.0.1:0", "--log-level", "error"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %s", tc.args, err, tc.want)
		}
	}
}
