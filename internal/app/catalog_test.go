package app

import (
	"io"
	"log/slog"
	"testing"
	"weak"

	"rill/config"
	"rill/engine"
	"rill/engine/catalog"
	"rill/engine/native"
)

// TestCatalogUnloadFreesNativeModel loads a native model through the
// catalogue, serves a request on it and unloads it: the unload's own
// collection must find the engine (and so its weights and KV cache)
// unreachable, or its memory stays resident. The test runs no collection
// of its own, which would free a model the unload left behind.
func TestCatalogUnloadFreesNativeModel(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := catalogModel(&config.Model{ID: "a", Native: &config.Native{Model: config.Embedded, KVCacheMem: 1 << 20, Threads: 1}}, 0, nil, log)
	var eng weak.Pointer[native.Engine]
	open := m.Open
	m.Open = func() (catalog.Engine, error) {
		e, err := open()
		if ne, ok := e.(*native.Engine); ok {
			eng = weak.Make(ne)
		}
		return e, err
	}
	c, err := catalog.New([]catalog.Model{m}, catalog.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Generate(t.Context(), &engine.Request{Model: "a", Prompt: "hi", MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := engine.Recv(st); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if eng.Value() == nil {
		t.Fatal("the model's engine was not a native engine, or was freed while loaded")
	}
	if err := c.UnloadModel(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if eng.Value() != nil {
		t.Error("the unloaded model's native engine is still reachable after the unload's collection: its memory stays resident")
	}
}
