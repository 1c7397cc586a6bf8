package service

import (
	"strings"
	"testing"
)

// TestApart: apart returns what f returned, and a panic in f panics the
// caller with f's value and the stack of the goroutine it ran on.
func TestApart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		f         func() (int, string)
		want      int
		wantS     string
		wantPanic []string
	}{
		{"values", func() (int, string) { return 7, "seven" }, 7, "seven", nil},
		{"zero values", func() (int, string) { return 0, "" }, 0, "", nil},
		{"panic", func() (int, string) { panic("start bug") }, 0, "", []string{"start bug", "goroutine ", "apart_test.go"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var recovered any
			var n int
			var s string
			func() {
				defer func() { recovered = recover() }()
				n, s = apart(tt.f)
			}()
			if tt.wantPanic == nil {
				if recovered != nil {
					t.Fatalf("panicked: %v", recovered)
				}
				if n != tt.want || s != tt.wantS {
					t.Errorf("apart = %d, %q; want %d, %q", n, s, tt.want, tt.wantS)
				}
				return
			}
			msg, _ := recovered.(string)
			for _, want := range tt.wantPanic {
				if !strings.Contains(msg, want) {
					t.Errorf("panic %q lacks %q", msg, want)
				}
			}
		})
	}
}
