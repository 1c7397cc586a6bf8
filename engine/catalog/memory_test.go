package catalog

import (
	"testing"
	"time"
	"weak"

	"rill/engine"
)

// TestUnloadCollectsTheModel checks that every way a model leaves frees
// it by the time the unload ends: the unload's own collection (which
// returns the memory to the OS) must find the engine unreachable. The test
// runs no collection itself; one it ran would free the engine later and
// hide a reference the unload still held.
func TestUnloadCollectsTheModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		unload func(t *testing.T, c *Catalog)
	}{
		{name: "operator", unload: func(t *testing.T, c *Catalog) {
			if err := c.UnloadModel(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "evicted", opts: Options{MaxLoaded: 1}, unload: func(t *testing.T, c *Catalog) {
			if err := c.LoadModel(t.Context(), "b"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "idle", opts: Options{TTL: 20 * time.Millisecond}, unload: func(t *testing.T, c *Catalog) {
			eventually(t, "the idle unload", func() bool { return c.Lifecycle()[0].Unloads[engine.UnloadIdle] == 1 })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a weak.Pointer[fakeEngine]
			open := func(id string) func() (Engine, error) {
				return func() (Engine, error) {
					f := &fakeEngine{id: id}
					if id == "a" {
						a = weak.Make(f)
					}
					return f, nil
				}
			}
			c, err := New([]Model{{ID: "a", Open: open("a")}, {ID: "b", Open: open("b")}}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A request that ran to its end must not keep the model either.
			st, err := c.Generate(t.Context(), &engine.Request{Model: "a", Prompt: "hi"})
			if err != nil {
				t.Fatal(err)
			}
			a.Value().finish()
			drain(t, st)
			tc.unload(t, c)
			if a.Value() != nil {
				t.Error("the unloaded model's engine is still reachable after the unload's collection: its memory stays resident")
			}
		})
	}
}
