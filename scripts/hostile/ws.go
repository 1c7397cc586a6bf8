package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// wsMsg is a server message.
type wsMsg struct {
	Type      string          `json:"type"`
	RequestID *string         `json:"request_id"`
	Status    int             `json:"status"`
	Error     json.RawMessage `json:"error"`
}

func (m wsMsg) id() string {
	if m.RequestID == nil {
		return "<null>"
	}
	return *m.RequestID
}

func (m wsMsg) code() string {
	var e struct {
		Code *string `json:"code"`
	}
	if json.Unmarshal(m.Error, &e) != nil || e.Code == nil {
		return ""
	}
	return *e.Code
}

// wsClient is a connection whose messages a goroutine reads into msgs
// until it ends; closeStatus is the close code the server sent (-1: none).
type wsClient struct {
	conn        *websocket.Conn
	msgs        chan wsMsg
	ended       chan struct{}
	closeStatus websocket.StatusCode
	readErr     error
}

// smallBufferClient dials with a 64 KiB receive buffer, so that a stalled
// reader stalls the server after little output.
var smallBufferClient = &http.Client{Transport: &http.Transport{
	DialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}).DialContext,
}}

// dialWS opens a WebSocket on path of srv with its API key. The reader
// goroutine starts only with listen, so that a stalled client reads
// nothing at all.
func dialWS(ctx context.Context, srv *child, path string, client *http.Client) (*wsClient, error) {
	h := http.Header{}
	srv.auth(h)
	conn, _, err := websocket.Dial(ctx, srv.wsURL(path), &websocket.DialOptions{HTTPHeader: h, HTTPClient: client})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(64 << 20)
	return &wsClient{conn: conn, msgs: make(chan wsMsg, 1<<16), ended: make(chan struct{}), closeStatus: -1}, nil
}

// listen starts reading the server's messages into c.msgs.
func (c *wsClient) listen(ctx context.Context) *wsClient {
	go func() {
		defer close(c.ended)
		defer close(c.msgs)
		for {
			_, data, err := c.conn.Read(ctx)
			if err != nil {
				c.readErr = err
				c.closeStatus = websocket.CloseStatus(err)
				return
			}
			var m wsMsg
			if json.Unmarshal(data, &m) != nil {
				m.Type = "unparsable: " + clipQ(data)
			}
			c.msgs <- m
		}
	}()
	return c
}

func (c *wsClient) send(ctx context.Context, msg string) error {
	return c.conn.Write(ctx, websocket.MessageText, []byte(msg))
}

func create(id string, body []byte) string {
	return `{"type":"create","request_id":` + jsonString(id) + `,"body":` + string(body) + `}`
}

func cancelMsg(id string) string {
	return `{"type":"cancel","request_id":` + jsonString(id) + `}`
}

// next waits up to d for the next message that is not a chunk.
func (c *wsClient) next(d time.Duration) (wsMsg, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				return m, fmt.Errorf("connection ended (%v)", c.readErr)
			}
			if m.Type != "chunk" {
				return m, nil
			}
		case <-t.C:
			return wsMsg{}, fmt.Errorf("no message within %v", d)
		}
	}
}

// wsBad is one bad client message and the error it must get.
type wsBad struct {
	name   string
	msg    string
	binary bool
	status int    // wanted status
	id     string // wanted request_id, "" for null
}

