package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"rill/config"
	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/chat"
	"rill/engine/gguf"
	"rill/engine/grammar"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/native/cpurun"
	"rill/engine/promptcache"
	"rill/engine/quant"
	"rill/engine/router"
	"rill/engine/testmodel"
	"rill/engine/upstream"
	"rill/hub"
)

// embeddedDescription is what /v1/models says of the embedded test model.
const embeddedDescription = "embedded test model: tiny llama with random weights from a fixed seed (it proves the pipes, not the prose); pass --model FILE.gguf for a real model"

// openNative loads the model m describes (a native model of the
// configuration file or of the flags, already checked) and returns its
// engine, which serves once its Run runs.
func openNative(m *config.Model, caches map[string]*promptcache.Dir, log *slog.Logger) (*native.Engine, error) {
	n := m.Native
	kvType, err := model.ParseKVType(n.KVCacheType)
	if err != nil {
		return nil, err
	}
	jsonOpts, err := grammar.ParseJSONWhitespace(n.JSONWhitespace)
	if err != nil {
		return nil, err
	}
	// Before the model: loading it takes seconds to minutes.
	template, err := readChatTemplate(n.ChatTemplateFile)
	if err != nil {
		return nil, err
	}
	policy, err := engine.ParseMaxTokensPolicy(m.MaxTokensPolicy)
	if err != nil {
		return nil, err
	}
	opts := native.Options{
		ID:                m.ID,
		Description:       m.Description,
		OwnedBy:           m.OwnedBy,
		ContextLength:     m.ContextLength,
		ChatTemplate:      template,
		MaxTokensPolicy:   policy,
		KVCacheBytes:      int64(n.KVCacheMem),
		KVType:            kvType,
		MaxBatchTokens:    n.BatchTokens,
		MaxSeqs:           n.MaxSeqs,
		MaxQueuedRequests: n.MaxQueuedRequests,
		NGram:             n.Spec == "ngram",
		DraftTokens:       n.DraftTokens,
		JSON:              jsonOpts,
		Logger:            log,
		PromptCache:       promptCacheOf(caches, m),
	}
	var target *model.Model
	if n.Model == "" || n.Model == config.Embedded {
		if target, err = loadEmbedded(testmodel.Target(quant.F32)); err != nil {
			return nil, fmt.Errorf("embedded test model: %w", err)
		}
		if opts.Description == "" {
			opts.Description = embeddedDescription
		}
		log.Warn("serving the embedded test model (random weights, not a real language model)",
			slog.String("model", target.Config.Name))
	} else {
		if target, err = model.Open(n.Model); err != nil {
			return nil, err
		}
		if opts.ID == "" {
			opts.ID = modelIDFromPath(n.Model)
		}
		log.Info("model loaded", slog.String("path", n.Model), slog.String("arch", target.Config.Arch),
			slog.Int("layers", target.Config.Layers), slog.Int("embd", target.Config.Embd), slog.Int("vocab", target.Config.VocabSize))
	}
	if template != "" {
		log.Info("chat template replaced", slog.String("model", cmp.Or(opts.ID, target.Config.Name)), slog.String("file", n.ChatTemplateFile))
	}
	if n.DraftModel != "" {
		d, err := loadDraft(n.DraftModel)
		if err != nil {
			target.Close()
			return nil, fmt.Errorf("draft model: %w", err)
		}
		opts.Draft = d
		log.Info("draft model loaded", slog.String("path", n.DraftModel), slog.String("name", d.Config.Name),
			slog.Int("layers", d.Config.Layers))
	}
	// The CPU backend computes the forward passes; the engine owns it.
	compute := cpurun.New(cpu.Options{Threads: n.Threads})
	e, err := native.New(target, compute, opts)
	if err != nil {
		compute.Close()
		target.Close()
		if opts.Draft != nil {
			opts.Draft.Close()
		}
		return nil, err
	}
	return e, nil
}

// readChatTemplate reads and parses the chat template file at path, which
// replaces a model's own; "" for no path. Its errors name the file, and a
// template that does not parse gives the line and column of the fault.
func readChatTemplate(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err // the path is said once, below
	}
	if err != nil {
		return "", fmt.Errorf("chat template file %s: %w", path, err)
	}
	src := string(data)
	if strings.TrimSpace(src) == "" {
		return "", fmt.Errorf("chat template file %s is empty", path)
	}
	if _, err := chat.New(src); err != nil {
		return "", fmt.Errorf("chat template file %s: %w", path, err)
	}
	return src, nil
}

