// Command hostile runs hostile clients against a real `rill serve` and
// says, case by case, whether the server stayed bounded: each case has an
// expectation, a pass/FAIL, the time it took and the server's figures
// before and after it (RSS from /proc/PID/status, open descriptors from
// /proc/PID/fd, goroutines, KV cache in use and requests running from
// /metrics), measured once the server has settled. A case passes only if
// the server is back where it was: no request running, no KV block in
// use, no goroutine or descriptor left behind.
//
// It builds rill into a temporary directory and starts it with short
// limits (--read-timeout 2s, --write-idle-timeout 3s, a 2 MiB KV cache, an
// API key), on the embedded test model; shutdown, kill -9, corrupt GGUFs
// and broken configuration files start processes of their own.
//
//	go run ./scripts/hostile                 # every case, a few minutes
//	go run ./scripts/hostile -run 'ws|slow'  # the cases whose name matches
//	go run ./scripts/hostile -rill ./rill    # a binary built already
//
// The exit status is 1 when any case fails. It is a script run by hand,
// not a test: it takes minutes and most of two cores.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("rill", "", "rill binary to run (default: go build ./cmd/rill into a temporary directory)")
	only := flag.String("run", "", "run only the cases whose name matches this regular expression")
	settle := flag.Duration("settle", 15*time.Second, "how long a case's leftovers may take to go away")
	logFile := flag.String("log", "", "write the shared server's log (JSON lines) to this file")
	serveArgs := flag.String("serve-args", strings.Join(sharedArgs, " "), "flags of the shared server (for an older build that lacks some; cases that rely on one then fail)")
	flag.Parse()
	sharedArgs = strings.Fields(*serveArgs)
	if err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: file limit:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, *bin, *only, *settle, *logFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// sharedArgs are the flags of the shared server: short timeouts so that
// the stalled clients are cut within seconds, a KV cache of 256 blocks
// (4,096 tokens) so that its use shows, room to queue the 500 streams of
// the disconnect storm, and the max_tokens policy that refuses a
// max_tokens beyond the context (the default clamps it to the context,
// which the engine's and the conformance suite's tests pin), so that the
// refusal is among the bad inputs.
var sharedArgs = []string{
	"--addr", "127.0.0.1:0",
	"--read-timeout", "2s",
	"--write-idle-timeout", "3s",
	"--kv-cache-mem", "2MiB",
	"--max-queued-requests", "512",
	"--shutdown-grace", "5s",
	"--max-tokens-policy", "error",
}

func run(ctx context.Context, bin, only string, settle time.Duration, logFile string) (failed bool, err error) {
	var match *regexp.Regexp
	if only != "" {
		if match, err = regexp.Compile(only); err != nil {
			return false, fmt.Errorf("-run: %w", err)
		}
	}
	began := time.Now()
	tmp, err := os.MkdirTemp("", "rill-hostile-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			return false, err
		}
		fmt.Fprintln(os.Stderr, "hostile: building rill…")
		if bin, err = buildRill(ctx, root, tmp); err != nil {
			return false, err
		}
	}
	srv, err := startChild(ctx, childOptions{bin: bin, args: sharedArgs, apiKey: hostileKey, metrics: true, wantListen: true})
	if err != nil {
		return false, err
	}
	defer srv.stop(20 * time.Second)
	h := &harness{
		bin: bin, tmp: tmp, srv: srv, settle: settle,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		noKeep: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	if err := warmUp(ctx, h); err != nil {
		return false, err
	}
	var outs []outcome
	for _, c := range checks() {
		if match != nil && !match.MatchString(c.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "hostile: %s…\n", c.name)
		o := h.runCheck(ctx, c)
		if o.err != nil {
			fmt.Fprintf(os.Stderr, "hostile: %s: FAIL: %v\n", c.name, o.err)
		}
		outs = append(outs, o)
	}
	// The shared server's log, over every case: no 5xx, no panic.
	outs = append(outs, logCheck(srv))
	if logFile != "" {
		if err := os.WriteFile(logFile, []byte(strings.Join(srv.log(), "\n")+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hostile: -log:", err)
		}
	}

	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "rill hostile run, %s, load average %s, %d CPUs\n\n", time.Now().Format(time.RFC3339),
		strings.Join(strings.Fields(string(load))[:3], " "), numCPU())
	printTable(&b, outs)
	n := 0
	for _, o := range outs {
		if o.err != nil {
			n++
			failed = true
		}
	}
	fmt.Fprintf(&b, "\n%d cases, %d failed, %v\n", len(outs), n, time.Since(began).Round(time.Second))
	fmt.Print(b.String())
	return failed, nil
}