func wsBadMessages() []wsBad {
	long := strings.Repeat("i", 300)
	return []wsBad{
		{"not JSON", `not json`, false, 400, ""},
		{"truncated JSON", `{"type":"create","request_id":"x"`, false, 400, ""},
		{"an array", `[]`, false, 400, ""},
		{"a string", `"create"`, false, 400, ""},
		{"a number", `42`, false, 400, ""},
		{"null", `null`, false, 400, ""},
		{"empty object", `{}`, false, 400, ""},
		{"type a number", `{"type":5,"request_id":"x"}`, false, 400, ""},
		{"unknown type", `{"type":"delete","request_id":"x"}`, false, 400, ""},
		{"1 MiB type", `{"type":"` + strings.Repeat("t", 1<<20) + `","request_id":"x"}`, false, 400, ""},
		{"no request_id", `{"type":"create","body":{}}`, false, 400, ""},
		{"request_id a number", `{"type":"create","request_id":5,"body":{}}`, false, 400, ""},
		{"empty request_id", `{"type":"create","request_id":"","body":{}}`, false, 400, ""},
		{"300-byte request_id", `{"type":"create","request_id":"` + long + `","body":{}}`, false, 400, ""},
		{"invalid UTF-8", "{\"type\":\"cr\xffeate\",\"request_id\":\"x\"}", false, 400, ""},
		{"binary garbage", "\x00\x01\x02\xff", true, 400, ""},
		{"cancel of an unknown id", cancelMsg("nope"), false, 404, ""},
		{"create without body", `{"type":"create","request_id":"b1"}`, false, 400, "b1"},
		{"body a number", `{"type":"create","request_id":"b2","body":5}`, false, 400, "b2"},
		{"empty body", `{"type":"create","request_id":"b3","body":{}}`, false, 400, "b3"},
		{"unknown model", create("b4", chat("model", `"nope"`)), false, 404, "b4"},
		{"65 deep", create("b5", chat("stop", nested(65))), false, 400, "b5"},
		{"max_tokens beyond the context", create("b6", chat("max_tokens", "5000")), false, 400, "b6"},
		{"n 129", create("b7", chat("n", "129")), false, 400, "b7"},
	}
}

