package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rill/engine"
	"rill/internal/wait"
	"rill/service"
)

// TestPriorityUnderOverload drives rill's embedded engine on the default
// model, with one decoding slot and two queue places, through the service
// over loopback HTTP: while a long stream runs, requests of priority 5 and
// 1 wait; a request of priority -1 arrives to a full queue and takes the
// place of the one of priority 5, which is answered 503 engine_overloaded;
// a request of priority 9 is refused at once. When the slot comes free, -1
// runs before 1.
func TestPriorityUnderOverload(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, "--max-seqs", "1", "--max-queued-requests", "2", "--ctx", "65536", "--batch-tokens", "16")
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	lr, ok := any(e).(engine.LoadReporter)
	if !ok {
		t.Fatal("the engines report no load")
	}
	waiting := func(n int) {
		t.Helper()
		wait.Options{Bound: 30 * time.Second, Interval: 5 * time.Millisecond}.For(t, fmt.Sprintf("%d waiting", n), func() bool {
			return lr.Load()[0].Waiting == n
		})
	}

	// The blocker takes the slot: a long prompt computed 16 tokens a step
	// (--batch-tokens 16), which sends nothing while it runs, so that no
	// slow reader pauses it (a paused request gives its slot up). It ends
	// when the test cancels it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	blocker := make(chan struct{})
	go func() {
		defer close(blocker)
		body := fmt.Sprintf(`{"model":"rill-tiny","prompt":%q,"max_tokens":1}`, strings.Repeat("the fox jumps over the dog ", 1500))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Error("the blocker completed before the test cancelled it: make its prompt longer")
		}
	}()
	wait.Options{Bound: 30 * time.Second, Interval: 5 * time.Millisecond}.For(t, "the blocker to run", func() bool {
		return lr.Load()[0].Running == 1
	})

	type outcome struct {
		prio   int
		status int
		code   string
		at     time.Time
	}
	var mu sync.Mutex
	var outcomes []outcome
	var wg sync.WaitGroup
	send := func(prio int) {
		wg.Go(func() {
			// Priority 1's answer is long (1000 steps against -1's 4), so
			// that the order the client sees the answers in is the order
			// they ran in even on a loaded machine.
			tokens := 4
			if prio == 1 {
				tokens = 1000
			}
			body := fmt.Sprintf(`{"model":"rill-tiny","prompt":"The fox","max_tokens":%d,"ignore_eos":true,"priority":%d}`, tokens, prio)
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o := outcome{prio: prio, status: resp.StatusCode, at: time.Now()}
			if resp.StatusCode != http.StatusOK {
				if why := checkOverloaded(data); why != "" || resp.Header.Get("Retry-After") == "" {
					t.Errorf("priority %d: %d %s", prio, resp.StatusCode, why)
				}
				o.code = "engine_overloaded"
			}
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		})
	}
	send(5)
	waiting(1)
	send(1)
	waiting(2)
	send(-1) // sheds 5
	send(9)  // refused: nothing queued is served after it
	wait.Options{Bound: 30 * time.Second, Interval: 5 * time.Millisecond}.For(t, "two refusals", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == 2
	})
	cancel() // the slot comes free
	<-blocker
	wg.Wait()

	slices.SortStableFunc(outcomes, func(a, b outcome) int { return a.at.Compare(b.at) })
	var order []string
	for _, o := range outcomes {
		order = append(order, fmt.Sprintf("%d:%d", o.prio, o.status))
	}
	t.Logf("answers in order (priority:status): %v", order)
	var shed, served []int
	for _, o := range outcomes {
		if o.status == http.StatusOK {
			served = append(served, o.prio)
		} else {
			shed = append(shed, o.prio)
		}
	}
	slices.Sort(shed)
	if !slices.Equal(shed, []int{5, 9}) || !slices.Equal(served, []int{-1, 1}) {
		t.Fatalf("shed %v, served in order %v: want 5 and 9 shed, then -1 served before 1", shed, served)
	}
}
