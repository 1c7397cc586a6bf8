package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
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

// TestCatalogUnloadCutsNativeStream: a native model's stream still running
// when its unload's grace period runs out ends, after the events it had
// buffered, with engine.ErrModelUnloaded, not with the context's error
// (which the service would take for the client's cancel).
func TestCatalogUnloadCutsNativeStream(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := catalogModel(&config.Model{ID: "a", Native: &config.Native{Model: config.Embedded, KVCacheMem: 1 << 20, Threads: 1}}, 0, nil, log)
	c, err := catalog.New([]catalog.Model{m}, catalog.Options{Grace: 50 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Long, and read no further than its first event: the engine pauses
	// it once its buffer is full, so it is still running at the unload.
	st, err := c.Generate(t.Context(), &engine.Request{Model: "a", Prompt: "hi", MaxTokens: 1500, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Recv(st); err != nil {
		t.Fatal(err)
	}
	if err := c.UnloadModel(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := engine.Recv(st)
		if err == nil {
			continue
		}
		if !errors.Is(err, engine.ErrModelUnloaded) || errors.Is(err, context.Canceled) {
			t.Errorf("the cut stream ended with %v, want engine.ErrModelUnloaded and not context.Canceled", err)
		}
		break
	}
}

// TestCatalogOptions: the catalog section (with serve's flags merged in)
// reaches the catalogue, its unload grace included, which OpenCatalog once
// left at the default whatever was asked.
func TestCatalogOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   config.Catalog
		want catalog.Options
	}{
		{"defaults", config.Catalog{ModelsDir: "m"}, catalog.Options{}},
		{"everything", config.Catalog{ModelsDir: "m", MaxLoaded: 2, TTL: config.Duration(time.Minute), Memory: 1 << 30, UnloadGrace: config.Duration(2 * time.Second)},
			catalog.Options{MaxLoaded: 2, TTL: time.Minute, MemoryBudget: 1 << 30, Grace: 2 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := catalogOptions(tc.in, nil)
			if got.MaxLoaded != tc.want.MaxLoaded || got.TTL != tc.want.TTL || got.MemoryBudget != tc.want.MemoryBudget || got.Grace != tc.want.Grace {
				t.Errorf("options %+v, want %+v", got, tc.want)
			}
		})
	}
}