// checkWSBadMessages sends each bad message on one connection and wants
// one error message for it, in OpenAI's shape with the right status and
// request_id; the connection stays open and serves a create at the end.
func checkWSBadMessages(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/chat/completions", nil)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	c.listen(ctx)
	var fails []string
	bad := wsBadMessages()
	for _, b := range bad {
		typ := websocket.MessageText
		if b.binary {
			typ = websocket.MessageBinary
		}
		if err := c.conn.Write(ctx, typ, []byte(b.msg)); err != nil {
			return "", fmt.Errorf("%s: write: %w", b.name, err)
		}
		m, err := c.next(10 * time.Second)
		if err != nil {
			return "", fmt.Errorf("%s: %w", b.name, err)
		}
		if f := judgeWSError(m, b.status, b.id); f != "" {
			fails = append(fails, b.name+": "+f)
		}
	}
	if err := c.send(ctx, create("ok", streamBody(8))); err != nil {
		return "", err
	}
	m, err := c.next(30 * time.Second)
	switch {
	case err != nil:
		fails = append(fails, "the create after them: "+err.Error())
	case m.Type != "done" || m.id() != "ok":
		fails = append(fails, fmt.Sprintf("the create after them ended with %s %s %d", m.Type, m.id(), m.Status))
	}
	figures := fmt.Sprintf("%d bad messages, each answered; the connection served on", len(bad))
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// judgeWSError says what is wrong with m as the error message of status
// for request_id id ("" for null), or "".
func judgeWSError(m wsMsg, status int, id string) string {
	wantID := id
	if wantID == "" {
		wantID = "<null>"
	}
	switch {
	case m.Type != "error":
		return fmt.Sprintf("got a %q message", m.Type)
	case m.Status != status:
		return fmt.Sprintf("status %d, want %d (%s)", m.Status, status, clipQ(m.Error))
	case m.id() != wantID:
		return fmt.Sprintf("request_id %s, want %s", m.id(), wantID)
	}
	if err := errorShape([]byte(`{"error":` + string(m.Error) + `}`)); err != nil {
		return err.Error()
	}
	if len(m.Error) > maxErrorBytes {
		return fmt.Sprintf("the error is %d bytes (echo not capped)", len(m.Error))
	}
	return ""
}

// checkWSOversized sends a 17 MiB message: a 413 with request_id null,
// the message skipped without being buffered, the connection open.
func checkWSOversized(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/chat/completions", nil)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	c.listen(ctx)
	before, _ := readProc(h.srv.pid())
	sampler := sampleRSS(h.srv.pid())
	big := create("big", chat("messages", `[{"role":"user","content":"`+strings.Repeat("a", 17<<20)+`"}]`))
	if err := c.send(ctx, big); err != nil {
		sampler.end()
		return "", err
	}
	m, err := c.next(20 * time.Second)
	growth := (sampler.end() - before.rssKB) / 1024
	figures := fmt.Sprintf("RSS +%d MiB while skipping it", growth)
	if err != nil {
		return figures, err
	}
	if f := judgeWSError(m, 413, ""); f != "" {
		return figures, errors.New(f)
	}
	if growth > 32 {
		return figures, fmt.Errorf("the server's RSS grew %d MiB: the message was buffered", growth)
	}
	if err := c.send(ctx, create("ok", streamBody(4))); err != nil {
		return figures, err
	}
	if m, err := c.next(30 * time.Second); err != nil || m.Type != "done" {
		return figures, fmt.Errorf("the create after it: %s %v", m.Type, err)
	}
	return figures, nil
}

// checkWSTooMany opens 33 long requests on one connection: the 33rd gets
// a 429, a duplicate id a 409, and cancelling the 32 ends each with a 499.
func checkWSTooMany(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/chat/completions", nil)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	c.listen(ctx)
	for i := range 33 {
		if err := c.send(ctx, create(fmt.Sprintf("r%d", i), streamBody(1900))); err != nil {
			return "", err
		}
	}
	if err := c.send(ctx, create("r0", streamBody(4))); err != nil {
		return "", err
	}
	var fails []string
	m, err := c.next(20 * time.Second)
	if err != nil {
		return "", err
	}
	if f := judgeWSError(m, 429, "r32"); f != "" {
		fails = append(fails, "the 33rd create: "+f)
	}
	if m, err = c.next(20 * time.Second); err != nil {
		return "", err
	}
	if f := judgeWSError(m, 409, ""); f != "" {
		fails = append(fails, "a duplicate id: "+f)
	}
	for i := range 32 {
		if err := c.send(ctx, cancelMsg(fmt.Sprintf("r%d", i))); err != nil {
			return "", err
		}
	}
	cancelled, other := 0, 0
	for range 32 {
		m, err := c.next(20 * time.Second)
		if err != nil {
			fails = append(fails, fmt.Sprintf("after %d cancelled: %v", cancelled, err))
			break
		}
		if m.Type == "error" && m.Status == 499 && m.code() == "request_cancelled" {
			cancelled++
		} else {
			other++
		}
	}
	figures := fmt.Sprintf("429 for the 33rd, 409 for a duplicate, %d cancelled (499), %d other ends", cancelled, other)
	if cancelled != 32 {
		fails = append(fails, fmt.Sprintf("%d of 32 requests ended cancelled", cancelled))
	}
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// checkWSCancelStorm sends, on each of 4 connections, 250 creates each
// followed at once by its cancel. Every create must end with exactly one
// done or error for its id; nothing may be left running.
func checkWSCancelStorm(ctx context.Context, h *harness) (string, error) {
	const conns, per = 4, 250
	var mu sync.Mutex
	var fails []string
	ends := map[string]int{}
	var wg sync.WaitGroup
	for ci := range conns {
		wg.Go(func() {
			fail := func(s string) {
				mu.Lock()
				fails = append(fails, fmt.Sprintf("conn %d: %s", ci, s))
				mu.Unlock()
			}
			c, err := dialWS(ctx, h.srv, "/v1/chat/completions", nil)
			if err != nil {
				fail(err.Error())
				return
			}
			defer c.conn.CloseNow()
			c.listen(ctx)
			go func() {
				for i := range per {
					id := fmt.Sprintf("c%d", i)
					if c.send(ctx, create(id, streamBody(200))) != nil || c.send(ctx, cancelMsg(id)) != nil {
						return
					}
				}
			}()
			ended := map[string]int{}
			deadline := time.After(60 * time.Second)
			for len(ended) < per {
				select {
				case m, ok := <-c.msgs:
					if !ok {
						fail(fmt.Sprintf("connection ended after %d ends: %v", len(ended), c.readErr))
						return
					}
					switch {
					case m.Type == "chunk":
					case m.RequestID == nil && m.Status == 404:
						// A cancel that crossed its request's end.
					case m.RequestID == nil:
						fail(fmt.Sprintf("unexpected %s %d %s", m.Type, m.Status, clipQ(m.Error)))
					default:
						ended[m.id()]++
						if ended[m.id()] > 1 {
							fail("two ends for " + m.id())
						}
						mu.Lock()
						ends[fmt.Sprintf("%s %d", m.Type, m.Status)]++
						mu.Unlock()
					}
				case <-deadline:
					fail(fmt.Sprintf("only %d of %d requests ended", len(ended), per))
					return
				}
			}
		})
	}
	wg.Wait()
	var parts []string
	for k, n := range ends {
		parts = append(parts, fmt.Sprintf("%d× %s", n, strings.TrimSuffix(k, " 0")))
	}
	figures := fmt.Sprintf("%d create+cancel pairs: %s", conns*per, strings.Join(parts, ", "))
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(dedupe(fails), "\n"))
	}
	return figures, nil
}

