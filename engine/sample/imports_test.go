package sample

import (
	"testing"

	"rill/internal/layering"
)

// TestImportsNoBackend: sampling turns logits into tokens wherever the
// logits were computed, so neither this package nor anything it imports may
// import a compute backend (its softmax is its own, see softmax.go).
func TestImportsNoBackend(t *testing.T) {
	t.Parallel()
	imports, err := layering.Imports("rill/engine/sample")
	if err != nil {
		t.Fatal(err)
	}
	if pkg, chain, ok := layering.Reached(imports, "rill/engine/backend"); ok {
		t.Errorf("engine/sample imports %s (through %v)", pkg, chain)
	}
	if _, ok := imports["rill/engine"]; !ok {
		t.Fatal("the walk did not reach engine: it checks nothing")
	}
}
