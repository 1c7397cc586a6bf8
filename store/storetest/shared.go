package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"rill/store"
)

// RunShared runs the tests of a store that several processes share: a and
// b are two stores (two connections, as two replicas would hold) over the
// same place, and one conversation goes back and forth between them.
func RunShared(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	// The conversation alternates: each turn is stored by one replica and
	// continued by the other.
	turns := []store.Store{a, b, a, b}
	parent := ""
	var want []string
	for i, s := range turns {
		id := string(rune('a' + i))
		if parent != "" {
			got, err := s.Lineage(ctx, parent, 0)
			if err != nil || !slices.Equal(ids(got), want) {
				t.Fatalf("turn %d: the other replica's lineage of %s: %v, %v; want %v", i, parent, ids(got), err, want)
			}
		}
		if err := s.PutResponse(ctx, resp(id, parent)); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
		parent = id
	}
	if got, err := b.ResponseByItem(ctx, "msg_c"); err != nil || got.ID != "c" {
		t.Errorf("by item on the other replica: %+v, %v", got, err)
	}
	if err := b.DeleteResponse(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	_, err := a.GetResponse(ctx, "d")
	wantNotFound(t, "a response the other replica deleted", err)

	// A stream written by one replica is followed by the other, and
	// appends retried through the other replica are skipped.
	if err := a.PutStream(ctx, store.Stream{ID: "s", Status: "in_progress", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := a.AppendEvents(ctx, "s", events(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if evs, err := b.Events(ctx, "s", 0, 0); err != nil || !slices.Equal(seqs(evs), []int64{1, 2}) {
		t.Errorf("events on the other replica: %v, %v", seqs(evs), err)
	}
	if err := b.AppendEvents(ctx, "s", events(2, 3)); err != nil {
		t.Fatal(err)
	}
	if err := b.PutStream(ctx, store.Stream{ID: "s", Status: "completed", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if st, err := a.GetStream(ctx, "s"); err != nil || st.Status != "completed" {
		t.Errorf("stream on the first replica: %+v, %v", st, err)
	}
	if evs, err := a.Events(ctx, "s", -1, 0); err != nil || !slices.Equal(seqs(evs), []int64{0, 1, 2, 3}) {
		t.Errorf("events on the first replica: %v, %v", seqs(evs), err)
	}

	// Both replicas make the same new streams at the same moment: each
	// put succeeds, one after the other.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for round := range 20 {
		id := fmt.Sprintf("new%d", round)
		for _, s := range []store.Store{a, b} {
			wg.Go(func() { errs <- s.PutStream(ctx, store.Stream{ID: id, Status: "queued"}) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a stream put by both replicas at once: %v", err)
		}
	}
}