// loadDraft opens the draft model at path; "embedded" is the embedded test
// model's draft.
func loadDraft(path string) (*model.Model, error) {
	if path != config.Embedded {
		return model.Open(path)
	}
	return loadEmbedded(testmodel.Draft(quant.F32))
}

func loadEmbedded(spec testmodel.Spec) (*model.Model, error) {
	data, err := testmodel.Bytes(spec)
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

// Engines is what serve and generate serve: one engine for the service (a
// router when a configuration file names several models) and the native
// engines among them, whose loops must run (Run) before they answer. Close
// closes them all; stop their loops first.
type Engines struct {
	engine.Engine
	io.Closer
	natives []*native.Engine
}

// Load implements engine.LoadReporter for the metrics' gauges, with the
// load of the engine it wraps (a native engine or the router).
func (es *Engines) Load() []engine.ModelLoad {
	if lr, ok := es.Engine.(engine.LoadReporter); ok {
		return lr.Load()
	}
	return nil
}

// Tokenize implements engine.Tokenizer with the engine it wraps (/tokenize).
func (es *Engines) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	t, ok := es.Engine.(engine.Tokenizer)
	if !ok {
		return nil, fmt.Errorf("%w: the engine has no tokenizer", engine.ErrUnsupported)
	}
	return t.Tokenize(ctx, req)
}

// Detokenize implements engine.Tokenizer with the engine it wraps (/detokenize).
func (es *Engines) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	t, ok := es.Engine.(engine.Tokenizer)
	if !ok {
		return nil, fmt.Errorf("%w: the engine has no tokenizer", engine.ErrUnsupported)
	}
	return t.Detokenize(ctx, req)
}

// Embed implements engine.Embedder with the engine it wraps (/v1/embeddings).
func (es *Engines) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	em, ok := es.Engine.(engine.Embedder)
	if !ok {
		return nil, fmt.Errorf("%w: the engine serves no embeddings", engine.ErrUnsupported)
	}
	return em.Embed(ctx, req)
}

// Rerank implements engine.Reranker with the engine it wraps (/v1/rerank).
func (es *Engines) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	rr, ok := es.Engine.(engine.Reranker)
	if !ok {
		return nil, fmt.Errorf("%w: the engine does no reranking", engine.ErrUnsupported)
	}
	return rr.Rerank(ctx, req)
}

// Natives returns the native engines among es, in the order they were
// opened (the configuration file's order); the caller must not close them.
func (es *Engines) Natives() []*native.Engine {
	return es.natives
}

// Run runs the native engines' loops, each on a goroutine of its own, until
// ctx ends or the engines are closed. The returned function waits for them.
func (es *Engines) Run(ctx context.Context, log *slog.Logger) (wait func()) {
	var wg sync.WaitGroup
	for _, e := range es.natives {
		wg.Go(func() {
			if err := e.Run(ctx); err != nil {
				log.Error("native engine stopped", slog.String("model", e.Models()[0].ID), slog.Any("err", err))
			}
		})
	}
	return wg.Wait
}

// OpenFlags opens the one native model that m, filled in by serve's and
// generate's native flags (config.Model.RegisterNativeFlags), describes.
func OpenFlags(m *config.Model, log *slog.Logger) (*Engines, error) {
	return openFlags(context.Background(), m, log)
}

// openFlags is OpenFlags; ctx bounds the download of an hf:// model.
func openFlags(ctx context.Context, m *config.Model, log *slog.Logger) (*Engines, error) {
	if err := m.CheckNativeFlags(); err != nil {
		return nil, err
	}
	if err := resolveHubModels(ctx, []*config.Model{m}, hubOptions(log)); err != nil {
		return nil, err
	}
	caches, err := promptCaches([]*config.Model{m})
	if err != nil {
		return nil, err
	}
	e, nat, err := openLocal(m, caches, log)
	if err != nil {
		return nil, err
	}
	es := &Engines{Engine: e, Closer: e}
	if nat != nil {
		es.natives = []*native.Engine{nat}
	}
	return es, nil
}

