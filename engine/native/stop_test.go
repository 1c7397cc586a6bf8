package native

import (
	"strings"
	"testing"
)

func TestStopper(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stops   []string
		pieces  []string
		want    []string // emitted per push, then the flush
		stopped bool
	}{
		{"no stops passes through", nil, []string{"a", "b"}, []string{"a", "b", ""}, false},
		{"stop inside one piece", []string{"Lily"}, []string{"named Lily."}, []string{"named "}, true},
		{"stop split over pieces", []string{"Lily"}, []string{"named L", "il", "y!"}, []string{"named ", "", ""}, true},
		{"false start is released", []string{"Lily"}, []string{"a L", "ion"}, []string{"a ", "Lion", ""}, false},
		{"held text flushed at the end", []string{"END"}, []string{"the E", "N"}, []string{"the ", "", "EN"}, false},
		{"earliest of several stops", []string{"cd", "b"}, []string{"abcd"}, []string{"a"}, true},
		{"multi-byte stop", []string{"né"}, []string{"café n", "é"}, []string{"café ", ""}, true},
		{"overlapping prefixes", []string{"aab"}, []string{"aa", "aab"}, []string{"", "aa"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stopper{stops: tc.stops}
			var got []string
			stopped := false
			for _, p := range tc.pieces {
				e, st := s.push(p)
				got = append(got, e)
				if st {
					stopped = true
					break
				}
			}
			if !stopped {
				got = append(got, s.flush())
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || stopped != tc.stopped {
				t.Fatalf("got %q stopped=%v, want %q stopped=%v", got, stopped, tc.want, tc.stopped)
			}
		})
	}
}
