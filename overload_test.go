package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/service"
)

// overloadTokens is how long each stream of TestOverloadSheds is: long
// enough that the admitted streams still run when the last request of the
// burst arrives.
const overloadTokens = 1000

// TestOverloadSheds sends 64 concurrent long streams over loopback HTTP to
// rill started with --max-seqs 4 --max-queued-requests 4: the engine takes
// what it can run and queue, the rest is shed at once with a 503 in
// OpenAI's error shape, code engine_overloaded, and a Retry-After header;
// every admitted stream runs to its end with its usage. Nothing else
// happens. A WebSocket request arriving meanwhile is refused the same way,
// with an error message of status 503 for its request_id.
func TestOverloadSheds(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, "--max-seqs", "4", "--max-queued-requests", "4")
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}

	const streams = 64
	outcomes := make([]string, streams)
	shed := make(chan struct{}, streams)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			<-start
			outcomes[i] = overloadStream(client, ts.URL, i, shed)
		})
	}
	close(start)

	// While the admitted streams run, a WebSocket request is shed as well.
	select {
	case <-shed:
	case <-time.After(30 * time.Second):
		t.Fatal("no request was shed")
	}
	wsOutcome := overloadWS(ts.URL)
	wg.Wait()

	admitted, refused := 0, 0
	for i, o := range outcomes {
		switch o {
		case "done":
			admitted++
		case "503":
			refused++
		default:
			t.Errorf("stream %d: %s", i, o)
		}
	}
	t.Logf("%d streams: %d admitted and completed, %d shed with 503", streams, admitted, refused)
	if refused == 0 || admitted < 8 {
		t.Errorf("%d admitted, %d shed: want the 4 running and 4 queued admitted, the rest shed", admitted, refused)
	}
	if wsOutcome != "503" {
		t.Errorf("WebSocket request while full: %s", wsOutcome)
	}
}

// overloadStream posts one streamed completion and says how it went:
// "done" (complete, with its usage), "503" (shed as OpenAI would), or what
// was wrong.
func overloadStream(client *http.Client, url string, i int, shed chan<- struct{}) string {
	body := fmt.Sprintf(`{"model":"rill-tiny","prompt":"The fox %d","max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, i, overloadTokens)
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		if resp.Header.Get("Retry-After") == "" {
			return "503 without Retry-After"
		}
		data, _ := io.ReadAll(resp.Body)
		if why := checkOverloaded(data); why != "" {
			return "503 body " + why
		}
		shed <- struct{}{}
		return "503"
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("status %d: %s", resp.StatusCode, data)
	}
	completion := -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			if completion != overloadTokens {
				return fmt.Sprintf("done with usage completion_tokens %d", completion)
			}
			return "done"
		}
		var chunk struct {
			Error *json.RawMessage `json:"error"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return fmt.Sprintf("chunk %q: %v", data, err)
		}
		if chunk.Error != nil {
			return "error mid-stream: " + string(*chunk.Error)
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	return "stream ended without [DONE]"
}

// checkOverloaded checks an error object in OpenAI's shape with code
// engine_overloaded and returns what is wrong with it ("" if nothing).
func checkOverloaded(data []byte) string {
	var body struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return fmt.Sprintf("%q: %v", data, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := body.Error[k]; !ok {
			return fmt.Sprintf("%s lacks %q", data, k)
		}
	}
	if string(body.Error["code"]) != `"engine_overloaded"` || string(body.Error["type"]) != `"server_error"` {
		return string(data)
	}
	return ""
}

// overloadWS creates one request over a WebSocket and says how it ended.
func overloadWS(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/v1/completions", nil)
	if err != nil {
		return err.Error()
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	create := fmt.Sprintf(`{"type":"create","request_id":"ws1","body":{"model":"rill-tiny","prompt":"The websocket fox","max_tokens":%d,"ignore_eos":true}}`, overloadTokens)
	if err := c.Write(ctx, websocket.MessageText, []byte(create)); err != nil {
		return err.Error()
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return err.Error()
		}
		var msg struct {
			Type      string          `json:"type"`
			RequestID string          `json:"request_id"`
			Status    int             `json:"status"`
			Error     json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &msg); err != nil {
			return err.Error()
		}
		switch msg.Type {
		case "done":
			return "admitted (the engine had room)"
		case "error":
			if msg.RequestID != "ws1" || msg.Status != http.StatusServiceUnavailable {
				return string(data)
			}
			if why := checkOverloaded(append(append([]byte(`{"error":`), msg.Error...), '}')); why != "" {
				return why
			}
			return "503"
		}
	}
}
