package engine

import (
	"context"
	"errors"
)

// Model states, as ModelCard.State and /v1/models report them for models
// that a catalogue loads on demand. An engine whose models are always
// loaded leaves State empty.
const (
	StateUnloaded = "unloaded"
	StateLoading  = "loading"
	StateLoaded   = "loaded"
)

// ErrModelLoad is returned (wrapped, with the cause) by Generate when the
// model the request names could not be loaded. It is the server's fault,
// not the client's; transports answer it with a 503 (model_load_failed),
// and the other models go on serving.
var ErrModelLoad = errors.New("model failed to load")

// ErrModelUnloaded ends (wrapped) the stream of a request whose model was
// unloaded before the request finished: an operator's unload, an idle
// TTL or an eviction whose grace period ran out. It is neither the
// client's fault nor a failure of the model; transports answer it with a
// 503 (model_unloaded) to retry, which loads the model again.
var ErrModelUnloaded = errors.New("model unloaded")

// ModelManager is implemented by engines that load and unload models on
// demand (engine/catalog). It is optional: the service asks for it with a
// type assertion for the operators' POST /models/load and /models/unload.
// Implementations are safe for concurrent use.
type ModelManager interface {
	// LoadModel loads the model id (evicting others as the catalogue's
	// limits require) and returns once it serves, or with the load's error
	// (a wrapped ErrModelLoad), a wrapped ErrUnknownModel, or ctx's error.
	LoadModel(ctx context.Context, id string) error
	// UnloadModel unloads the model id: its streams may finish for the
	// catalogue's grace period and are cancelled after it. It returns once
	// the model's memory is released. A model that is not loaded is no
	// error. Pinned models are unloaded too: the operator asked.
	UnloadModel(ctx context.Context, id string) error
}

// LifecycleReporter is implemented by engines that load and unload models
// on demand, for the metrics. It is optional, read when metrics are
// scraped.
type LifecycleReporter interface {
	// Lifecycle returns one entry per model the engine loads on demand.
	Lifecycle() []ModelLifecycle
}

// ModelLifecycle counts one model's loads and unloads since start.
type ModelLifecycle struct {
	Model        string
	State        string // StateUnloaded, StateLoading or StateLoaded
	Loads        int64  // loads that succeeded
	LoadFailures int64
	// Unloads by reason: UnloadIdle (its TTL ran out), UnloadEvicted (to
	// make room under the cap or the memory budget), UnloadOperator
	// (POST /models/unload).
	Unloads map[string]int64
}

// Reasons of ModelLifecycle.Unloads.
const (
	UnloadIdle     = "idle"
	UnloadEvicted  = "evicted"
	UnloadOperator = "operator"
)
