// Package config reads rill's configuration file: the models one server
// serves, each either run by the native engine (a GGUF file) or served by
// upstream replicas over HTTP (llama.cpp, vLLM, SGLang, tabbyAPI, rill or
// any OpenAI-compatible server).
//
// The file is YAML; JSON, being YAML too, works as well. Unknown keys are
// errors, so that a misspelt setting is not silently ignored. See
// docs/configuration.md ("Configuration file") for an example.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"rill/engine"
	"rill/engine/grammar"
	"rill/engine/upstream"
	"rill/hub"
)

// File is a whole configuration file.
type File struct {
	Models []Model `yaml:"models"`
	// Catalog loads native models on demand and unloads them; its zero
	// value keeps every model loaded from start to end.
	Catalog Catalog `yaml:"catalog"`
	// DataDir is the server's data directory (relative paths are relative
	// to the file): the embedded store's database lives there. serve's
	// --data-dir overrides it.
	DataDir string `yaml:"data_dir"`
	// Store is where the server keeps what outlives a request.
	Store Store `yaml:"store"`
}

// Store says where the server keeps stored responses and the event logs of
// background and resumable streams, and how much: serve's --store,
// --store-max-age, --store-max-bytes and --responses-store flags write into
// it too, and a flag given overrides its key. Zero values mean serve's
// defaults.
type Store struct {
	// Backend is "memory" (nothing survives a restart), "sqlite" (a
	// database under DataDir), or the URL of a shared store
	// (redis://host:port/db, postgres://user@host:port/db); empty: sqlite
	// when there is a DataDir, else memory.
	Backend string `yaml:"backend"`
	// MaxAge hides responses and drops streams older than this; 0: none.
	MaxAge Duration `yaml:"max_age"`
	// MaxBytes bounds the data the store keeps; the oldest go first; 0:
	// none.
	MaxBytes Bytes `yaml:"max_bytes"`
	// MaxResponses bounds the responses kept (--responses-store); 0: the
	// flag's default.
	MaxResponses int `yaml:"max_responses"`
}

// Catalog is the catalogue of models loaded on demand: serve's
// --models-dir, --models-max-loaded, --models-ttl and --models-memory
// flags write into it too. With any of it set the native models are
// loaded when a request first names them (a pinned one at start) and may
// be unloaded; without, every model is loaded at start, for good.
type Catalog struct {
	// ModelsDir is a folder of GGUF files, each a native model named
	// after its file (a split GGUF, name-00001-of-0000N.gguf, is one model
	// named name), served with the native defaults.
	ModelsDir string `yaml:"models_dir"`
	// MaxLoaded caps the native models loaded at once; 0: no cap.
	MaxLoaded int `yaml:"max_loaded"`
	// TTL unloads a model idle this long (a model's own ttl overrides
	// it); 0: never.
	TTL Duration `yaml:"ttl"`
	// Memory caps the memory of the loaded models (each counted as its
	// files plus its kv_cache_mem); 0: no budget.
	Memory Bytes `yaml:"memory"`
	// UnloadGrace is how long an unload lets a model's streams finish
	// before it cuts them; 0: the catalogue's default (30s). It does not
	// by itself turn the catalogue on.
	UnloadGrace Duration `yaml:"unload_grace"`
}

// On reports whether c asks for models loaded on demand.
func (c *Catalog) On() bool {
	return c.ModelsDir != "" || c.MaxLoaded != 0 || c.TTL != 0 || c.Memory != 0
}

// Model is one model as clients see it: an id, what /v1/models says about
// it, and exactly one of Native and Upstream.
type Model struct {
	// ID is the name clients send as "model". Required, unique.
	ID            string `yaml:"id"`
	Description   string `yaml:"description"`
	OwnedBy       string `yaml:"owned_by"`
	ContextLength int    `yaml:"context_length"` // tokens; 0: the model's own (native) or unknown
	// MaxTokensPolicy is what a request's max_tokens (max_output_tokens,
	// max_completion_tokens) beyond what the context leaves after its
	// prompt does: "clamp" (the default) generates until the context is
	// full and finishes with length, "error" refuses it with
	// context_length_exceeded.
	MaxTokensPolicy string `yaml:"max_tokens_policy"`
	// TTL is how long the native model may sit idle before it is unloaded
	// (catalogue mode): 0 means the catalogue's ttl, a negative one never.
	TTL Duration `yaml:"ttl"`
	// Pin loads the native model at start and never unloads it for a TTL
	// or to make room (catalogue mode).
	Pin bool `yaml:"pin"`

	Native   *Native   `yaml:"native"`
	Upstream *Upstream `yaml:"upstream"`
}

