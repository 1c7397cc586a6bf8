package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"rill/engine"
	"rill/internal/wait"
)

// TestLogLevel: a 5xx is an error unless it is an expected end (a shutdown
// cut, a request shed by admission control), which is a warning.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		reason string
		want   slog.Level
	}{
		{http.StatusOK, "", slog.LevelInfo},
		{http.StatusBadRequest, "", slog.LevelInfo},
		{statusClientClosed, reasonWriteIdle, slog.LevelInfo},
		{http.StatusInternalServerError, "", slog.LevelError},
		{http.StatusBadGateway, "", slog.LevelError},
		{http.StatusServiceUnavailable, reasonShutdown, slog.LevelWarn},
		{http.StatusServiceUnavailable, reasonOverloaded, slog.LevelWarn},
		{http.StatusServiceUnavailable, reasonUnloaded, slog.LevelWarn},
	} {
		if got := logLevel(c.status, c.reason); got != c.want {
			t.Errorf("logLevel(%d, %q) = %v, want %v", c.status, c.reason, got, c.want)
		}
	}
}

// TestOverloadLogsWarning: a request shed with a 503 engine_overloaded is
// logged as a warning with its reason, over HTTP and WebSocket alike.
func TestOverloadLogsWarning(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	fake := &fakeEngine{respond: func(context.Context, *engine.Request) (engine.Stream, error) {
		return nil, engine.ErrOverloaded
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
	if resp, got := post(t, ts.Client(), ts.URL+"/v1/chat/completions", body); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("r1", body))
	if _, data, err := c.Read(context.Background()); err != nil || !strings.Contains(string(data), `"status":503`) {
		t.Fatalf("WebSocket answer %s, %v", data, err)
	}
	_ = c.CloseNow()
	shed := func(line, transport string) bool {
		return strings.Contains(line, "msg=request") && strings.Contains(line, transport) && strings.Contains(line, "status=503")
	}
	// The WebSocket request's line is written as its handler ends, which
	// may come just after its error message. Whether it came is checked
	// below, with the lines.
	wait.Until(func() bool {
		return slices.ContainsFunc(strings.Split(logs.String(), "\n"), func(l string) bool { return shed(l, "transport=websocket") })
	})
	for _, transport := range []string{"transport=http", "transport=websocket"} {
		found := false
		for _, line := range strings.Split(logs.String(), "\n") {
			if shed(line, transport) {
				found = true
				if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "reason=overloaded") {
					t.Errorf("shed request logged as %q, want level WARN with reason=overloaded", line)
				}
			}
		}
		if !found {
			t.Errorf("no access line for the shed %s request in:\n%s", transport, logs.String())
		}
	}
}

// TestModelUnloadedIsRetryable: a request whose model a catalogue unloaded
// before it finished (its stream ends with engine.ErrModelUnloaded) is told
// so, a 503 model_unloaded to retry, before the headers or as the stream's
// error event, and is logged as that, not as a client's cancel (499).
func TestModelUnloadedIsRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body string
	}{
		{"streamed", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"non-streamed", "/v1/completions", `{"model":"tiny","prompt":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "a"}},
					err: fmt.Errorf("%w: model %q was unloaded before the request finished", engine.ErrModelUnloaded, req.Model)}, nil
			}}
			ts := newTestServer(t, fake, Options{PingInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			resp, data := post(t, ts.Client(), ts.URL+tc.path, tc.body)
			errBody := data
			if tc.name == "streamed" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, data)
				}
				evs := parseSSE(t, data)
				errBody = evs[len(evs)-1].data
			} else {
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
					t.Errorf("status %d, Retry-After %q: want 503, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}
			mustValidate(t, "ErrorResponse", errBody)
			e := decodeMap(t, errBody)["error"].(map[string]any)
			if e["code"] != codeModelUnloaded || e["type"] != "server_error" || !strings.Contains(e["message"].(string), "'tiny' was unloaded") {
				t.Errorf("error %s, want a server_error model_unloaded naming the model", errBody)
			}
			var line string
			wait.Until(func() bool {
				i := slices.IndexFunc(strings.Split(logs.String(), "\n"), func(l string) bool { return strings.Contains(l, "msg=request") })
				if i >= 0 {
					line = strings.Split(logs.String(), "\n")[i]
				}
				return i >= 0
			})
			if !strings.Contains(line, "status=503") || !strings.Contains(line, "reason=model_unloaded") || !strings.Contains(line, "level=WARN") {
				t.Errorf("access line %q, want status=503 reason=model_unloaded at WARN", line)
			}
		})
	}
}
