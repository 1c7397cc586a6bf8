// Command idleconns holds N idle WebSocket connections (connected, nothing
// in flight) against one `rill serve` process and reports that process's
// RSS, the bytes per connection, and every error: connections refused,
// failed handshakes, and connections the server closed while they were
// idle. It answers the server's pings, so a connection held past a ping
// interval (15 s) stays only if its pongs arrive.
//
//	go build -o /tmp/rill ./cmd/rill
//	go run ./scripts/idleconns -rill /tmp/rill -model ../shared/models/stories260K.gguf -n 100000
//
// Each connection takes a file descriptor in each process, so N is capped
// by the hard limit on open files: the program raises its soft limit to
// the hard one (rill serve, its child, inherits it; Go programs also raise
// their own), says what the machine allows, and holds as many as that
// allows when N is more. One source address gives at most the local port
// range's ports to one server port, so connections come from 127.0.0.1,
// 127.0.0.2, … in turn (all of 127/8 is loopback on Linux).
//
// The client is light so that the figure is the server's: raw non-blocking
// sockets in one epoll set, one goroutine for all of them, no buffer per
// connection.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	rill := flag.String("rill", "", "the rill binary (go build -o /tmp/rill ./cmd/rill)")
	model := flag.String("model", "../shared/models/stories260K.gguf", "the model rill serves")
	n := flag.Int("n", 100000, "idle connections to hold")
	hold := flag.Duration("hold", 35*time.Second, "how long to hold them once open (more than two ping intervals)")
	parallel := flag.Int("parallel", 8, "connections opened at once")
	flag.Parse()
	if err := run(*rill, *model, *n, *hold, *parallel); err != nil {
		fmt.Fprintln(os.Stderr, "idleconns:", err)
		os.Exit(1)
	}
}

func run(rill, model string, n int, hold time.Duration, parallel int) error {
	if rill == "" {
		return errors.New("-rill is required (go build -o /tmp/rill ./cmd/rill)")
	}
	limit, err := raiseFileLimit()
	if err != nil {
		return err
	}
	reportMachine(limit)
	// Each process keeps some descriptors of its own (listener, epoll,
	// model file, stdio).
	if most := int(limit) - 64; n > most {
		fmt.Printf("holding %d connections, not %d: the hard limit on open files is %d per process and this program cannot raise it\n",
			most, n, limit)
		n = most
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(rill, "serve", "--addr", addr, "--model", model, "--log-level", "warn", "--threads", "1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start rill: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if err := waitHealthy(addr); err != nil {
		return err
	}
	time.Sleep(time.Second) // let start-up settle
	rss0 := rssKB(pid)
	tcp0 := tcpMemPages()
	go0 := goStats(addr)
	fmt.Printf("rill serve (pid %d) on %s: RSS %.1f MiB before any connection; %s\n", pid, addr, float64(rss0)/1024, go0)

	p, err := newPoller()
	if err != nil {
		return err
	}
	go p.loop()
	start := time.Now()
	var opened, failed atomic.Int64
	var firstErr sync.Once
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				fd, err := dial(sourceAddr(int(i)), port)
				if err != nil {
					failed.Add(1)
					firstErr.Do(func() { fmt.Printf("connection %d: %v\n", i, err) })
					continue
				}
				if err := p.add(fd); err != nil {
					_ = syscall.Close(fd)
					failed.Add(1)
					firstErr.Do(func() { fmt.Printf("connection %d: %v\n", i, err) })
					continue
				}
				if o := opened.Add(1); o%10000 == 0 {
					fmt.Printf("  %d open after %s, RSS %.1f MiB\n", o, time.Since(start).Round(time.Millisecond), float64(rssKB(pid))/1024)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("opened %d of %d in %s (%d failed); holding them for %s\n", opened.Load(), n,
		time.Since(start).Round(time.Millisecond), failed.Load(), hold)
	if opened.Load() == 0 {
		return errors.New("no connection opened")
	}
	report := func(when string) {
		rss := rssKB(pid)
		alive := opened.Load() - p.closed.Load()
		per := 0.0
		if alive > 0 {
			per = float64(rss-rss0) * 1024 / float64(alive)
		}
		fmt.Printf("%s: %d alive, server RSS %.1f MiB (+%.1f MiB, %.0f B per connection); pings answered %d, closed by the server %d, unexpected messages %d, read errors %d\n",
			when, alive, float64(rss)/1024, float64(rss-rss0)/1024, per,
			p.pings.Load(), p.closed.Load(), p.unexpected.Load(), p.readErrs.Load())
		if alive > 0 {
			g := goStats(addr)
			fmt.Printf("  per connection: %s; kernel TCP buffers %.0f B (both ends, not in RSS)\n", g.per(go0, alive),
				float64(tcpMemPages()-tcp0)*float64(os.Getpagesize())/float64(alive))
		}
	}
	report("open")
	for deadline := time.Now().Add(hold); time.Now().Before(deadline); {
		time.Sleep(min(10*time.Second, time.Until(deadline)))
		report(fmt.Sprintf("after %s", time.Since(start).Round(time.Second)))
	}
	if p.closed.Load() > 0 || failed.Load() > 0 || p.unexpected.Load() > 0 || p.readErrs.Load() > 0 {
		return errors.New("some connections failed or were dropped (see above)")
	}
	return nil
}

// raiseFileLimit sets the soft limit on open files to the hard one and
// returns it.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Max, nil
}

// reportMachine says what the machine allows: open files per process (and
// whether this program may raise the hard limit), in all, and local ports.
func reportMachine(limit uint64) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "?"
		}
		return strings.Join(strings.Fields(string(b)), "-")
	}
	raisable := "no"
	lim := syscall.Rlimit{Cur: limit, Max: limit + 1}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		raisable = "yes"
		lim.Max = limit // back to what it was, for the child
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	fmt.Printf("machine: open files per process %d (hard; raisable here: %s), fs.nr_open %s, fs.file-max %s, local ports %s\n",
		limit, raisable, read("/proc/sys/fs/nr_open"), read("/proc/sys/fs/file-max"), read("/proc/sys/net/ipv4/ip_local_port_range"))
}

