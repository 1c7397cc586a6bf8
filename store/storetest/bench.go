package storetest

import (
	"context"
	"fmt"
	"testing"

	"rill/store"
)

// Bench measures what the service does most with a store: append a
// response's events as it streams (1,000 events in batches of 16), read a
// stored response back, and walk a conversation of 20 turns. open returns
// a new, empty store; Bench closes it.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	ctx := context.Background()
	data := []byte(`{"type":"response.output_text.delta","sequence_number":0,"item_id":"msg_0123456789abcdef","output_index":0,"content_index":0,"delta":" token"}`)
	b.Run("Append1000x16", func(b *testing.B) {
		s := open(b)
		defer s.Close()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("s%d", i)
			if err := s.PutStream(ctx, store.Stream{ID: id, Status: "in_progress"}); err != nil {
				b.Fatal(err)
			}
			batch := make([]store.Event, 0, 16)
			for q := range int64(1000) {
				batch = append(batch, store.Event{Seq: q, Data: data})
				if len(batch) == 16 || q == 999 {
					if err := s.AppendEvents(ctx, id, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
		}
	})
	b.Run("GetResponse", func(b *testing.B) {
		s := open(b)
		defer s.Close()
		r := resp("r", "")
		r.Data = make([]byte, 4096)
		if err := s.PutResponse(ctx, r); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.GetResponse(ctx, "r"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Lineage20", func(b *testing.B) {
		s := open(b)
		defer s.Close()
		parent := ""
		for i := range 20 {
			id := fmt.Sprintf("r%d", i)
			r := resp(id, parent)
			r.Data = make([]byte, 1024)
			if err := s.PutResponse(ctx, r); err != nil {
				b.Fatal(err)
			}
			parent = id
		}
		b.ReportAllocs()
		for b.Loop() {
			if got, err := s.Lineage(ctx, parent, 0); err != nil || len(got) != 20 {
				b.Fatalf("lineage: %d, %v", len(got), err)
			}
		}
	})
}
