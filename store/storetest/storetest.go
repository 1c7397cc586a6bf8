// Package storetest is the contract of store.Store as tests: every
// implementation runs Run against itself, so that the service may rely on
// the contract and not on one implementation.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"rill/store"
)

// Harness opens stores of one implementation for the tests.
type Harness struct {
	// Open returns a new, empty store that keeps keep. The test closes it
	// (a second Close must be harmless).
	Open func(t *testing.T, keep store.Retention) store.Store
	// Reopen, for durable stores, closes s and opens the same place again,
	// as a restarted process would; nil for stores that keep nothing past
	// Close.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// Run runs the contract's tests against h's stores.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		keep store.Retention
		run  func(t *testing.T, s store.Store)
	}{
		{"Responses", store.Retention{}, testResponses},
		{"Lineage", store.Retention{}, testLineage},
		{"LineageCycle", store.Retention{}, testLineageCycle},
		{"Streams", store.Retention{}, testStreams},
		{"Events", store.Retention{}, testEvents},
		{"MaxResponses", store.Retention{MaxResponses: 2}, testMaxResponses},
		{"MaxAge", store.Retention{MaxAge: time.Hour}, testMaxAge},
		{"MaxBytes", store.Retention{MaxBytes: 1000}, testMaxBytes},
		{"Concurrent", store.Retention{}, testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.Open(t, tc.keep)
			t.Cleanup(func() { s.Close() })
			tc.run(t, s)
		})
	}
	t.Run("Closed", func(t *testing.T) {
		s := h.Open(t, store.Retention{})
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := s.PutResponse(context.Background(), resp("a", "")); err == nil {
			t.Error("PutResponse after Close succeeded")
		}
		if _, err := s.GetStream(context.Background(), "a"); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetStream after Close: %v, want an error other than not found", err)
		}
	})
	if h.Reopen != nil {
		t.Run("Reopen", func(t *testing.T) { testReopen(t, h) })
	}
}

func resp(id, parent string) store.Response {
	return store.Response{ID: id, Parent: parent, Items: []string{"msg_" + id},
		Data: []byte(`{"id":"` + id + `"}`), Created: time.Now()}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: %v, want store.ErrNotFound", what, err)
	}
}

