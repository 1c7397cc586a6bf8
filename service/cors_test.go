package service

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"rill/engine"
)

// TestCORS: preflights from an allowed origin get the methods and headers
// the API uses; a foreign origin gets a 403 without CORS headers. Actual
// requests from an allowed origin may read their answer (errors included)
// and X-Request-Id; the allowed origins may open a WebSocket too.
func TestCORS(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"hi"}, engine.FinishStop, plainStats(2, 1))}
	ts := newTestServer(t, fake, Options{APIKey: "sk-cors",
		CORSAllowedOrigins: []string{"*.example.com", "http://localhost:5173", "[bad"}})
	do := func(method, path, origin string, header map[string]string, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type,x-api-key,anthropic-version,x-stainless-os,bad header,x\"y"}

	for _, origin := range []string{"https://app.example.com", "http://localhost:5173"} {
		resp, _ := do(http.MethodOptions, "/v1/chat/completions", origin, preflight, "")
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != origin ||
			!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Content-Type") ||
			!strings.HasSuffix(h.Get("Access-Control-Allow-Headers"), ", x-api-key, anthropic-version, x-stainless-os") ||
			h.Get("Access-Control-Max-Age") == "" {
			t.Errorf("preflight from %s: %d %v", origin, resp.StatusCode, h)
		}
	}
	for _, origin := range []string{"https://evil.test", "https://example.com.evil.test", "https://localhost:5173", "null"} {
		resp, body := do(http.MethodOptions, "/v1/chat/completions", origin, preflight, "")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "origin_not_allowed") {
			t.Errorf("preflight from %s: %d %s", origin, resp.StatusCode, body)
		}
		for k := range resp.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("preflight from %s answered with %s", origin, k)
			}
		}
	}

	// Actual requests.
	chat := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	resp, body := do(http.MethodPost, "/v1/chat/completions", "https://app.example.com",
		map[string]string{"Authorization": "Bearer sk-cors", "Content-Type": "application/json"}, chat)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Ratelimit-Remaining-Tokens") {
		t.Errorf("allowed POST: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = do(http.MethodPost, "/v1/chat/completions", "https://app.example.com", nil, chat)
	if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("allowed POST without the key: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, _ = do(http.MethodGet, "/health", "https://evil.test", nil, "")
	if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("foreign origin got Access-Control-Allow-Origin %q", v)
	}
	// A plain OPTIONS (no preflight) is still a 405.
	resp, _ = do(http.MethodOptions, "/v1/chat/completions", "", map[string]string{"Authorization": "Bearer sk-cors"}, "")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("plain OPTIONS: %d", resp.StatusCode)
	}

	// WebSocket from a CORS origin, with the key as a subprotocol.
	c := dialWS(t, ts, "/v1/chat/completions", &websocket.DialOptions{
		HTTPHeader:   http.Header{"Origin": {"https://app.example.com"}},
		Subprotocols: []string{keyProtocolPrefix + "sk-cors"}})
	sendWS(t, c, createMsg("r1", chat))
	if m := nextNonChunk(t, c); m.Type != "done" {
		t.Errorf("websocket from a CORS origin: %+v", m)
	}
	c.CloseNow()
}
