// Command idlestreams measures what idle streams cost rill's server: it
// runs the service in a child process over an engine that never produces a
// token, opens N streams against it over loopback (SSE requests, or
// WebSocket connections with one request each: chat's, the Messages
// API's, the Responses API's, a resumable chat stream's), waits until
// every one is running (and SSE streams have detached), and reports the child's RSS growth, its live heap
// and stacks (after collections) and goroutines per stream; then it closes
// them and checks that the goroutines go back to where they were. The
// goal: 10,000 idle streams under 1 GB (10 KB each, 100,000 in 1 GB).
//
//	go run ./scripts/idlestreams -n 10000 -transport sse
//	go run ./scripts/idlestreams -n 10000 -transport messages-sse
//	go run ./scripts/idlestreams -n 10000 -transport responses-sse
//	go run ./scripts/idlestreams -n 10000 -transport resumable-sse
//	go run ./scripts/idlestreams -n 10000 -transport background-sse
//	go run ./scripts/idlestreams -n 10000 -transport websocket
//	go run ./scripts/idlestreams -n 10000 -transport messages-websocket
//	go run ./scripts/idlestreams -n 10000 -transport responses-websocket
//	go run ./scripts/idlestreams -n 10000 -transport resumable-websocket
//	go run ./scripts/idlestreams -n 10000 -transport keepalive
//
// keepalive is no stream: an HTTP/1.1 connection that made one request
// and idles between requests, as an SSE client's does.
//
// The child serves as rill serve does: idle connections in an epoll set
// (internal/park); -park=false gives each its goroutine, as before.
// -heapprofile writes the child's heap profile while the streams idle
// (-memprofilerate 1 to count every allocation).
//
// Each stream holds one descriptor in each process; the script raises its
// file limit to the hard limit (the child inherits it) and says so when
// that is too low.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"rill/engine"
	"rill/internal/park"
	"rill/service"
)

func main() {
	n := flag.Int("n", 10000, "idle streams to open")
	transport := flag.String("transport", "sse", "sse, messages-sse, responses-sse, resumable-sse, background-sse, websocket, messages-websocket, responses-websocket, resumable-websocket or keepalive")
	parallel := flag.Int("parallel", 64, "streams opened at once")
	rate := flag.Float64("rate", 0, "streams opened per second at most (0: as fast as they open)")
	heapProfile := flag.String("heapprofile", "", "write the server's heap profile (in use, sampled every -memprofilerate bytes) to this file while the streams idle")
	memRate := flag.Int("memprofilerate", 512<<10, "the server's runtime.MemProfileRate (1: every allocation)")
	parkConns := flag.Bool("park", true, "keep idle connections in an epoll set, as rill serve does (false: a goroutine each)")
	serveChild := flag.Bool("serve", false, "internal: run the server (the child process)")
	flag.Parse()
	if err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "idlestreams:", err)
	}
	var err error
	if *serveChild {
		runtime.MemProfileRate = *memRate
		err = serve(*parkConns)
	} else {
		err = measure(*n, *transport, *parallel, *rate, *parkConns, *heapProfile, *memRate)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idlestreams:", err)
		os.Exit(1)
	}
}

// raiseFileLimit sets the soft limit on open files to the hard one.
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

