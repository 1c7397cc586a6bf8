package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// lifecycleArgs start the processes the shutdown and kill cases own.
func lifecycleArgs(grace string, extra ...string) []string {
	return append([]string{"--addr", "127.0.0.1:0", "--read-timeout", "2s", "--write-idle-timeout", "3s",
		"--kv-cache-mem", "2MiB", "--shutdown-grace", grace}, extra...)
}

// closeWaitBound is how long rill may take after the grace period: its
// closeWait (10 s) bounds the close handshakes.
const closeWaitBound = 12 * time.Second

// logProblems returns the lines of log that are errors or panics: a clean
// shutdown logs neither (a request cut by it is a warning).
func logProblems(lines []string) []string {
	var bad []string
	for _, l := range lines {
		var m struct {
			Level string `json:"level"`
			// An access line's HTTP status is a number; other lines'
			// (a background response's end) are words.
			Status any `json:"status"`
		}
		if json.Unmarshal([]byte(l), &m) != nil {
			// Not the logger's: the runtime's panic output, or main's error.
			bad = append(bad, l)
			continue
		}
		if status, _ := m.Status.(float64); m.Level == "ERROR" || status >= 500 && status != 503 {
			bad = append(bad, l)
		}
	}
	return bad
}

// wsOutcome is how one request of a busy connection ended.
func requestEnds(c *wsClient) (ends map[string]string) {
	ends = map[string]string{}
	for m := range c.msgs {
		if m.Type == "chunk" || m.RequestID == nil {
			continue
		}
		switch m.Type {
		case "done":
			ends[m.id()] = "done"
		case "error":
			ends[m.id()] = fmt.Sprintf("%d %s", m.Status, m.code())
		}
	}
	return ends
}

