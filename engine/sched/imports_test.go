package sched

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNoModel holds the design's boundary: the scheduler plans with
// token counts and block tables only, so neither it nor anything it imports
// (transitively) may import the model, the tokenizer, chat templates or a
// backend.
func TestImportsNoModel(t *testing.T) {
	t.Parallel()
	forbidden := []string{"rill/engine/model", "rill/engine/tokenizer", "rill/engine/chat", "rill/engine/backend"}
	root, err := filepath.Abs("../..") // the module root, from engine/sched
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(path string, chain []string)
	walk = func(path string, chain []string) {
		if seen[path] {
			return
		}
		seen[path] = true
		for _, f := range forbidden {
			if path == f || strings.HasPrefix(path, f+"/") {
				t.Errorf("engine/sched imports %s (through %s)", path, strings.Join(chain, " -> "))
			}
		}
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, "rill")), 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if imp == "rill" || strings.HasPrefix(imp, "rill/") {
				walk(imp, append(chain, imp))
			}
		}
	}
	walk("rill/engine/sched", []string{"rill/engine/sched"})
	if !seen["rill/engine/kvcache"] {
		t.Fatal("the walk did not reach engine/kvcache: it checks nothing")
	}
}
