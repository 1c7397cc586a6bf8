package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/native/cpurun"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/shared"
	"rill/service"

	"rill/conformance"
)

// The harness starts rill in-process on loopback, as `rill serve` does
// (internal/app): real TCP, a real http.Server, service.New over an
// engine. It is only used when RILL_CONFORMANCE_URL is unset.

// nativeDescription mirrors what `rill serve` says of the embedded model.
const nativeDescription = "embedded test model: tiny llama with random weights from a fixed seed (conformance harness)"

// newNativeEngine starts the native engine on the embedded test model and
// its draft model, with KV blocks of blockSize tokens, so that the suite's
// expected cached counts and the engine agree by construction.
func newNativeEngine(blockSize int) (*native.Engine, error) {
	data, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		return nil, fmt.Errorf("embedded test model: %w", err)
	}
	gf, err := gguf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("embedded test model: %w", err)
	}
	m, err := model.Load(gf)
	if err != nil {
		return nil, fmt.Errorf("embedded test model: %w", err)
	}
	dd, err := testmodel.Bytes(testmodel.Draft(quant.F32))
	if err != nil {
		return nil, fmt.Errorf("embedded draft model: %w", err)
	}
	dgf, err := gguf.Parse(dd)
	if err != nil {
		return nil, fmt.Errorf("embedded draft model: %w", err)
	}
	draft, err := model.Load(dgf)
	if err != nil {
		return nil, fmt.Errorf("embedded draft model: %w", err)
	}
	compute := cpurun.New(cpu.Options{})
	e, err := native.New(m, compute, native.Options{
		Description: nativeDescription,
		BlockSize:   blockSize,
		Logger:      slog.New(slog.DiscardHandler),
		Draft:       draft,
	})
	if err != nil {
		_ = compute.Close()
		_ = m.Close()
		_ = draft.Close()
		return nil, fmt.Errorf("native engine: %w", err)
	}
	go e.Run(context.Background()) // Close stops it
	return e, nil
}

// running is one server the harness started. stop shuts it down: it waits
// briefly for streams in flight, then cuts them off.
type running struct {
	target *conformance.Target
	stop   func()
}

// serveEngine serves e's first model over rill's service (broken by the
// mode unless it is empty, see breakHandler); stopping the server closes
// e, and so does a failure to start it.
func serveEngine(e interface {
	engine.Engine
	Close() error
}, broken string) (*running, error) {
	// WebSocket connections are served apart from their handshakes, as
	// rill serve serves them; stopping the server closes them.
	shutdown := make(chan struct{})
	var h http.Handler = service.New(service.Options{Engine: e, Logger: slog.New(slog.DiscardHandler), Shutdown: shutdown})
	if broken != "" {
		var err error
		if h, err = breakHandler(broken, h); err != nil {
			_ = e.Close()
			return nil, err
		}
	}
	r, err := serve(h, e.Models()[0].ID)
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	stop := r.stop
	r.stop = func() {
		stop()
		close(shutdown)
		_ = e.Close()
	}
	return r, nil
}

// serve starts h on 127.0.0.1:0 and returns a target for model.
func serve(h http.Handler, modelID string) (*running, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	base, cancelBase := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			cancelBase()
			_ = srv.Close()
		}
		cancelBase()
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("conformance harness: server ended", "err", err)
		}
	}
	t := conformance.NewTarget("http://"+ln.Addr().String(), modelID, "")
	return &running{target: t, stop: stop}, nil
}

// startRill starts rill over the native engine. A non-empty broken mode
// wraps its handler in a deliberately broken rewrite (broken_test.go).
func startRill(cfg conformance.Config, broken string) (*running, error) {
	e, err := newNativeEngine(cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	return serveEngine(e, broken)
}

// reasoningTemplate is the chat template of the in-process reasoning model:
// QwQ's, whose generation prompt opens the thinking block, so that even a
// random model reasons.
const reasoningTemplate = "refdata/chat-templates/llamacpp-node-bundle/Qwen-QwQ-32B.jinja"

// startReasoning starts a rill over the native engine on a model that
// reasons: the tiny model with Qwen 3's vocabulary (which has the <think>
// markers) and QwQ's template. It needs ../shared; without it it returns
// nil and the reason the reasoning specs skip.
func startReasoning() (*running, string, error) {
	dir, ok := shared.Find()
	if !ok {
		return nil, fmt.Sprintf("no reasoning model in-process: the reference folder %s (Qwen 3's vocabulary) is absent", dir), nil
	}
	src, err := os.ReadFile(filepath.Join(dir, reasoningTemplate))
	if err != nil {
		return nil, "", err
	}
	v, err := testmodel.Qwen3Vocabulary(filepath.Join(dir, "models/vocab/ggml-vocab-qwen2.gguf"), string(src))
	if err != nil {
		return nil, "", err
	}
	data, err := testmodel.BytesWithVocabulary(testmodel.QwenBPE(), v)
	if err != nil {
		return nil, "", err
	}
	gf, err := gguf.Parse(data)
	if err != nil {
		return nil, "", err
	}
	m, err := model.Load(gf)
	if err != nil {
		return nil, "", err
	}
	compute := cpurun.New(cpu.Options{})
	e, err := native.New(m, compute, native.Options{Logger: slog.New(slog.DiscardHandler),
		Description: "tiny random qwen3 with Qwen 3's vocabulary and QwQ's template (conformance harness)"})
	if err != nil {
		_ = compute.Close()
		_ = m.Close()
		return nil, "", err
	}
	go e.Run(context.Background()) // Close stops it
	r, err := serveEngine(e, "")
	return r, "", err
}

// startDouble starts a second rill over the engine double (double_test.go).
func startDouble() (*running, error) {
	var d engine.Engine = newDouble()
	return serve(service.New(service.Options{Engine: d, Logger: slog.New(slog.DiscardHandler)}), doubleModel)
}

// startEmbedder starts a rill over the native engine on the tiny qwen3
// decoder embedder (pooling last, as Qwen3-Embedding), for the
// embeddings specs. A non-empty broken mode breaks it as startRill does.
func startEmbedder(broken string) (*running, error) {
	data, err := testmodel.Bytes(testmodel.Qwen3Embedding(quant.F32))
	if err != nil {
		return nil, fmt.Errorf("embedded embedding model: %w", err)
	}
	gf, err := gguf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("embedded embedding model: %w", err)
	}
	m, err := model.Load(gf)
	if err != nil {
		return nil, fmt.Errorf("embedded embedding model: %w", err)
	}
	compute := cpurun.New(cpu.Options{})
	e, err := native.New(m, compute, native.Options{Logger: slog.New(slog.DiscardHandler),
		Description: "tiny random qwen3 embedder, pooling last (conformance harness)"})
	if err != nil {
		_ = compute.Close()
		_ = m.Close()
		return nil, fmt.Errorf("native engine: %w", err)
	}
	go e.Run(context.Background()) // Close stops it
	return serveEngine(e, broken)
}
