package service

import (
	"testing"
	"time"

	"rill/internal/wheel"
)

// TestPingTicker: a ping ticker ticks every period on C, whether on a
// timer of its own or on a ping wheel of its period; a hooked wait gets
// the next tick instead of C; after Stop nothing ticks.
func TestPingTicker(t *testing.T) {
	t.Parallel()
	const period = 20 * time.Millisecond
	tests := []struct {
		name  string
		wheel *wheel.Wheel
	}{
		{"own timer", nil},
		{"ping wheel", wheel.New(period, 4)},
		{"a wheel of another period", wheel.New(time.Hour, 4)}, // not used: its own timer
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPingTicker(period, tt.wheel)
			start := time.Now()
			for i := range 3 {
				select {
				case <-p.C:
				case <-time.After(2 * time.Second):
					t.Fatalf("tick %d did not come", i)
				}
			}
			if took := time.Since(start); took < 2*period {
				t.Errorf("three ticks in %v, want at least %v", took, 2*period)
			}
			hooked := make(chan struct{})
			p.onTick(func() { close(hooked) })
			select {
			case <-hooked:
			case <-time.After(2 * time.Second):
				t.Fatal("the hooked wait did not get a tick")
			}
			p.Stop()
			select {
			case <-p.C: // one tick may have been sent before Stop
			default:
			}
			select {
			case <-p.C:
				t.Error("a tick after Stop")
			case <-time.After(5 * period):
			}
		})
	}
}
