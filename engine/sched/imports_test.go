package sched

import (
	"testing"

	"rill/internal/layering"
)

// TestImportsNoModel holds the design's boundary: the scheduler plans with
// token counts and block tables only, so neither it nor anything it imports
// (transitively) may import the model, the tokenizer, chat templates or a
// backend.
func TestImportsNoModel(t *testing.T) {
	t.Parallel()
	imports, err := layering.Imports("rill/engine/sched")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rill/engine/model", "rill/engine/tokenizer", "rill/engine/chat", "rill/engine/backend"} {
		if pkg, chain, ok := layering.Reached(imports, f); ok {
			t.Errorf("engine/sched imports %s (through %v)", pkg, chain)
		}
	}
	if _, ok := imports["rill/engine/kvcache"]; !ok {
		t.Fatal("the walk did not reach engine/kvcache: it checks nothing")
	}
}
