package e2e

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
// happens. WebSocket requests arriving with the burst are refused the same
// way, with an error message of status 503 for their request_id.
func TestOverloadSheds(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, "--max-seqs", "4", "--max-queued-requests", "4")
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	const streams = 64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: streams}}

	// The burst's connections and the WebSocket are open before it starts,
	// so that on a loaded machine its requests still arrive together, while
	// the first admitted streams run.
	warmConnections(t, client, ts.URL, streams)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)

	outcomes := make([]string, streams)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			<-start
			outcomes[i] = overloadStream(client, ts.URL, i)
		})
	}
	const wsRequests = 16
	var wsRefused int
	var wsProblem string
	wg.Go(func() {
		<-start
		wsRefused, wsProblem = overloadWS(ctx, ws, wsRequests)
	})
	close(start)
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
	t.Logf("%d streams: %d admitted and completed, %d shed with 503; %d WebSocket requests with them: %d shed",
		streams, admitted, refused, wsRequests, wsRefused)
	if wsProblem != "" {
		t.Errorf("WebSocket requests: %s", wsProblem)
	}
	// Which requests are shed depends on the order they arrive in, and a
	// request admitted after an earlier one ended is right; but the burst
	// arrives within the first streams' time, so most are shed, on both
	// transports. (A paused stream counts as queued: readers falling
	// behind do not open the door.)
	if refused < streams/2 || wsRefused == 0 {
		t.Errorf("%d of %d HTTP and %d of %d WebSocket requests shed: want those beyond the 4 running and 4 queued shed",
			refused, streams, wsRefused, wsRequests)
	}
}

// warmConnections opens n keep-alive connections of client to url, each
// left idle in its pool.
func warmConnections(t *testing.T, client *http.Client, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			resp, err := client.Get(url + "/v1/models")
			if err != nil {
				errs <- err
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// overloadStream posts one streamed completion and says how it went:
// "done" (complete, with its usage), "503" (shed as OpenAI would), or what
// was wrong.
func overloadStream(client *http.Client, url string, i int) string {
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

// overloadWS creates n requests over the WebSocket c at once and reads
// until each has ended: how many were refused with a 503 in OpenAI's
// shape, and what else was wrong ("" if nothing). An admitted request is
// cancelled at its first chunk. Sent with the burst, most are refused;
// one at a time after it, a request could miss the moment the engine is
// full on a loaded machine.
func overloadWS(ctx context.Context, c *websocket.Conn, n int) (int, string) {
	for i := range n {
		create := fmt.Sprintf(`{"type":"create","request_id":"ws%d","body":{"model":"rill-tiny","prompt":"The websocket fox","max_tokens":%d,"ignore_eos":true}}`, i, overloadTokens)
		if err := c.Write(ctx, websocket.MessageText, []byte(create)); err != nil {
			return 0, err.Error()
		}
	}
	refused, cancelled := 0, map[string]bool{}
	for ended := 0; ended < n; {
		_, data, err := c.Read(ctx)
		if err != nil {
			return refused, err.Error()
		}
		var msg struct {
			Type      string          `json:"type"`
			RequestID string          `json:"request_id"`
			Status    int             `json:"status"`
			Error     json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &msg); err != nil {
			return refused, err.Error()
		}
		switch {
		case msg.Type == "chunk" && !cancelled[msg.RequestID]:
			cancelled[msg.RequestID] = true
			cancel := fmt.Sprintf(`{"type":"cancel","request_id":%q}`, msg.RequestID)
			if err := c.Write(ctx, websocket.MessageText, []byte(cancel)); err != nil {
				return refused, err.Error()
			}
		case msg.Type == "done":
			ended++
		case msg.Type == "error" && msg.Status == http.StatusServiceUnavailable:
			if why := checkOverloaded(append(append([]byte(`{"error":`), msg.Error...), '}')); why != "" {
				return refused, why
			}
			refused++
			ended++
		case msg.Type == "error" && cancelled[msg.RequestID]:
			ended++ // the cancel's 499
		case msg.Type == "error":
			return refused, string(data)
		}
	}
	return refused, ""
}
