package native

import (
	"testing"

	"rill/internal/layering"
)

// TestImportsNoBackend holds the compute seam: the engine asks a Compute
// (the wiring's choice) for its runners and never imports a backend itself,
// directly or through the packages it imports.
func TestImportsNoBackend(t *testing.T) {
	t.Parallel()
	imports, err := layering.Imports("rill/engine/native")
	if err != nil {
		t.Fatal(err)
	}
	if pkg, chain, ok := layering.Reached(imports, "rill/engine/backend"); ok {
		t.Errorf("engine/native imports %s (through %v)", pkg, chain)
	}
	if _, ok := imports["rill/engine/model"]; !ok {
		t.Fatal("the walk did not reach engine/model: it checks nothing")
	}
}