// checkWSStalled is defect 2 over WebSocket: the client starts 128
// choices × 1,900 tokens with 20 top logprobs and reads nothing. The
// engine must pause, and --write-idle-timeout must drop the connection
// and free everything.
func checkWSStalled(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/chat/completions", smallBufferClient)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	if err := c.send(ctx, create("stall", stalledBody())); err != nil {
		return "", err
	}
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
		return figures, fmt.Errorf("the stalled connection's request was not ended: %w", err)
	}
	if _, err := serverLetGo(h, 10*time.Second); err != nil {
		return figures, err
	}
	figures += fmt.Sprintf(", connection dropped within %v", time.Since(start).Round(100*time.Millisecond))
	return figures, nil
}

// checkWSFlood sends bad messages as fast as it can and reads nothing:
// the server's answers pile up, its queue of them fills, it stops reading
// the flood, and --write-idle-timeout drops the connection, in bounded
// memory. Now and then (about 1 run in 10) the client's own write stays
// blocked long after: both ends' TCP lost segments on loopback and back
// off (seen with ss: cwnd 1, retransmission timeouts of seconds, the
// client probing a zero window), and the client learns of the server's
// close only at its next probe. What counts is the server's side: the
// connection gone from it, within the write idle timeout or, should its
// writes never block, its ping timeout (two ping intervals, 30 s).
func checkWSFlood(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/chat/completions", smallBufferClient)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	before, _ := readProc(h.srv.pid())
	sampler := sampleRSS(h.srv.pid())
	start := time.Now()
	const most = 2_000_000
	sent := 0
	var werr error
	var blocked bool
	for ; sent < most; sent++ {
		wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		werr = c.send(wctx, `{"type":"bogus","request_id":"x"}`)
		blocked = wctx.Err() != nil
		cancel()
		if werr != nil {
			break
		}
	}
	growth := (sampler.end() - before.rssKB) / 1024
	figures := fmt.Sprintf("%d messages sent before the server stopped reading, RSS +%d MiB", sent, growth)
	if werr == nil {
		return figures, fmt.Errorf("the server read all %d messages of a client that reads nothing", most)
	}
	if _, err := serverLetGo(h, 2*15*time.Second+5*time.Second); err != nil {
		return figures, fmt.Errorf("the server stopped reading but kept the connection past its ping timeout: %w", err)
	}
	figures += fmt.Sprintf(", dropped within %v", time.Since(start).Round(100*time.Millisecond))
	if blocked {
		figures += " (the client's write stayed blocked: its TCP backs off)"
	}
	if growth > 64 {
		return figures, fmt.Errorf("RSS grew %d MiB", growth)
	}
	return figures, nil
}

// checkWSDisconnectStorm opens 100 connections with 2 long requests each,
// waits until the engine holds all 200 (running or queued; a queued
// request sends nothing yet), and drops every connection at once.
func checkWSDisconnectStorm(ctx context.Context, h *harness) (string, error) {
	const conns = 100
	clients := make([]*wsClient, conns)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	body := completion("stream", "true", "max_tokens", "1500", "ignore_eos", "true")
	for i := range conns {
		wg.Go(func() {
			c, err := dialWS(ctx, h.srv, "/v1/completions", nil)
			if err == nil {
				c.listen(ctx)
				err = c.send(ctx, create("a", body))
			}
			if err == nil {
				err = c.send(ctx, create("b", body))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, err.Error())
			}
			clients[i] = c
		})
	}
	wg.Wait()
	var st serverStat
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if st, err = h.srv.scrape(ctx); err != nil {
			return "", err
		}
		if st.running+st.waiting >= 2*conns || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range clients {
		if c != nil {
			_ = c.conn.CloseNow()
		}
	}
	figures := fmt.Sprintf("%d connections, %d running + %d waiting at the storm (KV %.0f%%)", conns, st.running, st.waiting, 100*st.kvUsage)
	if st.running+st.waiting < 2*conns {
		fails = append(fails, fmt.Sprintf("only %d of %d requests admitted after 30 s", st.running+st.waiting, 2*conns))
	}
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(dedupe(fails), "\n"))
	}
	return figures, nil
}