// checks is every case, in the order they run: the shared server's first,
// then those that start their own processes.
func checks() []check {
	return []check{
		{name: "bad HTTP inputs", expect: "each a 4xx in OpenAI's error shape, never a 5xx", run: checkBadInputs},
		{name: "protocol garbage", expect: "4xx from net/http or closed, never a 5xx or a hang", run: checkProtocolGarbage},
		{name: "slowloris headers", expect: "120 conns closed by the 10 s header timeout; others served", run: checkSlowloris},
		{name: "slow bodies (defect 1)", expect: "408 in OpenAI's shape after --read-timeout 2s, conn closed", run: checkSlowBodies},
		{name: "huge requests (defects 3, 4, 7)", expect: "400; prompts refused before the engine works; RSS bounded", run: checkBigRequests},
		{name: "8 MiB prompt, client leaves (defect 3)", expect: "server stops working on it at once", run: checkBigPromptCancel},
		{name: "256 choices at the limit (defect 4)", expect: "served, RSS bounded", run: checkMaxChoices},
		{name: "300 concurrent streams", expect: "all complete with usage and [DONE]", run: checkConcurrent},
		{name: "500-stream disconnect storm", expect: "all admitted, then nothing left behind", run: checkDisconnectStorm},
		{name: "stalled SSE reader (defect 2)", expect: "paused, ended by --write-idle-timeout, KV freed", run: checkStalledSSE},
		{name: "ws bad messages", expect: "each one error in OpenAI's shape; conn stays open", run: checkWSBadMessages},
		{name: "ws 17 MiB message", expect: "413, skipped unbuffered; conn stays open", run: checkWSOversized},
		{name: "ws too many requests", expect: "429 for the 33rd, 409 duplicate, 499 on cancel", run: checkWSTooMany},
		{name: "ws cancel storm", expect: "1,000 create+cancel: one end each, nothing left", run: checkWSCancelStorm},
		{name: "ws stalled reader (defect 2)", expect: "paused, dropped by --write-idle-timeout, KV freed", run: checkWSStalled},
		{name: "ws unread flood", expect: "server stops reading, drops the conn; RSS bounded", run: checkWSFlood},
		{name: "ws responses abuse", expect: "errors in OpenAI's shape, 429 for the 33rd, nothing left", run: checkWSResponses},
		{name: "ws disconnect storm", expect: "100 conns × 2 streams dropped: nothing left", run: checkWSDisconnectStorm},
		{name: "SIGTERM, idle ws (defect 5)", expect: "exit 0 at once, 1001 on every close", run: checkShutdownIdle, own: true},
		{name: "SIGTERM, busy ws + SSE (defect 5)", expect: "503 late create, done/503 ends, 1001, exit 0, no ERROR", run: checkShutdownBusy, own: true},
		{name: "overload: 64 streams on 4+4 slots", expect: "503 engine_overloaded + Retry-After at once; the admitted complete", run: checkOverload, own: true},
		{name: "kill -9", expect: "clients cut at once; restart on the same address serves", run: checkKill9, own: true},
		{name: "corrupt GGUFs", expect: "exit 1 with a clear error, no panic, bounded", run: checkCorruptGGUFs, own: true},
		{name: "broken configs (defect 7)", expect: "exit 1 listing every error at once", run: checkBrokenConfigs, own: true},
	}
}

func numCPU() int { return runtime.NumCPU() }

// warmUp sends one completion, so that the baseline is a server that has
// served (lazily built state exists), and checks that it works.
func warmUp(ctx context.Context, h *harness) error {
	_, err := complete(ctx, h, chat())
	return err
}

// raiseFileLimit sets the soft limit on open files to the hard one: the
// storms hold a thousand connections (the children inherit it).
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
