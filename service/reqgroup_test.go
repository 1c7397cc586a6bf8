package service

import (
	"context"
	"errors"
	"testing"
)

// TestReqGroup: a connection's requests are cancelled together with the
// group's first cause, those added after its end at once; a request taken
// off (it ended) is not touched, and one cancelled alone keeps its own
// cause.
func TestReqGroup(t *testing.T) {
	errFirst, errSecond := errors.New("first"), errors.New("second")
	tests := []struct {
		name string
		run  func(g *reqGroup, add func() context.Context) []context.Context
		want []error // each context's cause; nil: not cancelled
	}{
		{"added, then the group ends", func(g *reqGroup, add func() context.Context) []context.Context {
			a, b := add(), add()
			g.cancel(errFirst)
			return []context.Context{a, b}
		}, []error{errFirst, errFirst}},
		{"added after the end", func(g *reqGroup, add func() context.Context) []context.Context {
			g.cancel(errFirst)
			return []context.Context{add()}
		}, []error{errFirst}},
		{"the first cause counts", func(g *reqGroup, add func() context.Context) []context.Context {
			a := add()
			g.cancel(errFirst)
			g.cancel(errSecond)
			return []context.Context{a, add()}
		}, []error{errFirst, errFirst}},
		{"nothing ended", func(g *reqGroup, add func() context.Context) []context.Context {
			return []context.Context{add(), add()}
		}, []error{nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g reqGroup
			add := func() context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				g.add(&testMember{cancel})
				return ctx
			}
			for i, ctx := range tt.run(&g, add) {
				if got := context.Cause(ctx); !errors.Is(got, tt.want[i]) || (got == nil) != (tt.want[i] == nil) {
					t.Errorf("request %d: cause %v, want %v", i, got, tt.want[i])
				}
			}
		})
	}
	t.Run("taken off", func(t *testing.T) {
		var g reqGroup
		ctx, cancel := context.WithCancelCause(context.Background())
		m := &testMember{cancel}
		g.add(m)
		g.remove(m)
		g.cancel(errFirst)
		if ctx.Err() != nil {
			t.Errorf("a request taken off the group was cancelled: %v", context.Cause(ctx))
		}
		if len(g.live) != 0 {
			t.Errorf("%d requests kept", len(g.live))
		}
	})
}

// testMember is a group member that cancels its context.
type testMember struct{ cancel context.CancelCauseFunc }

func (m *testMember) cancelWith(cause error) { m.cancel(cause) }
