package service

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
)

// The browser policy (origin.go): pages on other origins, and pages that
// reach a loopback server under another name (DNS rebinding), are refused
// on every path and transport; clients without an Origin are not affected.

// TestBrowserPolicy sends plain requests and WebSocket handshakes with the
// Host and Origin a browser would send.
func TestBrowserPolicy(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	open := newTestServer(t, fake, Options{PingInterval: -1, AllowedOrigins: []string{"https://app.example.com"}})
	local := newTestServer(t, fake, Options{PingInterval: -1, HostCheck: true,
		AllowedHosts: []string{"rill.internal", "*.lan"}, AllowedOrigins: []string{"https://app.example.com"}})
	port := func(ts *httptest.Server) string { return ts.URL[strings.LastIndexByte(ts.URL, ':'):] }
	const chat = `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`

	tests := []struct {
		name        string
		ts          *httptest.Server
		host        string // "" : the listener's address
		origin      string // "SELF": scheme://host of the request
		contentType string
		code        string // "": served; else the 403's code
	}{
		{"no origin, JSON", open, "", "", "application/json", ""},
		{"no origin, text/plain", open, "", "", "text/plain", ""},
		{"cross-site text/plain (a simple request)", open, "", "https://evil.example", "text/plain", "origin_not_allowed"},
		{"cross-site JSON", open, "", "https://evil.example", "application/json", "origin_not_allowed"},
		{"opaque origin", open, "", "null", "text/plain", "origin_not_allowed"},
		{"own origin", open, "", "SELF", "text/plain", ""},
		{"allowed origin", open, "", "https://app.example.com", "application/json", ""},
		{"allowed origin, other scheme", open, "", "http://app.example.com", "application/json", "origin_not_allowed"},
		{"no host check: any host", open, "evil.example", "", "application/json", ""},
		{"no host check: rebinding looks same-origin", open, "evil.example:1", "http://evil.example:1", "application/json", ""},

		{"loopback IP", local, "127.0.0.1", "", "application/json", ""},
		{"loopback IPv6", local, "[::1]", "", "application/json", ""},
		{"localhost", local, "localhost", "SELF", "application/json", ""},
		{"name under .localhost", local, "rill.localhost", "SELF", "application/json", ""},
		{"allowed host", local, "rill.internal", "SELF", "application/json", ""},
		{"allowed host pattern", local, "box.lan", "", "application/json", ""},
		{"DNS rebinding", local, "evil.example", "SELF", "application/json", "host_not_allowed"},
		{"DNS rebinding, no origin", local, "evil.example", "", "application/json", "host_not_allowed"},
		{"other IP", local, "10.0.0.1", "", "application/json", "host_not_allowed"},
		{"cross-site to localhost", local, "localhost", "https://evil.example", "text/plain", "origin_not_allowed"},
		{"allowed origin to localhost", local, "localhost", "https://app.example.com", "application/json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := tt.host
			switch host {
			case "":
				host = tt.ts.Listener.Addr().String()
			default:
				if !strings.Contains(host, ":") || strings.HasSuffix(host, "]") {
					host += port(tt.ts)
				}
			}
			origin := tt.origin
			if origin == "SELF" {
				origin = "http://" + host
			}

			// A POST.
			req, _ := http.NewRequest("POST", tt.ts.URL+"/v1/chat/completions", strings.NewReader(chat))
			req.Host = host
			req.Header.Set("Content-Type", tt.contentType)
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			resp, err := tt.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.code == "" {
				if resp.StatusCode != 200 {
					t.Fatalf("POST: status %d: %s", resp.StatusCode, body)
				}
			} else {
				if resp.StatusCode != 403 || !strings.Contains(string(body), `"code":"`+tt.code+`"`) {
					t.Fatalf("POST: status %d, want 403 %s: %s", resp.StatusCode, tt.code, body)
				}
				mustValidate(t, "ErrorResponse", body)
			}
			// A WebSocket handshake, the same way.
			h := http.Header{}
			if origin != "" {
				h.Set("Origin", origin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, wsResp, err := websocket.Dial(ctx, wsURL(tt.ts, "/v1/chat/completions"),
				&websocket.DialOptions{Host: host, HTTPHeader: h})
			if tt.code == "" {
				if err != nil {
					t.Fatalf("upgrade: %v", err)
				}
				_ = c.CloseNow()
				return
			}
			if err == nil {
				_ = c.CloseNow()
				t.Fatal("upgrade succeeded")
			}
			if wsResp == nil || wsResp.StatusCode != 403 {
				t.Fatalf("upgrade: %v, want 403", err)
			}
		})
	}
}

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	p := &browserPolicy{hostCheck: true, hosts: []string{"rill.internal", "*.lan"}}
	tests := []struct {
		host string
		ok   bool
	}{
		{"localhost:8080", true},
		{"LOCALHOST", true},
		{"localhost.:8080", true},
		{"a.b.localhost:1", true},
		{"127.0.0.1:8080", true},
		{"127.1.2.3", true},
		{"[::1]:8080", true},
		{"[::ffff:127.0.0.1]:80", true},
		{"rill.internal:8080", true},
		{"x.lan", true},
		{"", false},
		{":8080", false},
		{"evil.example:8080", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.nip.io", false},
		{"192.168.1.2:8080", false},
		{"[::2]:8080", false},
	}
	for _, tt := range tests {
		if got := p.hostAllowed(tt.host); got != tt.ok {
			t.Errorf("hostAllowed(%q) = %v", tt.host, got)
		}
	}
	if !(&browserPolicy{}).hostAllowed("anything") {
		t.Error("the Host check is off by default")
	}
}