// sourceAddr spreads connections over source addresses, 20,000 each
// (fewer than the local port range of most machines).
func sourceAddr(i int) [4]byte { return [4]byte{127, 0, 0, byte(1 + i/20000)} }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitHealthy(addr string) error {
	for range 300 {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("rill serve did not become healthy in 30 s")
}

// tcpMemPages is the memory of all TCP sockets' buffers, in pages
// (/proc/net/sockstat), which no process's RSS counts.
func tcpMemPages() int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "TCP:") {
			continue
		}
		f := strings.Fields(line)
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "mem" {
				n, _ := strconv.ParseInt(f[i+1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// rssKB is the resident set of process pid, in KiB.
func rssKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// runtimeStats are the Go runtime's figures from rill's /metrics.
type runtimeStats struct{ goroutines, heap, stack float64 }

func (g runtimeStats) String() string {
	return fmt.Sprintf("%.0f goroutines, heap in use %.1f MiB, stacks %.1f MiB", g.goroutines, g.heap/(1<<20), g.stack/(1<<20))
}

// per is what each of n connections adds to g0.
func (g runtimeStats) per(g0 runtimeStats, n int64) string {
	k := float64(n)
	return fmt.Sprintf("%.2f goroutines, heap %.0f B, stacks %.0f B",
		(g.goroutines-g0.goroutines)/k, (g.heap-g0.heap)/k, (g.stack-g0.stack)/k)
}

// goStats reads the runtime's figures from the server's /metrics.
func goStats(addr string) runtimeStats {
	var g runtimeStats
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return g
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "go_goroutines":
			g.goroutines = f
		case "go_memstats_heap_inuse_bytes":
			g.heap = f
		case "go_memstats_stack_inuse_bytes":
			g.stack = f
		}
	}
	return g
}

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT (4.2 and later),
// which package syscall does not name.
const ipBindAddressNoPort = 24

// handshake is the upgrade every connection sends.
const handshake = "GET /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

// dial connects from src to the server's port with a blocking socket, does
// the handshake, and returns the descriptor made non-blocking.
func dial(src [4]byte, port int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	// Choose the port at connect, by the whole 4-tuple: a port chosen at
	// bind must be free of every bound socket, a search that slows down as
	// thousands are held.
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: src}); err != nil {
		return fail("bind "+net.IP(src[:]).String(), err)
	}
	// Bound the handshake: a server that stops answering fails it.
	tv := syscall.Timeval{Sec: 10}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	// Blocking calls here may be interrupted by the runtime's preemption
	// signal (EINTR): each is retried. An interrupted connect goes on in
	// the kernel; retried, it says so (EALREADY) until it is done.
	for {
		err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port})
		if err == nil || errors.Is(err, syscall.EISCONN) {
			break
		}
		if errors.Is(err, syscall.EALREADY) {
			time.Sleep(time.Millisecond)
			continue
		}
		if !errors.Is(err, syscall.EINTR) {
			return fail("connect", err)
		}
	}
	for {
		_, err := syscall.Write(fd, []byte(handshake))
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			return fail("write handshake", err)
		}
	}
	var buf [512]byte
	var got []byte
	for !bytes.Contains(got, []byte("\r\n\r\n")) {
		m, err := syscall.Read(fd, buf[:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fail("read handshake", err)
		}
		if m == 0 {
			return fail("read handshake", errors.New("closed"))
		}
		got = append(got, buf[:m]...)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 101 ")) {
		line, _, _ := bytes.Cut(got, []byte("\r\n"))
		return fail("handshake", fmt.Errorf("answered %q", line))
	}
	if rest := got[bytes.Index(got, []byte("\r\n\r\n"))+4:]; len(rest) > 0 {
		return fail("handshake", fmt.Errorf("%d bytes after the 101", len(rest)))
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return fail("nonblock", err)
	}
	return fd, nil
}

