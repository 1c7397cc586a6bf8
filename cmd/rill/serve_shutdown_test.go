package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"rill/internal/wait"
)

// serveArgsEnv, when set, makes the test binary run `rill serve` with
// these arguments instead of the tests: the subprocess tests run the real
// command, signals and all, without building another binary.
const serveArgsEnv = "RILL_TEST_SERVE_ARGS"

// mainArgsEnv, when set, makes the test binary run rill with these
// arguments (any command) instead of the tests.
const mainArgsEnv = "RILL_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"rill"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	if args, ok := os.LookupEnv(serveArgsEnv); ok {
		os.Args = append([]string{"rill", "serve"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// lockedLog collects a subprocess's stderr.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// servedProcess is `rill serve` running in a subprocess.
type servedProcess struct {
	cmd  *exec.Cmd
	addr string
	log  *lockedLog
	// exited is closed when the process has exited, with its error in err.
	exited chan struct{}
	err    error
}

var listeningAddr = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServe runs `rill serve --addr 127.0.0.1:0 args...` and waits until
// it listens.
func startServe(t *testing.T, args ...string) *servedProcess {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with env (KEY=VALUE) added to the process's
// environment.
func startServeEnv(t *testing.T, env []string, args ...string) *servedProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveArgsEnv+"=--addr 127.0.0.1:0 "+strings.Join(args, " "))
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &servedProcess{cmd: cmd, log: &lockedLog{}, exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	lines := bufio.NewScanner(io.TeeReader(stderr, p.log))
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			if m := listeningAddr.FindStringSubmatch(lines.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, io.TeeReader(stderr, p.log))
		p.err = cmd.Wait()
		close(p.exited)
	}()
	select {
	case p.addr = <-found:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start:\n%s", p.log)
	}
	return p
}

// wsClient is one WebSocket connection of the shutdown test and what it
// read until the connection ended.
type wsClient struct {
	conn  *websocket.Conn
	mu    sync.Mutex
	msgs  []map[string]any
	err   error // how reading ended
	ended chan struct{}
}

func dialClient(t *testing.T, addr string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadLimit(-1)
	c := &wsClient{conn: conn, ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				return
			}
			var m map[string]any
			_ = json.Unmarshal(data, &m)
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *wsClient) send(t *testing.T, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// wait returns the first message that satisfies ok, waiting up to d.
func (c *wsClient) wait(d time.Duration, ok func(map[string]any) bool) map[string]any {
	var found map[string]any
	wait.Options{Bound: d, Interval: 5 * time.Millisecond}.Until(func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.msgs {
			if ok(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func terminal(id string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		return m["request_id"] == id && (m["type"] == "done" || m["type"] == "error")
	}
}

// TestServeShutdown: SIGTERM while WebSocket connections are idle and
// busy and an HTTP request holds the server's shutdown. New creates are
// refused with a 503 as soon as the signal arrives; requests still running
// when the grace period ends are cut with a 503 error message, logged as
// cut by the shutdown (no ERROR line); every connection gets the 1001
// close frame before the process exits, with status 0.
func TestServeShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rill serve in a subprocess")
	}
	t.Parallel()
	p := startServe(t, "--shutdown-grace", "1500ms", "--read-timeout", "4s", "--ws-allowed-origins", "x.example")

	var idle, busy []*wsClient
	for range 4 {
		idle = append(idle, dialClient(t, p.addr))
	}
	const long = `{"model":"rill-tiny","prompt":"The river","max_tokens":1900,"n":4,"ignore_eos":true,"temperature":0}`
	for i := range 4 {
		c := dialClient(t, p.addr)
		c.send(t, fmt.Sprintf(`{"type":"create","request_id":"busy%d","body":%s}`, i, long))
		busy = append(busy, c)
	}
	for i, c := range busy {
		if c.wait(30*time.Second, func(m map[string]any) bool { return m["type"] == "chunk" }) == nil {
			t.Fatalf("busy%d streams nothing", i)
		}
	}
	// A body that never arrives keeps the HTTP side of the shutdown busy
	// for the whole grace period.
	hold, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	fmt.Fprintf(hold, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\n{", p.addr)
	// A real sleep: nothing outside the process tells that it has read the
	// request's headers and is waiting for its body; this gives it the time.
	time.Sleep(100 * time.Millisecond)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining begins at once: a create is refused while HTTP still drains.
	late := idle[0]
	for i := 0; ; i++ {
		id := fmt.Sprintf("late%d", i)
		late.send(t, fmt.Sprintf(`{"type":"create","request_id":%q,"body":{"model":"rill-tiny","prompt":"x","max_tokens":2}}`, id))
		m := late.wait(10*time.Second, terminal(id))
		if m == nil {
			t.Fatalf("%s: no answer", id)
		}
		if m["type"] == "error" && m["status"] == float64(503) {
			break
		}
		if i == 20 {
			t.Fatalf("creates after SIGTERM are still served: %v", m)
		}
		// A real pause between tries: the signal reaches the process's
		// drain at a moment nothing outside it can observe.
		time.Sleep(20 * time.Millisecond)
	}

	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("serve exited with %v", p.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit:\n%s", p.log)
	}
	for i, c := range append(idle, busy...) {
		select {
		case <-c.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d still open after the process exited", i)
		}
		if status := websocket.CloseStatus(c.err); status != websocket.StatusGoingAway {
			t.Errorf("connection %d ended with %v (status %d), want 1001", i, c.err, status)
		}
	}
	cut := 0
	for i, c := range busy {
		m := c.wait(0, terminal(fmt.Sprintf("busy%d", i)))
		switch {
		case m == nil:
			t.Errorf("busy%d got no done or error before the close", i)
		case m["type"] == "error":
			if m["status"] != float64(503) {
				t.Errorf("busy%d: %v", i, m)
			}
			cut++
		}
	}
	log := p.log.String()
	if strings.Contains(log, "level=ERROR") {
		t.Errorf("errors logged at shutdown:\n%s", log)
	}
	if cut > 0 && !strings.Contains(log, "reason=shutdown") {
		t.Errorf("%d requests cut without a shutdown log line:\n%s", cut, log)
	}
	t.Logf("%d of %d busy requests cut by the shutdown", cut, len(busy))
}
