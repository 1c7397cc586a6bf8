package app

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"

	"rill/config"
	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/encoder"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/promptcache"
)

// localEngine is an engine of a model file of rill's own: a native
// engine or an encoder engine, which Close releases.
type localEngine interface {
	engine.Engine
	io.Closer
}

// openLocal opens the native model m describes: an encoder engine when
// its file's general.architecture is an encoder's (model.IsEncoder), a
// native engine otherwise. nat is the engine when it is native, whose
// loop must then run.
func openLocal(m *config.Model, caches map[string]*promptcache.Dir, log *slog.Logger) (e localEngine, nat *native.Engine, err error) {
	if path := m.Native.Model; path != "" && path != config.Embedded {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, nil, err
		}
		if arch, _ := f.Metadata.String("general.architecture"); model.IsEncoder(arch) {
			enc, err := openEncoder(m, f, log)
			if err != nil {
				return nil, nil, err
			}
			return enc, nil, nil
		}
		f.Close()
	}
	nat, err = openNative(m, caches, log)
	if err != nil {
		return nil, nil, err
	}
	return nat, nat, nil
}

// openEncoder serves the encoder in f, which it takes ownership of, with
// the settings of m that apply to an encoder: id, description, owner,
// context length, threads and batch tokens. A draft model is refused;
// the settings of generation (KV cache, chat template, speculation) are
// meaningless for an encoder and ignored.
func openEncoder(m *config.Model, f *gguf.File, log *slog.Logger) (*encoder.Engine, error) {
	n := m.Native
	if n.DraftModel != "" {
		f.Close()
		return nil, fmt.Errorf("%s is an encoder (embedding or reranking model), which generates nothing: it takes no draft model", n.Model)
	}
	e, err := encoder.New(f, cpu.New(cpu.Options{Threads: n.Threads}), encoder.Options{
		ID:             cmp.Or(m.ID, modelIDFromPath(n.Model)),
		Description:    m.Description,
		OwnedBy:        m.OwnedBy,
		ContextLength:  m.ContextLength,
		MaxBatchTokens: n.BatchTokens,
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", n.Model, err)
	}
	card := e.Models()[0]
	log.Info("encoder loaded", slog.String("path", n.Model), slog.String("model", card.ID),
		slog.Int("context", card.ContextLength), slog.String("kind", card.Description))
	return e, nil
}