func fileLimit() uint64 {
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

// neverEngine serves one model whose requests produce nothing until they
// are cancelled: every stream stays idle.
type neverEngine struct{}

// started counts the engine requests the child started, for the parent
// (/started): an SSE stream that may detach sends nothing, not even its
// header, until it detaches, a second after its start.
var started atomic.Int64

func (neverEngine) Models() []engine.ModelCard { return []engine.ModelCard{{ID: "idle"}} }

func (neverEngine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model != "idle" {
		return nil, engine.ErrUnknownModel
	}
	// A stream that stays empty and ends when its request does.
	started.Add(1)
	q := engine.NewQueue(0, nil)
	context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
	return q, nil
}

// serve is the child: the service with its defaults on 127.0.0.1, plus
// /goroutines for the parent. It prints its address and serves until its
// stdin closes.
func serve(parkConns bool) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// WebSocket connections served apart from their handshakes, as rill
	// serve serves them (the child never shuts down gracefully).
	// A resumable stream's generation runs on for the grace period after
	// its client left: a short one, so that the goroutines are back where
	// they were soon after the streams closed.
	// Idle connections in an epoll set, as rill serve keeps them (-park).
	var poller *park.Poller
	var connState func(net.Conn, http.ConnState)
	if parkConns {
		if poller, err = park.NewPoller(); err != nil {
			return err
		}
		defer poller.Close()
		pl := park.NewListener(ln, poller, park.ListenerOptions{})
		ln, connState = pl, pl.ConnState
	}
	api := service.New(service.Options{Engine: neverEngine{}, Logger: slog.New(slog.DiscardHandler),
		Shutdown: make(chan struct{}), ResumeGrace: time.Second, Poller: poller})
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("/goroutines", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, runtime.NumGoroutine())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: connState}
	go func() { _ = srv.Serve(ln) }()
	mux.HandleFunc("/started", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, started.Load())
	})
	mux.HandleFunc("/heapprofile", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(r.URL.Query().Get("file"))
		if err == nil {
			runtime.GC()
			err = errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("/memstats", func(w http.ResponseWriter, _ *http.Request) {
		// Three collections: pools let go of their buffers in the
		// second, and what those held in the third.
		runtime.GC()
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fmt.Fprintln(w, m.HeapInuse, m.StackInuse, m.HeapAlloc)
	})
	fmt.Println(ln.Addr())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return srv.Close()
}

// measure starts the child, opens n streams of transport and reports.
func measure(n int, transport string, parallel int, rate float64, parkConns bool, heapProfile string, memRate int) error {
	var open func(addr string) (net.Conn, error)
	switch transport {
	case "sse":
		open = openSSE
	case "messages-sse":
		open = openMessagesSSE
	case "responses-sse":
		open = openResponsesSSE
	case "resumable-sse":
		open = openResumableSSE
	case "background-sse":
		open = openBackgroundSSE
	case "websocket", "ws":
		open = openWS
	case "messages-websocket":
		open = openMessagesWS
	case "responses-websocket":
		open = openResponsesWS
	case "resumable-websocket":
		open = openResumableWS
	case "keepalive":
		open = openKeepAlive
	default:
		return fmt.Errorf("-transport %q: want sse, messages-sse, responses-sse, resumable-sse, background-sse, websocket, messages-websocket, responses-websocket, resumable-websocket or keepalive", transport)
	}
	if limit := fileLimit(); limit < uint64(n)+100 {
		return fmt.Errorf("the file limit is %d, too low for %d streams: raise it (ulimit -n) or lower -n", limit, n)
	}
	child := exec.Command(os.Args[0], "-serve", "-park="+strconv.FormatBool(parkConns), "-memprofilerate="+strconv.Itoa(memRate))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer func() {
		stdin.Close()
		_ = child.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("child: %w", err)
	}
	addr := strings.TrimSpace(line)

	// Warm up, so that the baseline includes what the first stream pays
	// once (pools, code paths).
	if c, err := open(addr); err != nil {
		return err
	} else {
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	rss0, err := rss(child.Process.Pid)
	if err != nil {
		return err
	}
	g0, err := goroutines(addr)
	if err != nil {
		return err
	}
	heap0, stack0, objects0, err := memstats(addr)
	if err != nil {
		return err
	}
	s0, err := count(addr, "/started")
	if err != nil {
		return err
	}

	start := time.Now()
	conns := make([]net.Conn, n)
	errs := make(chan error, parallel)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		if rate > 0 {
			if wait := time.Duration(float64(i)/rate*float64(time.Second)) - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := open(addr)
			if err != nil {
				select {
				case errs <- fmt.Errorf("stream %d: %w", i, err):
				default:
				}
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	select {
	case err := <-errs:
		return err
	default:
	}
	// Every engine request started (keepalive starts none).
	for transport != "keepalive" {
		s1, err := count(addr, "/started")
		if err != nil {
			return err
		}
		if s1-s0 >= n {
			break
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("%d of %d engine requests started after a minute", s1-s0, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	opened := time.Since(start)
	// Let the last writes settle, and the streams hand their waits over
	// (WebSocket streams after 100 ms, SSE streams detach after 1 s).
	time.Sleep(1500 * time.Millisecond)
	rss1, err := rss(child.Process.Pid)
	if err != nil {
		return err
	}
	g1, err := goroutines(addr)
	if err != nil {
		return err
	}
	heap1, stack1, objects1, err := memstats(addr)
	if err != nil {
		return err
	}
	if heapProfile != "" {
		if resp, err := http.Get("http://" + addr + "/heapprofile?file=" + url.QueryEscape(heapProfile)); err != nil {
			return err
		} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("heap profile: %s", resp.Status)
		}
	}
	growth := int64(rss1) - int64(rss0)
	fmt.Printf("%d idle %s streams opened in %v\n", n, transport, opened.Round(time.Millisecond))
	fmt.Printf("server RSS %d MiB -> %d MiB: %+d MiB, %d bytes per stream\n", rss0>>20, rss1>>20, growth>>20, growth/int64(n))
	fmt.Printf("server live heap %+d bytes, stacks %+d bytes: %d bytes per stream (%d heap, %d stacks)\n",
		int64(heap1)-int64(heap0), int64(stack1)-int64(stack0),
		(int64(heap1+stack1)-int64(heap0+stack0))/int64(n), (int64(heap1)-int64(heap0))/int64(n), (int64(stack1)-int64(stack0))/int64(n))
	fmt.Printf("server live objects %+d bytes: %d bytes per stream (the rest of the heap in use is room in its spans)\n",
		int64(objects1)-int64(objects0), (int64(objects1)-int64(objects0))/int64(n))
	fmt.Printf("server goroutines %d -> %d: %.2f per stream\n", g0, g1, float64(g1-g0)/float64(n))
	fmt.Printf("goal: %d streams in under 1 GiB of RSS growth: %s\n", n, verdict(growth < 1<<30))

	for i, c := range conns {
		c.Close()
		conns[i] = nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g2, err := goroutines(addr)
		if err != nil {
			return err
		}
		if g2 <= g0+2 {
			fmt.Printf("after closing them: %d goroutines\n", g2)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines 30 s after every stream closed, %d before they opened", g2, g0)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// rss reads a process's resident set size, in bytes.
func rss(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss (Linux only): %w", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// goroutines asks the child how many goroutines it runs.
func goroutines(addr string) (int, error) { return count(addr, "/goroutines") }

// count asks the child for the number at path.
func count(addr, path string) (int, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n int
	_, err = fmt.Fscan(resp.Body, &n)
	return n, err
}

// memstats asks the child for its heap in use (whole spans), stacks and
// live objects, after collections.
func memstats(addr string) (heap, stack, objects uint64, err error) {
	resp, err := http.Get("http://" + addr + "/memstats")
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	_, err = fmt.Fscan(resp.Body, &heap, &stack, &objects)
	return heap, stack, objects, err
}

// openSSE sends a streamed chat request on a raw connection, and reads
// nothing: a stream that may detach sends not even its header until its
// engine's first event, or until it detaches a second later (measure
// waits for every engine request to start instead).
func openSSE(addr string) (net.Conn, error) {
	return postSSE(addr, "/v1/chat/completions", `{"model":"idle","messages":[{"role":"user","content":"x"}],"stream":true}`)
}

// openMessagesSSE is openSSE of a streamed Messages API request.
func openMessagesSSE(addr string) (net.Conn, error) {
	return postSSE(addr, "/v1/messages",
		`{"model":"idle","max_tokens":16,"messages":[{"role":"user","content":"x"}],"stream":true}`)
}

// openResponsesSSE is openSSE of a streamed Responses API request.
func openResponsesSSE(addr string) (net.Conn, error) {
	return postSSE(addr, "/v1/responses", `{"model":"idle","input":"x","store":false,"stream":true}`)
}

// openResumableSSE is openSSE of a resumable chat stream.
func openResumableSSE(addr string) (net.Conn, error) {
	return postSSE(addr, "/v1/chat/completions",
		`{"model":"idle","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`)
}

// openBackgroundSSE is openSSE of a background response, streamed by
// the request that creates it.
func openBackgroundSSE(addr string) (net.Conn, error) {
	return postSSE(addr, "/v1/responses", `{"model":"idle","input":"x","background":true,"stream":true}`)
}

// postSSE sends a POST of body to path on a raw connection, and reads
// nothing.
func postSSE(addr, path, body string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, len(body), body); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openKeepAlive opens an HTTP/1.1 connection, makes one request on it
// (GET /v1/models) and reads its answer: a keep-alive connection between
// requests.
func openKeepAlive(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(c, `"idle"`); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openWS opens a WebSocket connection on a raw socket, sends one create
// and reads until its opening chunk has arrived.
func openWS(addr string) (net.Conn, error) {
	return openWSOn(addr, "/v1/chat/completions",
		`{"type":"create","request_id":"r","body":{"model":"idle","messages":[{"role":"user","content":"x"}]}}`,
		`"role":"assistant"`)
}

// openMessagesWS opens a WebSocket connection to /v1/messages with one
// create in flight. Its first event waits for the engine's first, so it
// reads nothing but waits a little for the request to start.
func openMessagesWS(addr string) (net.Conn, error) {
	c, err := openWSOn(addr, "/v1/messages",
		`{"type":"create","request_id":"r","body":{"model":"idle","max_tokens":16,"messages":[{"role":"user","content":"x"}]}}`, "")
	time.Sleep(10 * time.Millisecond)
	return c, err
}

// openResponsesWS opens a WebSocket connection to /v1/responses with one
// response.create in flight, and reads until response.created.
func openResponsesWS(addr string) (net.Conn, error) {
	return openWSOn(addr, "/v1/responses", `{"type":"response.create","model":"idle","input":"x","store":false}`,
		`"response.created"`)
}

// openResumableWS opens a WebSocket connection with one resumable chat
// stream in flight, and reads until its opening chunk.
func openResumableWS(addr string) (net.Conn, error) {
	return openWSOn(addr, "/v1/chat/completions",
		`{"type":"create","request_id":"r","body":{"model":"idle","messages":[{"role":"user","content":"x"}],"stream_options":{"resumable":true}}}`,
		`"role":"assistant"`)
}

// openWSOn opens a WebSocket connection to path on a raw socket, sends msg
// and reads until marker (nothing when it is empty).
func openWSOn(addr, path, msg, marker string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, addr); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(c, "\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := c.Write(maskedTextFrame([]byte(msg))); err != nil {
		c.Close()
		return nil, err
	}
	if marker == "" {
		return c, nil
	}
	if err := readUntil(c, marker); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// maskedTextFrame frames payload as a client's text message (RFC 6455:
// clients mask; a zero mask key leaves the payload as it is).
func maskedTextFrame(payload []byte) []byte {
	f := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	default:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	}
	f = append(f, 0, 0, 0, 0)
	return append(f, payload...)
}

// readUntil reads c until marker has been seen, within a minute.
func readUntil(c net.Conn, marker string) error {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	defer c.SetReadDeadline(time.Time{})
	var seen []byte
	buf := make([]byte, 512)
	for !bytes.Contains(seen, []byte(marker)) {
		n, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("before %q: %w", marker, err)
		}
		seen = append(seen, buf[:n]...)
	}
	return nil
}