// poller reads every connection from one epoll set on one goroutine. The
// server sends an idle connection nothing but pings (and a close frame if
// it drops it); a ping is answered with its pong.
type poller struct {
	ep int
	// partial holds the start of a frame that arrived in pieces, by
	// descriptor (rare: server frames here are a few bytes).
	mu      sync.Mutex
	partial map[int][]byte

	pings, closed, unexpected, readErrs atomic.Int64
}

func newPoller() (*poller, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	return &poller{ep: ep, partial: map[int][]byte{}}, nil
}

func (p *poller) add(fd int) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}
	if err := syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add: %w", err)
	}
	return nil
}

func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for {
		k, err := syscall.EpollWait(p.ep, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			fmt.Println("epoll wait:", err)
			return
		}
		for _, ev := range events[:k] {
			p.readable(int(ev.Fd), buf)
		}
	}
}

// readable reads what fd has and answers its pings.
func (p *poller) readable(fd int, buf []byte) {
	for {
		m, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.EAGAIN) {
			return
		}
		if err != nil || m == 0 {
			if err != nil {
				p.readErrs.Add(1)
			}
			p.drop(fd)
			return
		}
		data := buf[:m]
		p.mu.Lock()
		if prev := p.partial[fd]; prev != nil {
			data = append(prev, data...)
			delete(p.partial, fd)
		}
		p.mu.Unlock()
		for len(data) > 0 {
			op, payload, size, ok := parseFrame(data)
			if !ok {
				p.mu.Lock()
				p.partial[fd] = bytes.Clone(data)
				p.mu.Unlock()
				break
			}
			data = data[size:]
			switch op {
			case 0x9: // ping
				p.pings.Add(1)
				_, err := syscall.Write(fd, pongFrame(payload))
				for errors.Is(err, syscall.EINTR) {
					_, err = syscall.Write(fd, pongFrame(payload))
				}
				if err != nil {
					p.readErrs.Add(1)
					p.drop(fd)
					return
				}
			case 0x8: // close
				p.drop(fd)
				return
			default:
				p.unexpected.Add(1)
			}
		}
	}
}

func (p *poller) drop(fd int) {
	p.closed.Add(1)
	_ = syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_DEL, fd, nil)
	_ = syscall.Close(fd)
	p.mu.Lock()
	delete(p.partial, fd)
	p.mu.Unlock()
}

// parseFrame reads one unmasked server frame from the start of b.
func parseFrame(b []byte) (op byte, payload []byte, size int, ok bool) {
	if len(b) < 2 {
		return 0, nil, 0, false
	}
	op = b[0] & 0x0f
	n, h := int(b[1]&0x7f), 2
	switch n {
	case 126:
		if len(b) < 4 {
			return 0, nil, 0, false
		}
		n, h = int(b[2])<<8|int(b[3]), 4
	case 127:
		if len(b) < 10 {
			return 0, nil, 0, false
		}
		n, h = 0, 10
		for _, c := range b[2:10] {
			n = n<<8 | int(c)
		}
	}
	if len(b) < h+n {
		return 0, nil, 0, false
	}
	return op, b[h : h+n], h + n, true
}

// pongFrame is a client's pong carrying payload (masked with a zero key,
// which leaves it as it is).
func pongFrame(payload []byte) []byte {
	f := []byte{0x8a, 0x80 | byte(len(payload)), 0, 0, 0, 0}
	return append(f, payload...)
}
