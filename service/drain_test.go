package service

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"rill/internal/wait"
)

// TestDrain: during shutdown a running WebSocket request finishes, a new
// create on the same connection is refused with a 503, and Drain returns
// once the last request has ended.
func TestDrain(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	e.models = testModels
	s := New(Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler), PingInterval: -1})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("a", chatBody("slow a")))
	msgs := waitFirst(t, c, "a")

	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		drained <- s.Drain(ctx)
	}()
	// Drain has begun once a create is refused.
	i := 0
	wait.For(t, "a create to be refused while draining", func() bool {
		id := string(rune('b' + i%20))
		i++
		sendWS(t, c, createMsg(id, chatBody("late "+id)))
		for {
			m := readWS(t, c)
			msgs = append(msgs, m)
			if m.id() == id && m.terminal() {
				return m.Type == "error" && m.Status == 503 && m.code() == "server_shutting_down"
			}
		}
	})
	for !terminalFor(msgs, "a") {
		msgs = append(msgs, readWS(t, c))
	}
	for _, m := range msgs {
		if m.id() == "a" && m.terminal() && m.Type != "done" {
			t.Fatalf("the running request was cut short: %s", m.raw)
		}
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return after the last request ended")
	}
}

func terminalFor(msgs []wsMsg, id string) bool {
	for _, m := range msgs {
		if m.id() == id && m.terminal() {
			return true
		}
	}
	return false
}
