package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// check is one named hostile case.
type check struct {
	name   string
	expect string // what must hold, in a few words, for the table
	// run does the case against h and returns its figures (for the
	// table) or the reason it failed.
	run func(ctx context.Context, h *harness) (figures string, err error)
	// own marks a case that starts its own rill processes and leaves the
	// shared server alone: it is not measured nor settled on the shared one.
	own bool
}

// harness is what cases share: the rill binary, the long-lived server the
// cases that do not start their own run against, and its clients.
type harness struct {
	bin    string
	tmp    string
	srv    *child
	client *http.Client // keeps connections; CloseIdleConnections before settling
	// noKeep is a client that closes every connection after its answer.
	noKeep *http.Client
	// settle bounds how long a case's leftovers may take to go away.
	settle time.Duration
	// base is the shared server's settled state before the running case.
	base snapshot
}

// snapshot is the shared server's state between cases.
type snapshot struct {
	proc procStat
	srv  serverStat
}

// outcome is one row of the table.
type outcome struct {
	name, expect string
	err          error
	figures      string
	took         time.Duration
	before       snapshot
	after        snapshot
	peakRSSKB    int64
	measured     bool // before/after are the shared server's
}

// slack for "nothing left behind": a scrape may catch the metrics
// listener's own connection goroutine, and a closed client connection may
// take a moment to be reaped.
const (
	goroutineSlack = 2
	fdSlack        = 1
)

// measure takes a snapshot of the shared server.
func (h *harness) measure(ctx context.Context) (snapshot, error) {
	var s snapshot
	var err error
	if s.srv, err = h.srv.scrape(ctx); err != nil {
		return s, err
	}
	s.proc, err = readProc(h.srv.pid())
	return s, err
}

// settled waits until the shared server is back to base: no request
// running or waiting, no KV block in use, no more goroutines or
// descriptors than base (with slack). It returns the last snapshot, and an
// error naming what was left behind when the settle time ran out.
func (h *harness) settled(ctx context.Context, base snapshot) (snapshot, error) {
	h.client.CloseIdleConnections()
	deadline := time.Now().Add(h.settle)
	for {
		s, err := h.measure(ctx)
		if err != nil {
			return s, err
		}
		var left []string
		if s.srv.running > 0 || s.srv.waiting > 0 {
			left = append(left, fmt.Sprintf("%d requests running, %d waiting", s.srv.running, s.srv.waiting))
		}
		if s.srv.kvUsage > 0 {
			left = append(left, fmt.Sprintf("KV cache %.1f%% in use", 100*s.srv.kvUsage))
		}
		if s.srv.goroutines > base.srv.goroutines+goroutineSlack {
			left = append(left, fmt.Sprintf("%d goroutines (was %d)", s.srv.goroutines, base.srv.goroutines))
		}
		if s.proc.fds > base.proc.fds+fdSlack {
			left = append(left, fmt.Sprintf("%d open descriptors (was %d)", s.proc.fds, base.proc.fds))
		}
		if len(left) == 0 {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return s, fmt.Errorf("left behind after %v: %s", h.settle, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rssSampler records the peak RSS of a process while it runs.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done sync.WaitGroup
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.done.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := readProc(pid); err == nil && st.rssKB > s.peak.Load() {
				s.peak.Store(st.rssKB)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *rssSampler) end() int64 {
	close(s.stop)
	s.done.Wait()
	return s.peak.Load()
}

// runCheck runs c and measures it.
func (h *harness) runCheck(ctx context.Context, c check) outcome {
	o := outcome{name: c.name, expect: c.expect}
	var sampler *rssSampler
	if !c.own {
		before, err := h.settled(ctx, snapshot{proc: procStat{fds: 1 << 30}, srv: serverStat{goroutines: 1 << 30}})
		if err != nil {
			o.err = fmt.Errorf("the shared server is not idle before the case: %w", err)
			return o
		}
		o.before, o.measured = before, true
		h.base = before
		sampler = sampleRSS(h.srv.pid())
	}
	start := time.Now()
	o.figures, o.err = c.run(ctx, h)
	o.took = time.Since(start)
	if c.own {
		return o
	}
	o.peakRSSKB = sampler.end()
	after, err := h.settled(ctx, o.before)
	o.after = after
	if err != nil && o.err == nil {
		o.err = err
	}
	return o
}

// printTable writes the outcomes as a plain-text table, the reasons of
// the failures after it.
func printTable(w *strings.Builder, outs []outcome) {
	rows := [][]string{{"case", "expectation", "result", "took", "RSS MiB before→peak→after", "fds", "goroutines", "KV% / running after", "figures"}}
	for _, o := range outs {
		res := "pass"
		if o.err != nil {
			res = "FAIL"
		}
		rss, fds, gr, kv := "-", "-", "-", "-"
		if o.measured {
			rss = fmt.Sprintf("%.0f→%.0f→%.0f", mib(o.before.proc.rssKB), mib(max(o.peakRSSKB, o.after.proc.rssKB)), mib(o.after.proc.rssKB))
			fds = fmt.Sprintf("%d→%d", o.before.proc.fds, o.after.proc.fds)
			gr = fmt.Sprintf("%d→%d", o.before.srv.goroutines, o.after.srv.goroutines)
			kv = fmt.Sprintf("%.1f / %d", 100*o.after.srv.kvUsage, o.after.srv.running)
		}
		rows = append(rows, []string{o.name, o.expect, res, o.took.Round(10 * time.Millisecond).String(), rss, fds, gr, kv, o.figures})
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	for n, r := range rows {
		for i, cell := range r {
			if i == len(r)-1 {
				w.WriteString(cell)
				break
			}
			w.WriteString(cell)
			w.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))+2))
		}
		w.WriteString("\n")
		if n == 0 {
			for i := range widths {
				w.WriteString(strings.Repeat("-", widths[i]))
				w.WriteString("  ")
			}
			w.WriteString("\n")
		}
	}
	var failed []outcome
	for _, o := range outs {
		if o.err != nil {
			failed = append(failed, o)
		}
	}
	for _, o := range failed {
		fmt.Fprintf(w, "\nFAIL %s:\n  %s\n", o.name, strings.ReplaceAll(o.err.Error(), "\n", "\n  "))
	}
}

func mib(kb int64) float64 { return float64(kb) / 1024 }
