package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"rill/config"
	"rill/engine"
	"rill/engine/catalog"
	"rill/engine/native"
	"rill/engine/promptcache"
	"rill/engine/router"
	"rill/engine/upstream"
)

// OpenCatalog opens the engines of f in catalogue mode (f.Catalog.On()):
// upstream models as always, and the native ones, with those of the
// models folder (each with the settings of template, zero for defaults),
// in a catalogue that loads them on demand. Pinned models are loaded
// before it returns.
func OpenCatalog(ctx context.Context, f *config.File, template *config.Native, log *slog.Logger) (*Engines, error) {
	ms := make([]*config.Model, 0, len(f.Models))
	for i := range f.Models {
		ms = append(ms, &f.Models[i])
	}
	split := map[string]int{}
	if dir := f.Catalog.ModelsDir; dir != "" {
		found, err := config.ScanModelsDir(dir)
		if err != nil {
			return nil, err
		}
		for _, d := range found {
			n := config.Native{}
			if template != nil {
				n = *template
			}
			n.Model = d.Files[0]
			ms = append(ms, &config.Model{ID: d.ID, Native: &n})
			if len(d.Files) > 1 {
				split[d.ID] = len(d.Files)
			}
		}
		log.Info("models folder", slog.String("dir", dir), slog.Int("models", len(found)))
	}
	caches, err := promptCaches(ms)
	if err != nil {
		return nil, err
	}
	var all []engine.Engine
	var lazy []catalog.Model
	fail := func(err error) (*Engines, error) {
		for i := len(all) - 1; i >= 0; i-- {
			if c, ok := all[i].(io.Closer); ok {
				c.Close()
			}
		}
		return nil, err
	}
	for _, m := range ms {
		if m.Native == nil {
			e, err := upstream.New(m.UpstreamOptions(log))
			if err != nil {
				return fail(fmt.Errorf("model %q: %w", m.ID, err))
			}
			all = append(all, e)
			continue
		}
		lazy = append(lazy, catalogModel(m, split[m.ID], caches, log))
	}
	if len(lazy) > 0 {
		c, err := catalog.New(lazy, catalogOptions(f.Catalog, log))
		if err != nil {
			return fail(err)
		}
		all = append(all, c)
		if err := c.LoadPinned(ctx); err != nil {
			return fail(err)
		}
	}
	if len(all) == 1 {
		return &Engines{Engine: all[0], Closer: all[0].(io.Closer)}, nil
	}
	r, err := router.New(all...)
	if err != nil {
		return fail(err)
	}
	return &Engines{Engine: r, Closer: r}, nil
}

// catalogModel is the catalogue's entry of the native model m, whose file
// is the first of parts files (0 or 1: not split).
func catalogModel(m *config.Model, parts int, caches map[string]*promptcache.Dir, log *slog.Logger) catalog.Model {
	id := m.ID
	if id == "" {
		id = modelIDFromPath(m.Native.Model)
	}
	size := int64(m.Native.KVCacheMem)
	if st, err := os.Stat(m.Native.Model); err == nil {
		size += st.Size() * int64(max(parts, 1)) // the parts are about equal
	}
	return catalog.Model{
		ID:     id,
		Card:   engine.ModelCard{Description: m.Description, OwnedBy: m.OwnedBy, ContextLength: m.ContextLength},
		TTL:    m.TTL.D(),
		Pinned: m.Pin,
		Size:   size,
		Open: func() (catalog.Engine, error) {
			if parts > 1 {
				return nil, fmt.Errorf("%s is the first of %d parts of a split GGUF, which rill cannot load yet: merge them into one file (llama-gguf-split --merge)", m.Native.Model, parts)
			}
			e, nat, err := openLocal(m, caches, log)
			if err != nil {
				return nil, err
			}
			if nat != nil {
				// Close stops the loop and waits for it.
				go runNative(nat, log)
			}
			return e, nil
		},
	}
}

func runNative(e *native.Engine, log *slog.Logger) {
	if err := e.Run(context.Background()); err != nil {
		log.Error("native engine stopped", slog.String("model", e.Models()[0].ID), slog.Any("err", err))
	}
}

// LoadModel implements engine.ModelManager with the engine it wraps
// (POST /models/load).
func (es *Engines) LoadModel(ctx context.Context, id string) error {
	mm, ok := es.Engine.(engine.ModelManager)
	if !ok {
		return fmt.Errorf("%w: model %q is always loaded", engine.ErrUnsupported, id)
	}
	return mm.LoadModel(ctx, id)
}

// UnloadModel implements engine.ModelManager as LoadModel does.
func (es *Engines) UnloadModel(ctx context.Context, id string) error {
	mm, ok := es.Engine.(engine.ModelManager)
	if !ok {
		return fmt.Errorf("%w: model %q is always loaded", engine.ErrUnsupported, id)
	}
	return mm.UnloadModel(ctx, id)
}

// Lifecycle implements engine.LifecycleReporter with the engine it wraps.
func (es *Engines) Lifecycle() []engine.ModelLifecycle {
	if lr, ok := es.Engine.(engine.LifecycleReporter); ok {
		return lr.Lifecycle()
	}
	return nil
}

// catalogOptions are the catalogue's options from the configuration's
// catalog section (flags merged in).
func catalogOptions(c config.Catalog, log *slog.Logger) catalog.Options {
	return catalog.Options{MaxLoaded: c.MaxLoaded, MemoryBudget: int64(c.Memory), TTL: c.TTL.D(),
		Grace: c.UnloadGrace.D(), Logger: log}
}
