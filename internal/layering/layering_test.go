package layering

import (
	"slices"
	"testing"
)

func TestImports(t *testing.T) {
	t.Parallel()
	got, err := Imports("rill/engine/sched")
	if err != nil {
		t.Fatal(err)
	}
	// engine/sched imports engine/kvcache itself and engine (the errors)
	// through it and directly.
	if chain := got["rill/engine/kvcache"]; !slices.Equal(chain, []string{"rill/engine/sched", "rill/engine/kvcache"}) {
		t.Errorf("kvcache reached through %v", chain)
	}
	if _, ok := got["rill/engine/sched"]; ok {
		t.Error("a package is listed among its own imports")
	}
	tests := []struct {
		forbidden string
		want      bool
	}{
		{"rill/engine/kvcache", true},
		{"rill/engine", true}, // the prefix covers every engine package
		{"rill/engine/model", false},
		{"rill/engine/kv", false}, // a prefix of a name is not a folder
	}
	for _, tc := range tests {
		if _, _, ok := Reached(got, tc.forbidden); ok != tc.want {
			t.Errorf("Reached(%q) = %v, want %v", tc.forbidden, ok, tc.want)
		}
	}
	if _, err := Imports("rill/no/such/package"); err == nil {
		t.Error("a missing package was walked")
	}
}
