package wait

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// fatalRecorder stands for a test that For may fail: it records the
// failure instead of ending the goroutine.
type fatalRecorder struct {
	testing.TB
	failure string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
}

// TestWait runs each wait in a synctest bubble, whose clock moves only
// while every goroutine of the bubble sleeps: the elapsed times are exact,
// and a wait of ten seconds takes none.
func TestWait(t *testing.T) {
	t.Parallel()
	never := func(time.Duration, int) bool { return false }
	for _, tc := range []struct {
		name string
		opts Options
		// cond is asked with the time since the wait began and how many
		// times it was asked before.
		cond      func(since time.Duration, calls int) bool
		wantOK    bool
		wantCalls int
		wantSince time.Duration
	}{
		{"true at once", Options{}, func(time.Duration, int) bool { return true }, true, 1, 0},
		{"true on the fifth check", Options{}, func(_ time.Duration, calls int) bool { return calls == 4 }, true, 5, 4 * DefaultInterval},
		{"true after three seconds", Options{}, func(since time.Duration, _ int) bool { return since >= 3*time.Second },
			true, 3001, 3 * time.Second},
		{"true just at the bound", Options{}, func(since time.Duration, _ int) bool { return since >= DefaultBound },
			true, 10001, DefaultBound},
		{"never: the default bound", Options{}, never, false, 10001, DefaultBound},
		{"never: a bound of its own", Options{Bound: 50 * time.Millisecond}, never, false, 51, 50 * time.Millisecond},
		{"an interval of its own", Options{Interval: 30 * time.Millisecond},
			func(_ time.Duration, calls int) bool { return calls == 2 }, true, 3, 60 * time.Millisecond},
		{"the last pause is cut to the bound", Options{Bound: 50 * time.Millisecond, Interval: 30 * time.Millisecond},
			never, false, 3, 50 * time.Millisecond},
		{"an interval over the bound", Options{Bound: 5 * time.Millisecond, Interval: time.Second},
			never, false, 2, 5 * time.Millisecond},
		{"negative options mean the defaults", Options{Bound: -1, Interval: -1}, never, false, 10001, DefaultBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, via := range []string{"Until", "For"} {
				synctest.Test(t, func(t *testing.T) {
					start := time.Now()
					calls := 0
					cond := func() bool {
						ok := tc.cond(time.Since(start), calls)
						calls++
						return ok
					}
					var ok bool
					rec := &fatalRecorder{TB: t}
					switch via {
					case "Until":
						ok = tc.opts.Until(cond)
					case "For":
						tc.opts.For(rec, "the thing", cond)
						ok = rec.failure == ""
					}
					since := time.Since(start)
					if ok != tc.wantOK || calls != tc.wantCalls || since != tc.wantSince {
						t.Errorf("%s: %v after %d checks and %v; want %v after %d checks and %v",
							via, ok, calls, since, tc.wantOK, tc.wantCalls, tc.wantSince)
					}
					if !ok && via == "For" && !strings.Contains(rec.failure, "waiting for the thing") {
						t.Errorf("For failed with %q, which does not say what it waited for", rec.failure)
					}
				})
			}
		})
	}
}

// TestDefaults: the package-level functions are the zero Options'.
func TestDefaults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if Until(func() bool { return false }) {
			t.Error("Until reported a condition that never held")
		}
		if since := time.Since(start); since != DefaultBound {
			t.Errorf("Until gave up after %v, want %v", since, DefaultBound)
		}
		rec := &fatalRecorder{TB: t}
		start = time.Now()
		For(rec, "the thing", func() bool { return time.Since(start) >= time.Second })
		if rec.failure != "" {
			t.Errorf("For failed on a condition that held after a second: %s", rec.failure)
		}
		For(rec, "the other thing", func() bool { return false })
		if want := "gave up after 10s waiting for the other thing"; rec.failure != want {
			t.Errorf("For failed with %q, want %q", rec.failure, want)
		}
	})
}