// checkShutdownIdle: SIGTERM to a server with idle WebSocket connections
// and no request: it exits 0 at once, closing each with 1001.
func checkShutdownIdle(ctx context.Context, h *harness) (string, error) {
	srv, err := startChild(ctx, childOptions{bin: h.bin, args: lifecycleArgs("30s"), wantListen: true})
	if err != nil {
		return "", err
	}
	defer srv.kill()
	var clients []*wsClient
	for range 5 {
		c, err := dialWS(ctx, srv, "/v1/chat/completions", nil)
		if err != nil {
			return "", err
		}
		defer c.conn.CloseNow()
		clients = append(clients, c.listen(ctx))
	}
	start := time.Now()
	if err := srv.signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	code, err := srv.wait(30 * time.Second)
	took := time.Since(start)
	var fails []string
	if err != nil {
		fails = append(fails, err.Error())
	} else if code != 0 {
		fails = append(fails, fmt.Sprintf("exit status %d", code))
	}
	statuses := map[websocket.StatusCode]int{}
	for _, c := range clients {
		select {
		case <-c.ended:
		case <-time.After(5 * time.Second):
		}
		statuses[c.closeStatus]++
	}
	if statuses[websocket.StatusGoingAway] != len(clients) {
		fails = append(fails, fmt.Sprintf("close codes %v, want 1001 on all %d", statuses, len(clients)))
	}
	if bad := logProblems(srv.log()); len(bad) > 0 {
		fails = append(fails, "log: "+strings.Join(bad, "\n"))
	}
	figures := fmt.Sprintf("exit %d after %v; closes %v", code, took.Round(10*time.Millisecond), statuses)
	if took > 5*time.Second {
		fails = append(fails, fmt.Sprintf("exit took %v with nothing running", took.Round(10*time.Millisecond)))
	}
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// checkShutdownBusy: SIGTERM to a server with idle and busy WebSocket
// connections, a stalled one and SSE streams, with a 1 s grace. A create
// after the signal is refused with a 503; each request ends with done or
// a 503 server_shutting_down; every connection that reads gets 1001; the
// process exits 0 within grace + close wait, logging no error.
func checkShutdownBusy(ctx context.Context, h *harness) (string, error) {
	srv, err := startChild(ctx, childOptions{bin: h.bin, args: lifecycleArgs("1s"), wantListen: true})
	if err != nil {
		return "", err
	}
	defer srv.kill()
	client := &http.Client{}
	var idle, busy []*wsClient
	for range 3 {
		c, err := dialWS(ctx, srv, "/v1/chat/completions", nil)
		if err != nil {
			return "", err
		}
		defer c.conn.CloseNow()
		idle = append(idle, c.listen(ctx))
	}
	for i := range 3 {
		c, err := dialWS(ctx, srv, "/v1/chat/completions", nil)
		if err != nil {
			return "", err
		}
		defer c.conn.CloseNow()
		for r := range 2 {
			if err := c.send(ctx, create(fmt.Sprintf("b%d-%d", i, r), streamBody(1900))); err != nil {
				return "", err
			}
		}
		busy = append(busy, c.listen(ctx))
	}
	stalled, err := dialWS(ctx, srv, "/v1/chat/completions", smallBufferClient)
	if err != nil {
		return "", err
	}
	defer stalled.conn.CloseNow()
	if err := stalled.send(ctx, create("stall", stalledBody())); err != nil {
		return "", err
	}
	var sse []sseResult
	var sseMu sync.Mutex
	var wg sync.WaitGroup
	started := make(chan struct{}, 3)
	for range 3 {
		wg.Go(func() {
			r := streamSSE(ctx, client, srv, "/v1/chat/completions", streamBody(1900), func() { started <- struct{}{} })
			sseMu.Lock()
			sse = append(sse, r)
			sseMu.Unlock()
		})
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			return "", errors.New("the SSE streams did not start")
		}
	}
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	if err := srv.signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	// A create on an open connection after the signal.
	time.Sleep(100 * time.Millisecond)
	lateErr := idle[0].send(ctx, create("late", streamBody(4)))
	code, err := srv.wait(time.Second + closeWaitBound + 5*time.Second)
	took := time.Since(start)
	var fails []string
	if err != nil {
		fails = append(fails, err.Error())
	} else if code != 0 {
		fails = append(fails, fmt.Sprintf("exit status %d", code))
	}
	wg.Wait()

	statuses := map[websocket.StatusCode]int{}
	endCounts := map[string]int{}
	late := ""
	for _, c := range idle {
		for _, e := range requestEndsWithin(c, 5*time.Second) {
			late = e
		}
		statuses[c.closeStatus]++
	}
	for i, c := range busy {
		ends := requestEndsWithin(c, 5*time.Second)
		statuses[c.closeStatus]++
		for r := range 2 {
			e := ends[fmt.Sprintf("b%d-%d", i, r)]
			endCounts[e]++
			if e != "done" && e != "503 server_shutting_down" {
				fails = append(fails, fmt.Sprintf("request b%d-%d ended with %q", i, r, e))
			}
		}
	}
	if lateErr == nil && late != "503 server_shutting_down" {
		fails = append(fails, fmt.Sprintf("the create after SIGTERM got %q, want 503 server_shutting_down", late))
	}
	if n := statuses[websocket.StatusGoingAway]; n != len(idle)+len(busy) {
		fails = append(fails, fmt.Sprintf("close codes %v, want 1001 on all %d reading connections", statuses, len(idle)+len(busy)))
	}
	sseEnds := map[string]int{}
	for _, r := range sse {
		switch {
		case r.done && r.usage:
			sseEnds["done"]++
		case strings.Contains(r.errMsg, "server_shutting_down"):
			sseEnds["503 event"]++
		default:
			sseEnds["other"]++
			fails = append(fails, fmt.Sprintf("an SSE stream ended with %q (%v)", r.errMsg, r.err))
		}
	}
	if bad := logProblems(srv.log()); len(bad) > 0 {
		fails = append(fails, "log:\n"+strings.Join(bad, "\n"))
	}
	figures := fmt.Sprintf("exit %d after %v; WS closes %v; WS requests %v; SSE %v; late create %q", code,
		took.Round(10*time.Millisecond), statuses, endCounts, sseEnds, late)
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// requestEndsWithin collects the request ends of c until it ends, up to d.
func requestEndsWithin(c *wsClient, d time.Duration) map[string]string {
	done := make(chan map[string]string, 1)
	go func() { done <- requestEnds(c) }()
	select {
	case ends := <-done:
		return ends
	case <-time.After(d):
		_ = c.conn.CloseNow()
		return <-done
	}
}

// checkKill9: kill -9 a busy server. Its clients see their streams end
// at once (no hang), and a new server starts on the same address and
// serves.
func checkKill9(ctx context.Context, h *harness) (string, error) {
	srv, err := startChild(ctx, childOptions{bin: h.bin, args: lifecycleArgs("5s"), wantListen: true})
	if err != nil {
		return "", err
	}
	defer srv.kill()
	ws, err := dialWS(ctx, srv, "/v1/chat/completions", nil)
	if err != nil {
		return "", err
	}
	defer ws.conn.CloseNow()
	ws.listen(ctx)
	if err := ws.send(ctx, create("k", streamBody(1900))); err != nil {
		return "", err
	}
	started := make(chan struct{}, 1)
	sseDone := make(chan sseResult, 1)
	go func() {
		sseDone <- streamSSE(ctx, &http.Client{}, srv, "/v1/chat/completions", streamBody(1900), func() { started <- struct{}{} })
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		return "", errors.New("the stream did not start")
	}
	start := time.Now()
	if err := srv.signal(syscall.SIGKILL); err != nil {
		return "", err
	}
	var fails []string
	select {
	case r := <-sseDone:
		if r.done {
			fails = append(fails, "the SSE stream says [DONE] after kill -9")
		}
	case <-time.After(3 * time.Second):
		fails = append(fails, "the SSE stream still hangs 3 s after kill -9")
	}
	select {
	case <-ws.ended:
	case <-time.After(3 * time.Second):
		fails = append(fails, "the WebSocket still hangs 3 s after kill -9")
	}
	cut := time.Since(start)
	if code, err := srv.wait(5 * time.Second); err != nil || code != -1 {
		fails = append(fails, fmt.Sprintf("after kill -9: exit %d %v", code, err))
	}

	// The same address again.
	restart := time.Now()
	again, err := startChild(ctx, childOptions{bin: h.bin, args: append(lifecycleArgs("5s"), "--addr", srv.addr), wantListen: true})
	if err != nil {
		return "", fmt.Errorf("restart on %s: %w", srv.addr, err)
	}
	defer again.kill()
	up := time.Since(restart)
	if _, err := post(ctx, &http.Client{}, again, "/v1/chat/completions", chat(), http.StatusOK); err != nil {
		fails = append(fails, "after the restart: "+err.Error())
	}
	again.stop(20 * time.Second)
	if code := again.cmd.ProcessState.ExitCode(); code != 0 {
		fails = append(fails, fmt.Sprintf("the restarted server's SIGTERM exit status %d", code))
	}
	figures := fmt.Sprintf("clients cut within %v; restarted on %s in %v, served", cut.Round(10*time.Millisecond), srv.addr, up.Round(10*time.Millisecond))
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// logCheck is the last row: the shared server's log over every case holds
// no error line and no panic, and it shuts down cleanly (exit 0).
func logCheck(srv *child) outcome {
	o := outcome{name: "shared server: log and SIGTERM", expect: "no ERROR/5xx/panic line over the run; exit 0"}
	start := time.Now()
	srv.stop(30 * time.Second)
	o.took = time.Since(start)
	var fails []string
	if st := srv.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
		fails = append(fails, fmt.Sprintf("exit: %v", srv.cmd.ProcessState))
	}
	lines := srv.log()
	bad := logProblems(lines)
	if len(bad) > 0 {
		fails = append(fails, fmt.Sprintf("%d bad log lines, the first: %s", len(bad), strings.Join(bad[:min(5, len(bad))], "\n")))
	}
	o.figures = fmt.Sprintf("%d log lines, %d errors", len(lines), len(bad))
	if len(fails) > 0 {
		o.err = errors.New(strings.Join(fails, "\n"))
	}
	return o
}

// checkOverload sends 64 streams at once to a server that runs 4 and
// queues 4 (--max-seqs 4 --max-queued-requests 4): the rest are refused at
// once with a 503 engine_overloaded in OpenAI's shape and a Retry-After;
// every admitted stream completes with its usage. The log holds no error
// but the shed requests' (a 5xx logs at error, as documented).
func checkOverload(ctx context.Context, h *harness) (string, error) {
	srv, err := startChild(ctx, childOptions{bin: h.bin, args: lifecycleArgs("5s", "--max-seqs", "4", "--max-queued-requests", "4"), wantListen: true})
	if err != nil {
		return "", err
	}
	defer srv.kill()
	const streams = 64
	type result struct {
		status     int
		retryAfter string
		body       []byte
		sse        sseResult
	}
	results := make([]result, streams)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range streams {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.url("/v1/chat/completions"), bytes.NewReader(streamBody(200)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				results[i].sse.err = err
				return
			}
			defer resp.Body.Close()
			results[i].status, results[i].retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			if resp.StatusCode != http.StatusOK {
				results[i].body, _ = io.ReadAll(resp.Body)
				return
			}
			results[i].sse = readSSE(resp.Body, nil)
		})
	}
	wg.Wait()
	took := time.Since(start)
	var fails []string
	served, shed := 0, 0
	for i, r := range results {
		switch {
		case r.status == http.StatusOK && r.sse.done && r.sse.completionTokens == 200:
			served++
		case r.status == http.StatusServiceUnavailable && errorCode(r.body) == "engine_overloaded" && errorShape(r.body) == nil && r.retryAfter != "":
			shed++
		default:
			fails = append(fails, fmt.Sprintf("stream %d: status %d %s, %d tokens, %v", i, r.status, clipQ(r.body), r.sse.completionTokens, r.sse.err))
		}
	}
	srv.stop(20 * time.Second)
	var other []string
	for _, l := range logProblems(srv.log()) {
		if !strings.Contains(l, `"status":503`) {
			other = append(other, l)
		}
	}
	if len(other) > 0 {
		fails = append(fails, "log: "+strings.Join(other, "\n"))
	}
	figures := fmt.Sprintf("%d streams: %d served, %d shed with 503 + Retry-After, in %v", streams, served, shed, took.Round(10*time.Millisecond))
	if served < 8 || shed == 0 {
		fails = append(fails, fmt.Sprintf("%d served and %d shed: want at least the 8 the engine holds served, and some shed", served, shed))
	}
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(dedupe(fails), "\n"))
	}
	return figures, nil
}
