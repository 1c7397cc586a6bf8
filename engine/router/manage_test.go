package router

import (
	"context"
	"errors"
	"testing"

	"rill/engine"
)

// managed is a fake that loads its model on demand: LoadModel and
// UnloadModel flip the state its card shows.
type managed struct {
	*fake
	lifecycle []engine.ModelLifecycle
}

func (m managed) LoadModel(ctx context.Context, id string) error {
	m.models[0].State = engine.StateLoaded
	return nil
}

func (m managed) UnloadModel(ctx context.Context, id string) error {
	m.models[0].State = engine.StateUnloaded
	return nil
}

func (m managed) Lifecycle() []engine.ModelLifecycle { return m.lifecycle }

func TestRouterManagesModelsOfCatalogues(t *testing.T) {
	cat := managed{fake: &fake{models: []engine.ModelCard{{ID: "lazy", State: engine.StateUnloaded}}},
		lifecycle: []engine.ModelLifecycle{{Model: "lazy", Loads: 3}}}
	r, err := New(&fake{models: models("fixed")}, cat)
	if err != nil {
		t.Fatal(err)
	}
	state := func() string { return r.Models()[1].State }
	for _, tc := range []struct {
		name  string
		call  func(context.Context, string) error
		model string
		want  error  // nil: succeeds
		state string // of lazy afterwards
	}{
		{name: "load", call: r.LoadModel, model: "lazy", state: engine.StateLoaded},
		{name: "unload", call: r.UnloadModel, model: "lazy", state: engine.StateUnloaded},
		{name: "always loaded", call: r.LoadModel, model: "fixed", want: engine.ErrUnsupported, state: engine.StateUnloaded},
		{name: "unknown", call: r.UnloadModel, model: "nope", want: engine.ErrUnknownModel, state: engine.StateUnloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(t.Context(), tc.model)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error = %v, want %v", err, tc.want)
			}
			if got := state(); got != tc.state {
				t.Errorf("state of lazy in Models = %q, want %q", got, tc.state)
			}
		})
	}
	if lc := r.Lifecycle(); len(lc) != 1 || lc[0].Model != "lazy" || lc[0].Loads != 3 {
		t.Errorf("Lifecycle = %+v, want lazy's only", lc)
	}
}