// Native runs a model on rill's own engine. It is the one description of
// a native model's settings: the file's native section decodes into it,
// serve's and generate's flags of the same names (with - for _) write into
// it (RegisterFlags), and one check validates it either way. Zero values
// mean the engine's defaults.
type Native struct {
	// Model is the GGUF file (relative paths are relative to the
	// configuration file), or "embedded" for the embedded test model.
	Model string `yaml:"model"`
	// DraftModel is a GGUF draft model sharing Model's vocabulary, or
	// "embedded"; empty for none.
	DraftModel  string `yaml:"draft_model"`
	Spec        string `yaml:"spec"`         // "" or "ngram"
	DraftTokens int    `yaml:"draft_tokens"` // most tokens drafted per step, 1 to MaxDraftTokens
	KVCacheMem  Bytes  `yaml:"kv_cache_mem"`
	KVCacheType string `yaml:"kv_cache_type"` // "f16" (default), "f32", "q8_0" or "q4_0"
	BatchTokens int    `yaml:"batch_tokens"`
	Threads     int    `yaml:"threads"`
	// MaxSeqs bounds the sequences (choices) decoding at once.
	MaxSeqs int `yaml:"max_seqs"`
	// MaxQueuedRequests bounds the requests waiting to start beyond the
	// free decoding slots; past it requests are refused with a 503.
	MaxQueuedRequests int `yaml:"max_queued_requests"`
	// JSONWhitespace is the whitespace allowed between JSON tokens of
	// constrained output (response formats, tool-call arguments):
	// "compact" (the default, none) or "bounded" (short runs, for models
	// that pretty-print).
	JSONWhitespace string `yaml:"json_whitespace"`
	// ChatTemplateFile is a Jinja chat template that replaces the model's
	// own (tokenizer.chat_template), for models that ship a broken or
	// outdated one (relative paths are relative to the configuration
	// file); empty keeps the model's.
	ChatTemplateFile string `yaml:"chat_template_file"`
	// PromptCacheDir is the prompt cache's disk tier (relative paths are
	// relative to the configuration file): KV blocks are saved there as
	// they are computed and at shutdown, and a prompt whose prefix is
	// there reads it instead of computing it, after a restart too. Models may share a directory. Empty for none.
	PromptCacheDir string `yaml:"prompt_cache_dir"`
	// PromptCacheSize bounds PromptCacheDir; the least recently used
	// blocks go past it. 0: 10 GiB. Models that share a directory share
	// its bound, the largest any of them gives.
	PromptCacheSize Bytes `yaml:"prompt_cache_size"`
}

// MaxDraftTokens is the largest draft_tokens accepted.
const MaxDraftTokens = 32

// Upstream serves a model from one or more replicas of a server.
type Upstream struct {
	// Kind is llamacpp, vllm, sglang, tabbyapi, openai or rill.
	Kind string `yaml:"kind"`
	// Model is the upstream's name for the model; default the model's id.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable that holds the API key of
	// every replica (a replica's own api_key_env overrides it). The key
	// itself never appears in the file.
	APIKeyEnv string `yaml:"api_key_env"`
	// Drafting says the upstream drafts (speculative decoding), for /v1/models.
	Drafting bool      `yaml:"drafting"`
	Replicas []Replica `yaml:"replicas"`
	Timeouts Timeouts  `yaml:"timeouts"`
	Health   Health    `yaml:"health"`
	Affinity Affinity  `yaml:"affinity"`
}

// Replica is one server of an upstream model.
type Replica struct {
	URL       string `yaml:"url"`
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKey is the key read from the environment by Parse.
	APIKey string `yaml:"-"`
}

// Timeouts of upstream requests; zero means upstream's defaults.
type Timeouts struct {
	Connect Duration `yaml:"connect"` // dialling a replica
	Headers Duration `yaml:"headers"` // until the response headers arrive
	Idle    Duration `yaml:"idle"`    // the longest silence within a stream
}

// Health configures the health checks of every replica.
type Health struct {
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
}

// Affinity configures prefix-affinity routing.
type Affinity struct {
	// PrefixBytes is how many bytes of the rendered prompt pick the replica.
	PrefixBytes int `yaml:"prefix_bytes"`
	// MaxImbalance is how many more requests in flight than the least
	// loaded replica the preferred one may have and still get the request.
	MaxImbalance int `yaml:"max_imbalance"`
	// Disabled turns affinity off: least-loaded choice only.
	Disabled bool `yaml:"disabled"`
}

// Load reads and checks the file at path. API keys are read from the
// environment; relative model paths are made relative to the file's folder.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for i := range f.Models {
		if n := f.Models[i].Native; n != nil {
			n.Model = resolve(dir, n.Model)
			n.DraftModel = resolve(dir, n.DraftModel)
			n.ChatTemplateFile = resolve(dir, n.ChatTemplateFile)
			n.PromptCacheDir = resolve(dir, n.PromptCacheDir)
		}
	}
	f.Catalog.ModelsDir = resolve(dir, f.Catalog.ModelsDir)
	f.DataDir = resolve(dir, f.DataDir)
	return f, nil
}

