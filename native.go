package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"rill/config"
	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/router"
	"rill/engine/sched"
	"rill/engine/testmodel"
	"rill/engine/upstream"
)

// nativeFlags are the model and engine flags shared by serve and generate.
type nativeFlags struct {
	model   string
	ctxLen  int
	kvMem   int64
	batch   int
	threads int
	modelID string
	kvType  string

	draftModel  string
	spec        string
	draftTokens int

	// description and ownedBy, when set, are what /v1/models shows; they
	// come from a configuration file, not from flags.
	description string
	ownedBy     string
}

// openNative loads the GGUF model at f.model, or the embedded test model
// when it is empty, and starts the native engine on it.
func openNative(f nativeFlags, log *slog.Logger) (*sched.Engine, error) {
	var m *model.Model
	kvType, err := model.ParseKVType(f.kvType)
	if err != nil {
		return nil, err
	}
	opts := sched.Options{
		KVType:         kvType,
		ID:             f.modelID,
		ContextLength:  f.ctxLen,
		KVCacheBytes:   f.kvMem,
		MaxBatchTokens: f.batch,
		Threads:        f.threads,
		Logger:         log,
		OwnedBy:        f.ownedBy,
	}
	if f.model == "" {
		data, err := testmodel.Bytes(testmodel.Target(quant.F32))
		if err != nil {
			return nil, fmt.Errorf("embedded test model: %w", err)
		}
		gf, err := gguf.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("embedded test model: %w", err)
		}
		if m, err = model.Load(gf); err != nil {
			return nil, fmt.Errorf("embedded test model: %w", err)
		}
		opts.Description = "embedded test model: tiny llama with random weights from a fixed seed (it proves the pipes, not the prose); pass --model FILE.gguf for a real model"
		log.Warn("no --model given: serving the embedded test model (random weights, not a real language model)",
			slog.String("model", m.Config.Name))
	} else {
		var err error
		if m, err = model.Open(f.model); err != nil {
			return nil, err
		}
		if opts.ID == "" {
			opts.ID = modelIDFromPath(f.model)
		}
		log.Info("model loaded", slog.String("path", f.model), slog.String("arch", m.Config.Arch),
			slog.Int("layers", m.Config.Layers), slog.Int("embd", m.Config.Embd), slog.Int("vocab", m.Config.VocabSize))
	}
	if f.description != "" {
		opts.Description = f.description
	}
	switch f.spec {
	case "":
	case "ngram":
		opts.NGram = true
	default:
		m.Close()
		return nil, fmt.Errorf("--spec %q: want ngram", f.spec)
	}
	opts.DraftTokens = f.draftTokens
	if f.draftModel != "" {
		if opts.NGram {
			m.Close()
			return nil, fmt.Errorf("--spec ngram and --draft-model exclude each other")
		}
		d, err := loadDraft(f.draftModel)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("draft model: %w", err)
		}
		opts.Draft = d
		log.Info("draft model loaded", slog.String("path", f.draftModel), slog.String("name", d.Config.Name),
			slog.Int("layers", d.Config.Layers))
	}
	e, err := sched.New(m, opts)
	if err != nil {
		m.Close()
		if opts.Draft != nil {
			opts.Draft.Close()
		}
		return nil, err
	}
	return e, nil
}

// loadDraft opens the draft model at path; "embedded" is the embedded test
// model's draft.
func loadDraft(path string) (*model.Model, error) {
	if path != "embedded" {
		return model.Open(path)
	}
	data, err := testmodel.Bytes(testmodel.Draft(quant.F32))
	if err != nil {
		return nil, err
	}
	gf, err := gguf.Parse(data)
	if err != nil {
		return nil, err
	}
	return model.Load(gf)
}

// modelIDFromPath names a model after its file, as llama.cpp's server does:
// "models/stories260K.gguf" is "stories260K".
func modelIDFromPath(path string) string {
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

func (f *nativeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "", "GGUF model file (default: the embedded test model)")
	fs.StringVar(&f.modelID, "model-id", "", "model name clients use (default: the file name without .gguf)")
	fs.IntVar(&f.ctxLen, "ctx", 0, "context length in tokens (default: the model's)")
	fs.Int64Var(&f.kvMem, "kv-cache-mem", 0, "KV cache memory budget in bytes (default: 4 full contexts, at most 1 GiB)")
	fs.IntVar(&f.batch, "batch-tokens", 0, "token budget of one forward pass (default 512)")
	fs.IntVar(&f.threads, "threads", 0, "CPU threads (default: GOMAXPROCS)")
	fs.StringVar(&f.draftModel, "draft-model", "", "GGUF draft model for speculative decoding (same vocabulary as --model); \"embedded\" is the embedded test model's draft")
	fs.StringVar(&f.spec, "spec", "", "speculative decoding without a draft model: \"ngram\" (prompt lookup); requests' predicted outputs draft either way")
	fs.IntVar(&f.draftTokens, "draft-tokens", 0, "most tokens drafted per step (default 4)")
	fs.StringVar(&f.kvType, "kv-cache-type", "f16", "KV cache element type: f16 (llama.cpp's numerics, half the memory) or f32 (exact)")
}

// openConfig starts the engines of the configuration file at path, native
// and upstream, behind one router that serves them all by model id.
func openConfig(path string, log *slog.Logger) (*router.Router, error) {
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	var engines []engine.Engine
	fail := func(err error) (*router.Router, error) {
		for i := len(engines) - 1; i >= 0; i-- {
			if c, ok := engines[i].(io.Closer); ok {
				c.Close()
			}
		}
		return nil, err
	}
	for i := range f.Models {
		m := &f.Models[i]
		if n := m.Native; n != nil {
			nf := nativeFlags{
				model: n.Model, modelID: m.ID, ctxLen: m.ContextLength, kvMem: int64(n.KVCacheMem),
				batch: n.BatchTokens, threads: n.Threads, kvType: n.KVCacheType,
				draftModel: n.DraftModel, spec: n.Spec, draftTokens: n.DraftTokens,
				description: m.Description, ownedBy: m.OwnedBy,
			}
			if nf.model == config.Embedded {
				nf.model = ""
			}
			e, err := openNative(nf, log)
			if err != nil {
				return fail(fmt.Errorf("model %q: %w", m.ID, err))
			}
			engines = append(engines, e)
			continue
		}
		e, err := upstream.New(m.UpstreamOptions(log))
		if err != nil {
			return fail(fmt.Errorf("model %q: %w", m.ID, err))
		}
		engines = append(engines, e)
		log.Info("upstream model", slog.String("model", m.ID), slog.String("kind", m.Upstream.Kind),
			slog.Int("replicas", len(m.Upstream.Replicas)))
	}
	r, err := router.New(engines...)
	if err != nil {
		return fail(err)
	}
	return r, nil
}

// nativeFlagNames are the names of the flags register defines, which a
// configuration file replaces.
func nativeFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var nf nativeFlags
	nf.register(fs)
	names := make(map[string]bool)
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}
