// Package wait polls, in tests, for a condition that another goroutine
// makes true where nothing signals it: a log line written as a handler
// ends, a goroutine count that drops after Close, a health state that a
// checker updates on its own schedule. Every wait is bounded, so a test
// whose condition never comes fails saying what it waited for, instead of
// hanging until the test binary's timeout.
//
// Where the code under test can signal (a channel closed when a request
// reaches a test double), a test waits on that signal instead: polling is
// for states that nothing announces.
package wait

import (
	"testing"
	"time"
)

const (
	// DefaultBound is how long a wait lasts before it gives up: generous,
	// since a condition that comes at all comes within milliseconds on an
	// idle machine, and a loaded one (the race detector, parallel packages)
	// can be a hundred times slower.
	DefaultBound = 10 * time.Second
	// DefaultInterval is the pause between two checks of the condition.
	DefaultInterval = time.Millisecond
)

// Options tune a wait; the zero value waits up to DefaultBound, checking
// every DefaultInterval.
type Options struct {
	// Bound is how long to wait before giving up; zero or less means
	// DefaultBound.
	Bound time.Duration
	// Interval is the pause between checks; zero or less means
	// DefaultInterval. A caller whose condition compares successive
	// samples (a count that stopped growing) sets the pause it means.
	Interval time.Duration
}

// For waits, with the default Options, until cond holds, and fails t with
// what when the bound passes first.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Options{}.For(t, what, cond)
}

// Until waits, with the default Options, until cond holds, and reports
// whether it did before the bound passed.
func Until(cond func() bool) bool {
	return Options{}.Until(cond)
}

// For waits until cond holds, and fails t (t.Fatalf, so on the test's own
// goroutine only) with what, the thing waited for, when the bound passes
// first.
func (o Options) For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !o.Until(cond) {
		t.Fatalf("gave up after %v waiting for %s", o.bound(), what)
	}
}

// Until calls cond on the calling goroutine, at once and then after every
// interval, until it returns true or the bound has passed, and reports
// whether it returned true. cond is called once more when the bound is
// reached, so a condition that comes just in time counts. It is for callers
// whose failure message needs the state cond saw last (cond can record it),
// or whose assertions that follow report the failure themselves.
func (o Options) Until(cond func() bool) bool {
	interval := o.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	deadline := time.Now().Add(o.bound())
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(interval, left))
	}
}

func (o Options) bound() time.Duration {
	if o.Bound <= 0 {
		return DefaultBound
	}
	return o.Bound
}