func resolve(dir, p string) string {
	if p == "" || p == Embedded || filepath.IsAbs(p) || hub.IsRef(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// Embedded names the embedded test model in Native.Model and DraftModel.
const Embedded = "embedded"

// Parse decodes and checks a configuration. lookupEnv reads the
// environment (os.LookupEnv, or a map in tests). Every problem found is
// reported, joined, each with the place it is at.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	var errs []error
	if err := dec.Decode(&f); err != nil {
		var te *yaml.TypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("the file is empty")
		case errors.As(err, &te):
			// Unknown keys and values of the wrong type: the decoder went on
			// past them, so the rest of the file is checked too.
			for _, msg := range te.Errors {
				errs = append(errs, errors.New(msg))
			}
		default:
			return nil, err
		}
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		errs = append(errs, errors.New("the file holds more than one YAML document"))
	}
	if errs = append(errs, f.check(lookupEnv)...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &f, nil
}

// check validates f and fills in the replicas' API keys.
func (f *File) check(lookupEnv func(string) (string, bool)) []error {
	if len(f.Models) == 0 && f.Catalog.ModelsDir == "" {
		return []error{errors.New("models: none configured (and no catalog.models_dir)")}
	}
	var errs []error
	if f.Catalog.MaxLoaded < 0 || f.Catalog.TTL < 0 || f.Catalog.Memory < 0 || f.Catalog.UnloadGrace < 0 {
		errs = append(errs, errors.New("catalog: max_loaded, ttl, memory and unload_grace must not be negative"))
	}
	if f.Store.MaxAge < 0 || f.Store.MaxBytes < 0 || f.Store.MaxResponses < 0 {
		errs = append(errs, errors.New("store: max_age, max_bytes and max_responses must not be negative"))
	}
	ids := make(map[string]int)
	for i := range f.Models {
		m := &f.Models[i]
		at := fmt.Sprintf("models[%d]", i)
		if m.ID != "" {
			at = fmt.Sprintf("models[%d] (%s)", i, m.ID)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
		}
		switch {
		case strings.TrimSpace(m.ID) == "":
			bad("id is required")
		case strings.ContainsAny(m.ID, " \t\r\n"):
			bad("id %q contains white space", m.ID)
		default:
			if j, dup := ids[m.ID]; dup {
				bad("id %q is also the id of models[%d]", m.ID, j)
			}
			ids[m.ID] = i
		}
		if m.ContextLength < 0 {
			bad("context_length must not be negative")
		}
		m.checkMaxTokensPolicy(bad, "max_tokens_policy")
		if m.Upstream != nil && (m.TTL != 0 || m.Pin) {
			bad("ttl and pin apply to native models only: an upstream model is never loaded by rill")
		}
		switch {
		case m.Native == nil && m.Upstream == nil:
			bad("needs either native or upstream")
		case m.Native != nil && m.Upstream != nil:
			bad("has both native and upstream; choose one")
		case m.Native != nil:
			m.Native.check(bad, fileKey)
		default:
			m.Upstream.check(bad, lookupEnv)
		}
	}
	return errs
}

// checkMaxTokensPolicy reports an unknown max_tokens_policy through bad,
// naming it as key.
func (m *Model) checkMaxTokensPolicy(bad func(string, ...any), key string) {
	if _, err := engine.ParseMaxTokensPolicy(m.MaxTokensPolicy); err != nil {
		bad("%s %q: want %s or %s", key, m.MaxTokensPolicy, engine.MaxTokensClamp, engine.MaxTokensError)
	}
}

// fileKey names a native setting as the file writes it.
func fileKey(key string) string { return "native." + key }

// check reports every problem of n through bad; name turns a key
// ("draft_tokens") into the name the user wrote (a file key or a flag).
func (n *Native) check(bad func(string, ...any), name func(string) string) {
	if n.Model == "" {
		bad("%s is required: a GGUF file, %sORG/REPO[:QUANT] for a model on the Hugging Face Hub, or %q for the embedded test model", name("model"), hub.Scheme, Embedded)
	}
	for _, key := range []string{"model", "draft_model"} {
		p := n.Model
		if key == "draft_model" {
			p = n.DraftModel
		}
		if _, err := hub.ParseRef(p); hub.IsRef(p) && err != nil {
			bad("%s: %v", name(key), err)
		}
	}
	switch n.Spec {
	case "", "ngram":
	default:
		bad("%s %q: want ngram or nothing", name("spec"), n.Spec)
	}
	if n.Spec == "ngram" && n.DraftModel != "" {
		bad("%s ngram and %s exclude each other", name("spec"), name("draft_model"))
	}
	switch strings.ToLower(n.KVCacheType) {
	case "", "f16", "f32", "q8_0", "q4_0":
	default:
		bad("%s %q: want f16, f32, q8_0 or q4_0", name("kv_cache_type"), n.KVCacheType)
	}
	if _, err := grammar.ParseJSONWhitespace(n.JSONWhitespace); err != nil {
		bad("%s %q: want %s or %s", name("json_whitespace"), n.JSONWhitespace, grammar.WhitespaceCompact, grammar.WhitespaceBounded)
	}
	if n.DraftTokens < 0 || n.DraftTokens > MaxDraftTokens {
		bad("%s %d: want 1 to %d (0 for the default)", name("draft_tokens"), n.DraftTokens, MaxDraftTokens)
	}
	for _, v := range []struct {
		key   string
		value int64
	}{
		{"batch_tokens", int64(n.BatchTokens)}, {"threads", int64(n.Threads)}, {"kv_cache_mem", int64(n.KVCacheMem)},
		{"max_seqs", int64(n.MaxSeqs)}, {"max_queued_requests", int64(n.MaxQueuedRequests)},
		{"prompt_cache_size", int64(n.PromptCacheSize)},
	} {
		if v.value < 0 {
			bad("%s must not be negative", name(v.key))
		}
	}
}

func (u *Upstream) check(bad func(string, ...any), lookupEnv func(string) (string, bool)) {
	if u.Kind == "" {
		bad("upstream.kind is required")
	} else if _, err := upstream.ParseKind(u.Kind); err != nil {
		bad("upstream.kind: %v", err)
	}
	if len(u.Replicas) == 0 {
		bad("upstream.replicas: none configured; give at least one url")
	}
	key := func(field, env string) string {
		if env == "" {
			return ""
		}
		v, ok := lookupEnv(env)
		switch {
		case !ok:
			bad("%s: environment variable %s is not set", field, env)
		case v == "":
			bad("%s: environment variable %s is empty", field, env)
		}
		return v
	}
	modelKey := key("upstream.api_key_env", u.APIKeyEnv)
	seen := make(map[string]int)
	for i := range u.Replicas {
		r := &u.Replicas[i]
		field := fmt.Sprintf("upstream.replicas[%d]", i)
		if err := checkURL(r.URL); err != nil {
			bad("%s.url: %v", field, err)
		} else {
			norm := strings.TrimSuffix(strings.TrimSuffix(r.URL, "/"), "/v1")
			if j, dup := seen[norm]; dup {
				bad("%s.url %q is also replicas[%d]", field, r.URL, j)
			}
			seen[norm] = i
		}
		r.APIKey = modelKey
		if r.APIKeyEnv != "" {
			r.APIKey = key(field+".api_key_env", r.APIKeyEnv)
		}
	}
	if u.Timeouts.Connect < 0 || u.Timeouts.Headers < 0 || u.Timeouts.Idle < 0 ||
		u.Health.Interval < 0 || u.Health.Timeout < 0 {
		bad("upstream: timeouts and intervals must not be negative")
	}
	if u.Affinity.PrefixBytes < 0 || u.Affinity.MaxImbalance < 0 {
		bad("upstream.affinity: prefix_bytes and max_imbalance must not be negative")
	}
}

func checkURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: no query or fragment allowed", raw)
	}
	return nil
}