// checkWSResponses is the Responses API's WebSocket mode under abuse: bad
// messages each get one error event in OpenAI's shape (status 4xx), a
// 33rd queued response a 429, and closing the connection with 32 queued
// and one running leaves nothing behind.
func checkWSResponses(ctx context.Context, h *harness) (string, error) {
	c, err := dialWS(ctx, h.srv, "/v1/responses", nil)
	if err != nil {
		return "", err
	}
	defer c.conn.CloseNow()
	c.listen(ctx)
	bad := []struct {
		name, msg string
		status    int
	}{
		{"not JSON", `not json`, 400},
		{"an array", `[]`, 400},
		{"no type", `{"model":"rill-tiny","input":"hi"}`, 400},
		{"unknown type", `{"type":"response.bogus"}`, 400},
		{"chat's create", `{"type":"create","request_id":"x","body":{}}`, 400},
		{"input a number", `{"type":"response.create","model":"rill-tiny","input":5}`, 400},
		{"background", `{"type":"response.create","model":"rill-tiny","input":"hi","background":true}`, 400},
		{"unknown model", `{"type":"response.create","model":"nope","input":"hi"}`, 404},
		{"bad stream_id", `{"type":"response.create","model":"rill-tiny","input":"hi","stream_id":"` + strings.Repeat("s", 300) + `"}`, 400},
		{"cancel of nothing", `{"type":"response.cancel"}`, 404},
	}
	var fails []string
	for _, b := range bad {
		if err := c.send(ctx, b.msg); err != nil {
			return "", err
		}
		m, err := c.nextEvent(10 * time.Second)
		if err != nil {
			return "", fmt.Errorf("%s: %w", b.name, err)
		}
		if m.Type != "error" || m.Status != b.status {
			fails = append(fails, fmt.Sprintf("%s: a %q event of status %d, want an error of %d", b.name, m.Type, m.Status, b.status))
			continue
		}
		if err := errorShape([]byte(`{"error":` + string(m.Error) + `}`)); err != nil {
			fails = append(fails, b.name+": "+err.Error())
		}
	}
	long := `{"type":"response.create","model":"rill-tiny","input":"hi","max_output_tokens":1900,"ignore_eos":true}`
	for range 33 {
		if err := c.send(ctx, long); err != nil {
			return "", err
		}
	}
	got429 := false
	deadline := time.After(30 * time.Second)
	for !got429 {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				return "", fmt.Errorf("the connection ended: %v", c.readErr)
			}
			if m.Type == "error" {
				if m.Status != 429 {
					fails = append(fails, fmt.Sprintf("an error of status %d among the 33 creates: %s", m.Status, clipQ(m.Error)))
				}
				got429 = true
			}
		case <-deadline:
			return "", errors.New("no 429 for the 33rd queued response within 30 s")
		}
	}
	st, _ := waitBusy(ctx, h, 10*time.Second)
	_ = c.conn.CloseNow()
	figures := fmt.Sprintf("%d bad messages answered; 429 for the 33rd; closed with %d running", len(bad), st.running)
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// nextEvent waits up to d for the next Responses event that is not an
// output delta or a lifecycle event.
func (c *wsClient) nextEvent(d time.Duration) (wsMsg, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				return m, fmt.Errorf("connection ended (%v)", c.readErr)
			}
			if m.Type == "error" || !strings.HasPrefix(m.Type, "response.") {
				return m, nil
			}
		case <-t.C:
			return wsMsg{}, fmt.Errorf("no message within %v", d)
		}
	}
}
