package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one `rill serve` process started by the script. Its stderr is
// kept line by line (the server logs JSON there, --log-format json), so
// that checks can look for ERROR lines and panics.
type child struct {
	cmd         *exec.Cmd
	addr        string // the API listener, host:port
	metricsAddr string // the --metrics-addr listener, "" without one
	apiKey      string

	mu    sync.Mutex
	lines []string

	exited  chan struct{} // closed when the process has been waited for
	waitErr error
}

// childOptions says how to start a child.
type childOptions struct {
	bin    string
	args   []string // after "serve"
	apiKey string   // passed as --api-key and remembered for the clients
	// metrics adds --metrics-addr 127.0.0.1:0.
	metrics bool
	// wantListen: wait for the "listening" line (else only start the process).
	wantListen bool
}

// startChild starts rill serve with opts and, when opts.wantListen, waits
// until it listens (or exits, which is an error that quotes its output).
func startChild(ctx context.Context, opts childOptions) (*child, error) {
	args := append([]string{"serve", "--log-format", "json"}, opts.args...)
	if opts.apiKey != "" {
		args = append(args, "--api-key", opts.apiKey)
	}
	if opts.metrics {
		args = append(args, "--metrics-addr", "127.0.0.1:0")
	}
	cmd := exec.Command(opts.bin, args...)
	cmd.Env = append(os.Environ(), "RILL_API_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, apiKey: opts.apiKey, exited: make(chan struct{})}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.lines = append(c.lines, line)
			var m struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &m) == nil {
				switch m.Msg {
				case "listening":
					c.addr = m.Addr
				case "serving metrics":
					c.metricsAddr = m.Addr
				}
			}
			ready := c.addr != "" && (!opts.metrics || c.metricsAddr != "")
			c.mu.Unlock()
			if ready {
				once.Do(func() { close(listening) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if !opts.wantListen {
		return c, nil
	}
	select {
	case <-listening:
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("rill serve exited before listening (%v): %s", c.waitErr, c.tail(20))
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("rill serve did not listen: %w: %s", ctx.Err(), c.tail(20))
	case <-time.After(60 * time.Second):
		c.kill()
		return nil, fmt.Errorf("rill serve did not listen within 60s: %s", c.tail(20))
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// url is http://addr + path.
func (c *child) url(path string) string { return "http://" + c.addr + path }

// wsURL is ws://addr + path.
func (c *child) wsURL(path string) string { return "ws://" + c.addr + path }

// auth sets the child's API key on h.
func (c *child) auth(h http.Header) {
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
}

// log returns the lines logged so far.
func (c *child) log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// tail is the last n log lines, joined, for error messages.
func (c *child) tail(n int) string {
	l := c.log()
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// signal sends sig to the process.
func (c *child) signal(sig syscall.Signal) error { return c.cmd.Process.Signal(sig) }

// kill ends the process at once and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// wait waits up to d for the process to exit and returns its exit code
// (-1 when it was killed by a signal).
func (c *child) wait(d time.Duration) (int, error) {
	select {
	case <-c.exited:
	case <-time.After(d):
		return 0, fmt.Errorf("still running after %v", d)
	}
	if st := c.cmd.ProcessState; st != nil {
		return st.ExitCode(), nil
	}
	return 0, c.waitErr
}

// stop ends the child gracefully (SIGTERM), killing it after d.
func (c *child) stop(d time.Duration) {
	_ = c.signal(syscall.SIGTERM)
	if _, err := c.wait(d); err != nil {
		c.kill()
	}
}

// procStat is what /proc says about a process.
type procStat struct {
	rssKB int64         // VmRSS
	hwmKB int64         // VmHWM: peak RSS so far
	fds   int           // entries of /proc/PID/fd
	cpu   time.Duration // user + system time
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTick = 100

func readProc(pid int) (procStat, error) {
	var st procStat
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			st.rssKB = n
		case "VmHWM":
			st.hwmKB = n
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return st, err
	}
	st.fds = len(fds)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The fields after the command name (which may hold spaces), from
	// field 3 (state) on: utime and stime are fields 14 and 15.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 12 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			stt, _ := strconv.ParseInt(f[12], 10, 64)
			st.cpu = time.Duration(ut+stt) * time.Second / clockTick
		}
	}
	return st, nil
}

// serverStat is what the child's /metrics says.
type serverStat struct {
	goroutines int
	kvUsage    float64 // rill_kv_cache_usage_perc, 0..1
	running    int     // rill_num_requests_running
	waiting    int     // rill_num_requests_waiting
}

// metricsClient scrapes without keeping connections, so that the scrape
// leaves no connection (and no goroutine) behind in the child.
var metricsClient = &http.Client{Timeout: 10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true}}

// scrape reads the child's metrics from its --metrics-addr listener.
func (c *child) scrape(ctx context.Context) (serverStat, error) {
	var st serverStat
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.metricsAddr+"/metrics", nil)
	if err != nil {
		return st, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := cutMetric(line)
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			st.goroutines = int(value)
		case "rill_kv_cache_usage_perc":
			st.kvUsage += value
		case "rill_num_requests_running":
			st.running += int(value)
		case "rill_num_requests_waiting":
			st.waiting += int(value)
		}
	}
	return st, sc.Err()
}

// cutMetric splits a sample line `name{labels} value` into its name (without
// labels) and value.
func cutMetric(line string) (string, float64, bool) {
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", 0, false
	}
	name := line[:sp]
	if i := strings.IndexByte(name, '{'); i >= 0 {
		name = name[:i]
	}
	return name, v, true
}

// buildRill builds the rill command of the module at root into dir.
func buildRill(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "rill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rill")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
}

// moduleRoot finds the directory of the rill module from the working
// directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module rill\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the rill module: run from the repository")
		}
		dir = parent
	}
}