// OpenConfig opens the engines of the configuration file at path, native
// and upstream, behind one router that serves them all by model id.
func OpenConfig(path string, log *slog.Logger) (*Engines, error) {
	return openConfig(context.Background(), path, config.Catalog{}, log)
}

// openConfig is OpenConfig with serve's catalogue flags, whose set
// (non-zero) fields override the file's catalog section. With a catalogue
// (config.Catalog.On) the native models are loaded on demand. ctx bounds
// the downloads of hf:// models.
func openConfig(ctx context.Context, path string, flags config.Catalog, log *slog.Logger) (*Engines, error) {
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if err := checkModelFiles(f); err != nil {
		return nil, err
	}
	f.Catalog.ModelsDir = cmp.Or(flags.ModelsDir, f.Catalog.ModelsDir)
	f.Catalog.MaxLoaded = cmp.Or(flags.MaxLoaded, f.Catalog.MaxLoaded)
	f.Catalog.TTL = cmp.Or(flags.TTL, f.Catalog.TTL)
	f.Catalog.Memory = cmp.Or(flags.Memory, f.Catalog.Memory)
	f.Catalog.UnloadGrace = cmp.Or(flags.UnloadGrace, f.Catalog.UnloadGrace)
	ms := make([]*config.Model, len(f.Models))
	for i := range f.Models {
		ms[i] = &f.Models[i]
	}
	// After the checks of the local files, which take no time, and before
	// any model loads.
	if err := resolveHubModels(ctx, ms, hubOptions(log)); err != nil {
		return nil, err
	}
	if f.Catalog.On() {
		return OpenCatalog(ctx, f, nil, log)
	}
	if len(f.Models) == 0 {
		return nil, errors.New("config: models: none configured")
	}
	caches, err := promptCaches(ms)
	if err != nil {
		return nil, err
	}
	var all []engine.Engine
	var natives []*native.Engine
	fail := func(err error) (*Engines, error) {
		for i := len(all) - 1; i >= 0; i-- {
			if c, ok := all[i].(io.Closer); ok {
				c.Close()
			}
		}
		return nil, err
	}
	for i := range f.Models {
		m := &f.Models[i]
		if m.Native != nil {
			e, nat, err := openLocal(m, caches, log)
			if err != nil {
				return fail(fmt.Errorf("model %q: %w", m.ID, err))
			}
			all = append(all, e)
			if nat != nil {
				natives = append(natives, nat)
			}
			continue
		}
		e, err := upstream.New(m.UpstreamOptions(log))
		if err != nil {
			return fail(fmt.Errorf("model %q: %w", m.ID, err))
		}
		all = append(all, e)
		log.Info("upstream model", slog.String("model", m.ID), slog.String("kind", m.Upstream.Kind),
			slog.Int("replicas", len(m.Upstream.Replicas)))
	}
	r, err := router.New(all...)
	if err != nil {
		return fail(err)
	}
	return &Engines{Engine: r, Closer: r, natives: natives}, nil
}

// checkModelFiles reports, all at once and before any model is loaded, the
// native models and draft models of f whose files are missing or are not
// files, and the chat template files that cannot be read or do not parse:
// loading a model takes seconds to minutes, and the first that failed
// would hide the others.
func checkModelFiles(f *config.File) error {
	var errs []error
	for i := range f.Models {
		m := &f.Models[i]
		if m.Native == nil {
			continue
		}
		for _, file := range []struct{ key, path string }{
			{"native.model", m.Native.Model}, {"native.draft_model", m.Native.DraftModel},
		} {
			if file.path == "" || file.path == config.Embedded || hub.IsRef(file.path) {
				continue // a Hub model is checked as it is pulled
			}
			st, err := os.Stat(file.path)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("model %q: %s: %w", m.ID, file.key, err))
			case !st.Mode().IsRegular():
				errs = append(errs, fmt.Errorf("model %q: %s: %s is not a file", m.ID, file.key, file.path))
			}
		}
		if _, err := readChatTemplate(m.Native.ChatTemplateFile); err != nil {
			errs = append(errs, fmt.Errorf("model %q: native.chat_template_file: %w", m.ID, err))
		}
	}
	return errors.Join(errs...)
}