func ids(rs []store.Response) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func testResponses(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetResponse(ctx, "a")
	wantNotFound(t, "get before put", err)
	a := resp("a", "")
	a.Items = []string{"msg_a", "fc_a"}
	if err := s.PutResponse(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetResponse(ctx, "a")
	if err != nil || got.ID != "a" || string(got.Data) != string(a.Data) || !slices.Equal(got.Items, a.Items) || got.Parent != "" {
		t.Fatalf("get a: %+v, %v", got, err)
	}
	if !got.Created.Round(time.Millisecond).Equal(a.Created.Round(time.Millisecond)) &&
		got.Created.Sub(a.Created).Abs() > time.Millisecond {
		t.Errorf("created %v, stored %v", got.Created, a.Created)
	}
	if got, err := s.ResponseByItem(ctx, "fc_a"); err != nil || got.ID != "a" {
		t.Errorf("by item fc_a: %+v, %v", got, err)
	}
	_, err = s.ResponseByItem(ctx, "msg_zz")
	wantNotFound(t, "by unknown item", err)

	a2 := a
	a2.Data = []byte(`{"id":"a","v":2}`)
	a2.Items = []string{"msg_a2"}
	if err := s.PutResponse(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetResponse(ctx, "a"); err != nil || string(got.Data) != string(a2.Data) {
		t.Errorf("replaced a: %+v, %v", got, err)
	}
	if got, err := s.ResponseByItem(ctx, "msg_a2"); err != nil || got.ID != "a" {
		t.Errorf("by the replacement's item: %+v, %v", got, err)
	}

	if err := s.DeleteResponse(ctx, "a"); err != nil {
		t.Fatalf("delete a: %v", err)
	}
	_, err = s.GetResponse(ctx, "a")
	wantNotFound(t, "get after delete", err)
	_, err = s.ResponseByItem(ctx, "msg_a2")
	wantNotFound(t, "by item after delete", err)
	wantNotFound(t, "second delete", s.DeleteResponse(ctx, "a"))
	_, err = s.Lineage(ctx, "a", 0)
	wantNotFound(t, "lineage of a deleted response", err)
}

func testLineage(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, r := range []store.Response{resp("a", ""), resp("b", "a"), resp("c", "b"), resp("x", "gone")} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	check := func(id string, max int, want ...string) {
		t.Helper()
		got, err := s.Lineage(ctx, id, max)
		if err != nil || !slices.Equal(ids(got), want) {
			t.Errorf("lineage %s max %d: %v, %v; want %v", id, max, ids(got), err, want)
		}
	}
	check("c", 0, "c", "b", "a")
	check("c", 2, "c", "b")
	check("x", 0, "x") // its parent was never stored
	// Deleting the middle hides it but keeps c's conversation whole.
	if err := s.DeleteResponse(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	check("c", 0, "c", "b", "a")
	if got, err := s.Lineage(ctx, "c", 0); err == nil && len(got) == 3 && string(got[1].Data) != `{"id":"b"}` {
		t.Errorf("hidden b's data: %s", got[1].Data)
	}
	// Deleting c leaves nothing naming b: b goes for good, and a response
	// that names b afterwards finds no parent.
	if err := s.DeleteResponse(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutResponse(ctx, resp("d", "b")); err != nil {
		t.Fatal(err)
	}
	check("d", 0, "d")
	check("a", 0, "a")
	// A hidden response kept for its child goes once the child, replaced,
	// names another parent.
	for _, r := range []store.Response{resp("p", ""), resp("q", "p")} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteResponse(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	check("q", 0, "q", "p")
	if err := s.PutResponse(ctx, resp("q", "a")); err != nil {
		t.Fatal(err)
	}
	check("q", 0, "q", "a")
	if err := s.PutResponse(ctx, resp("r", "p")); err != nil {
		t.Fatal(err)
	}
	check("r", 0, "r")
}

// testLineageCycle: replacing responses can close a cycle of parents; a
// walk along it ends instead of running for ever.
func testLineageCycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, r := range []store.Response{resp("p", ""), resp("q", "p"), resp("p", "q")} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Lineage(ctx, "p", 0)
	if err != nil || !slices.Equal(ids(got), []string{"p", "q"}) {
		t.Errorf("lineage along a cycle: %v, %v; want [p q]", ids(got), err)
	}
}

func testStreams(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetStream(ctx, "s1")
	wantNotFound(t, "get before put", err)
	t0 := time.Now().Add(-time.Minute)
	if err := s.PutStream(ctx, store.Stream{ID: "s1", Status: "queued", Data: []byte("in"), Created: t0, Updated: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStream(ctx, store.Stream{ID: "s1", Status: "in_progress", Data: []byte("in2"), Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetStream(ctx, "s1")
	if err != nil || got.Status != "in_progress" || string(got.Data) != "in2" {
		t.Fatalf("get s1: %+v, %v", got, err)
	}
	if got.Created.Sub(t0).Abs() > time.Millisecond || !got.Updated.After(got.Created) {
		t.Errorf("times: created %v (put %v), updated %v", got.Created, t0, got.Updated)
	}
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetStream(ctx, "s1")
	wantNotFound(t, "get after delete", err)
	wantNotFound(t, "second delete", s.DeleteStream(ctx, "s1"))
}

func events(seqs ...int64) []store.Event {
	var out []store.Event
	for _, q := range seqs {
		out = append(out, store.Event{Seq: q, Data: []byte(fmt.Sprintf(`{"n":%d}`, q))})
	}
	return out
}

func seqs(evs []store.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
		if want := fmt.Sprintf(`{"n":%d}`, e.Seq); string(e.Data) != want {
			out = append(out, -1) // data not as appended: fails the comparison
		}
	}
	return out
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantNotFound(t, "append to no stream", s.AppendEvents(ctx, "s", events(0)))
	_, err := s.Events(ctx, "s", -1, 0)
	wantNotFound(t, "events of no stream", err)
	if err := s.PutStream(ctx, store.Stream{ID: "s", Status: "in_progress"}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, "s", -1, 0); err != nil || len(evs) != 0 {
		t.Fatalf("empty log: %v, %v", seqs(evs), err)
	}
	if err := s.AppendEvents(ctx, "s", events(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	// A retried append repeats 1 and 2: skipped, 3 and 5 land.
	if err := s.AppendEvents(ctx, "s", events(1, 2, 3, 5)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after int64
		limit int
		want  []int64
	}{
		{-1, 0, []int64{0, 1, 2, 3, 5}},
		{1, 0, []int64{2, 3, 5}},
		{3, 0, []int64{5}},
		{4, 0, []int64{5}},
		{5, 0, nil},
		{-1, 2, []int64{0, 1}},
		{2, 1, []int64{3}},
	} {
		evs, err := s.Events(ctx, "s", tc.after, tc.limit)
		if err != nil || !slices.Equal(seqs(evs), tc.want) {
			t.Errorf("events after %d limit %d: %v, %v; want %v", tc.after, tc.limit, seqs(evs), err, tc.want)
		}
	}
	if err := s.DeleteStream(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	// A stream made again under the same id starts an empty log.
	if err := s.PutStream(ctx, store.Stream{ID: "s", Status: "queued"}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, "s", -1, 0); err != nil || len(evs) != 0 {
		t.Errorf("log of a stream made again: %v, %v", seqs(evs), err)
	}
}

func testMaxResponses(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c"} {
		r := resp(id, "")
		if id == "c" {
			r.Parent = "a"
		}
		r.Created = time.Now().Add(time.Duration(i-3) * time.Second)
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Sweep(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	// a, the oldest, is hidden; c still reaches it.
	_, err := s.GetResponse(ctx, "a")
	wantNotFound(t, "the oldest of three, two kept", err)
	for _, id := range []string{"b", "c"} {
		if _, err := s.GetResponse(ctx, id); err != nil {
			t.Errorf("get %s: %v", id, err)
		}
	}
	if got, err := s.Lineage(ctx, "c", 0); err != nil || !slices.Equal(ids(got), []string{"c", "a"}) {
		t.Errorf("lineage c: %v, %v", ids(got), err)
	}
}

func testMaxAge(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	old, fresh := resp("old", ""), resp("fresh", "")
	old.Created = now.Add(-2 * time.Hour)
	for _, r := range []store.Response{old, fresh} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []store.Stream{
		{ID: "old", Status: "completed", Created: now.Add(-3 * time.Hour), Updated: now.Add(-2 * time.Hour)},
		{ID: "fresh", Status: "completed", Created: now.Add(-3 * time.Hour), Updated: now},
	} {
		if err := s.PutStream(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendEvents(ctx, "old", events(0, 1)); err != nil {
		t.Fatal(err)
	}
	r, n, err := s.Sweep(ctx, now)
	if err != nil || r != 1 || n != 1 {
		t.Errorf("sweep: %d responses, %d streams, %v; want 1, 1", r, n, err)
	}
	_, err = s.GetResponse(ctx, "old")
	wantNotFound(t, "an expired response", err)
	_, err = s.GetStream(ctx, "old")
	wantNotFound(t, "an expired stream", err)
	_, err = s.Events(ctx, "old", -1, 0)
	wantNotFound(t, "an expired stream's events", err)
	if _, err := s.GetResponse(ctx, "fresh"); err != nil {
		t.Error(err)
	}
	if _, err := s.GetStream(ctx, "fresh"); err != nil {
		t.Error(err)
	}
}

func testMaxBytes(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	big := make([]byte, 400)
	for i, id := range []string{"r1", "r2", "r3"} {
		r := resp(id, "")
		r.Data = big
		r.Created = now.Add(time.Duration(i-10) * time.Second)
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Sweep(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	// 1,200 bytes of data over a bound of 1,000: the oldest went.
	_, err := s.GetResponse(ctx, "r1")
	wantNotFound(t, "the oldest over the size bound", err)
	for _, id := range []string{"r2", "r3"} {
		if _, err := s.GetResponse(ctx, id); err != nil {
			t.Errorf("get %s: %v", id, err)
		}
	}
}

func testConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	const writers, n = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*3)
	for w := range writers {
		id := fmt.Sprintf("s%d", w)
		if err := s.PutStream(ctx, store.Stream{ID: id, Status: "in_progress"}); err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { // the stream's one writer
			defer wg.Done()
			for i := range n {
				if err := s.AppendEvents(ctx, id, events(int64(i))); err != nil {
					errs <- err
					return
				}
			}
			if err := s.PutResponse(ctx, resp("r"+id, "")); err != nil {
				errs <- err
			}
		}()
		go func() { // a reader following it
			defer wg.Done()
			last := int64(-1)
			for deadline := time.Now().Add(30 * time.Second); last < n-1 && time.Now().Before(deadline); {
				evs, err := s.Events(ctx, id, last, 7)
				if err != nil {
					errs <- err
					return
				}
				for _, e := range evs {
					if e.Seq != last+1 {
						errs <- fmt.Errorf("stream %s: event %d after %d", id, e.Seq, last)
						return
					}
					last = e.Seq
				}
			}
			if last != n-1 {
				errs <- fmt.Errorf("stream %s: reader stopped at %d", id, last)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t, store.Retention{})
	for _, r := range []store.Response{resp("a", ""), resp("b", "a")} {
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteResponse(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStream(ctx, store.Stream{ID: "s", Status: "in_progress", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, "s", events(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { s.Close() })
	if got, err := s.Lineage(ctx, "b", 0); err != nil || !slices.Equal(ids(got), []string{"b", "a"}) {
		t.Errorf("lineage after reopen: %v, %v", ids(got), err)
	}
	_, err := s.GetResponse(ctx, "a")
	wantNotFound(t, "deleted before reopen", err)
	if st, err := s.GetStream(ctx, "s"); err != nil || st.Status != "in_progress" || string(st.Data) != "x" {
		t.Errorf("stream after reopen: %+v, %v", st, err)
	}
	if evs, err := s.Events(ctx, "s", 0, 0); err != nil || !slices.Equal(seqs(evs), []int64{1, 2}) {
		t.Errorf("events after reopen: %v, %v", seqs(evs), err)
	}
	// The log goes on where it was.
	if err := s.AppendEvents(ctx, "s", events(2, 3)); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, "s", -1, 0); err != nil || !slices.Equal(seqs(evs), []int64{0, 1, 2, 3}) {
		t.Errorf("events appended after reopen: %v, %v", seqs(evs), err)
	}
}