// UpstreamOptions are the options of the upstream engine of m, which must
// have Upstream set and have passed Parse.
func (m *Model) UpstreamOptions(log *slog.Logger) upstream.Options {
	u := m.Upstream
	kind, _ := upstream.ParseKind(u.Kind)
	o := upstream.Options{
		ID: m.ID, UpstreamModel: u.Model, Kind: kind,
		Description: m.Description, OwnedBy: m.OwnedBy, ContextLength: m.ContextLength, Drafting: u.Drafting,
		ConnectTimeout: u.Timeouts.Connect.D(), HeaderTimeout: u.Timeouts.Headers.D(), IdleTimeout: u.Timeouts.Idle.D(),
		HealthInterval: u.Health.Interval.D(), HealthTimeout: u.Health.Timeout.D(),
		PrefixBytes: u.Affinity.PrefixBytes, MaxImbalance: u.Affinity.MaxImbalance,
		MaxTokensPolicy: engine.MaxTokensPolicy(m.MaxTokensPolicy),
		Logger:          log,
	}
	if u.Affinity.Disabled {
		o.PrefixBytes = -1
	}
	for _, r := range u.Replicas {
		o.Replicas = append(o.Replicas, upstream.Replica{URL: r.URL, APIKey: r.APIKey})
	}
	return o
}
