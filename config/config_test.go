package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/upstream"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

var testEnv = env(map[string]string{"VLLM_KEY": "sk-vllm", "OTHER_KEY": "sk-other", "EMPTY_KEY": ""})

const full = `
models:
  - id: tiny
    description: the embedded test model
    native:
      model: embedded
      draft_model: embedded
      draft_tokens: 3
      kv_cache_mem: 64MiB
      kv_cache_type: f32
      json_whitespace: bounded
  - id: llama-70b
    context_length: 8192
    max_tokens_policy: error
    upstream:
      kind: vllm
      model: meta-llama/Llama-3.3-70B-Instruct
      api_key_env: VLLM_KEY
      timeouts: {connect: 2s, headers: 1m, idle: 30s}
      health: {interval: 10s, timeout: 1s}
      affinity: {prefix_bytes: 1024, max_imbalance: 4}
      replicas:
        - url: http://10.0.0.1:8000
        - url: http://10.0.0.2:8000/v1
          api_key_env: OTHER_KEY
  - id: stories
    upstream:
      kind: llama.cpp
      affinity: {disabled: true}
      replicas: [{url: "http://127.0.0.1:8081"}]
`

func TestParseFull(t *testing.T) {
	t.Parallel()
	f, err := Parse([]byte(full), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Models) != 3 {
		t.Fatalf("%d models", len(f.Models))
	}
	n := f.Models[0].Native
	if n.Model != Embedded || n.DraftModel != Embedded || n.DraftTokens != 3 || n.KVCacheMem != 64<<20 || n.KVCacheType != "f32" || n.JSONWhitespace != "bounded" {
		t.Errorf("native %+v", n)
	}
	o := f.Models[1].UpstreamOptions(nil)
	want := upstream.Options{ID: "llama-70b", UpstreamModel: "meta-llama/Llama-3.3-70B-Instruct", Kind: upstream.VLLM,
		ContextLength: 8192, ConnectTimeout: 2 * time.Second, HeaderTimeout: time.Minute, IdleTimeout: 30 * time.Second,
		HealthInterval: 10 * time.Second, HealthTimeout: time.Second, PrefixBytes: 1024, MaxImbalance: 4,
		Replicas: []upstream.Replica{{URL: "http://10.0.0.1:8000", APIKey: "sk-vllm"}, {URL: "http://10.0.0.2:8000/v1", APIKey: "sk-other"}}}
	if o.ID != want.ID || o.UpstreamModel != want.UpstreamModel || o.Kind != want.Kind || o.ContextLength != want.ContextLength ||
		o.ConnectTimeout != want.ConnectTimeout || o.HeaderTimeout != want.HeaderTimeout || o.IdleTimeout != want.IdleTimeout ||
		o.HealthInterval != want.HealthInterval || o.HealthTimeout != want.HealthTimeout ||
		o.PrefixBytes != want.PrefixBytes || o.MaxImbalance != want.MaxImbalance || o.MaxTokensPolicy != engine.MaxTokensError ||
		len(o.Replicas) != 2 || o.Replicas[0] != want.Replicas[0] || o.Replicas[1] != want.Replicas[1] {
		t.Errorf("options\n got %+v\nwant %+v", o, want)
	}
	if o := f.Models[2].UpstreamOptions(nil); o.Kind != upstream.LlamaCpp || o.PrefixBytes >= 0 || o.Replicas[0].APIKey != "" || o.MaxTokensPolicy != "" {
		t.Errorf("stories options %+v", o)
	}
}

func TestParseJSON(t *testing.T) {
	t.Parallel()
	f, err := Parse([]byte(`{"models":[{"id":"m","upstream":{"kind":"sglang","replicas":[{"url":"http://h:30000"}],"timeouts":{"idle":"90s"}}}]}`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if u := f.Models[0].Upstream; u.Kind != "sglang" || u.Timeouts.Idle.D() != 90*time.Second {
		t.Errorf("upstream %+v", u)
	}
}

// TestParseKVCacheTypes: every KV type the engine has is accepted per
// model, in llama.cpp's spelling, as written.
func TestParseKVCacheTypes(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"f16", "f32", "q8_0", "q4_0", "Q8_0", ""} {
		f, err := Parse([]byte("models:\n  - id: m\n    native: {model: embedded, kv_cache_type: '"+typ+"'}"), testEnv)
		if err != nil {
			t.Errorf("%q: %v", typ, err)
			continue
		}
		if got := f.Models[0].Native.KVCacheType; got != typ {
			t.Errorf("%q: kv_cache_type %q", typ, got)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	up := func(body string) string {
		return "models:\n  - id: m\n    upstream:\n" + body
	}
	cases := []struct {
		name string
		yaml string
		want []string // every one must be in the error
	}{
		{"empty file", "", []string{"empty"}},
		{"no models", "models: []", []string{"none configured"}},
		{"unknown key", "models:\n  - id: m\n    natve: {model: embedded}", []string{"natve"}},
		{"not yaml", "models: [", []string{"yaml"}},
		{"two documents", "models: [{id: m, native: {model: embedded}}]\n---\nmodels: []", []string{"more than one"}},
		{"missing id", "models:\n  - native: {model: embedded}", []string{"models[0]: id is required"}},
		{"space in id", "models:\n  - id: my model\n    native: {model: embedded}", []string{"white space"}},
		{"duplicate ids", "models:\n  - id: m\n    native: {model: embedded}\n  - id: m\n    native: {model: embedded}",
			[]string{`models[1] (m): id "m" is also the id of models[0]`}},
		{"neither", "models:\n  - id: m", []string{"either native or upstream"}},
		{"both", "models:\n  - id: m\n    native: {model: embedded}\n    upstream: {kind: vllm, replicas: [{url: 'http://h'}]}", []string{"both native and upstream"}},
		{"native without model", "models:\n  - id: m\n    native: {}", []string{"native.model is required"}},
		{"bad hub reference", "models:\n  - id: m\n    native: {model: 'hf://just-a-name', draft_model: 'hf://org/d:Q4 K'}",
			[]string{`native.model: hub reference "hf://just-a-name": want ORG/REPO[:QUANT]`, `native.draft_model: hub reference "hf://org/d:Q4 K": quantisation`}},
		{"bad spec", "models:\n  - id: m\n    native: {model: embedded, spec: medusa}", []string{"native.spec"}},
		{"spec and draft", "models:\n  - id: m\n    native: {model: embedded, spec: ngram, draft_model: embedded}", []string{"exclude each other"}},
		{"bad kv type", "models:\n  - id: m\n    native: {model: embedded, kv_cache_type: q8}", []string{`native.kv_cache_type "q8": want f16, f32, q8_0 or q4_0`}},
		{"bad json whitespace", "models:\n  - id: m\n    native: {model: embedded, json_whitespace: pretty}", []string{`native.json_whitespace "pretty": want compact or bounded`}},
		{"bad max tokens policy", "models:\n  - id: m\n    max_tokens_policy: truncate\n    native: {model: embedded}", []string{`models[0] (m): max_tokens_policy "truncate": want clamp or error`}},
		{"bad size", "models:\n  - id: m\n    native: {model: embedded, kv_cache_mem: lots}", []string{"not a size"}},
		{"unknown kind", up("      kind: vlm\n      replicas: [{url: 'http://h'}]"), []string{`unknown kind "vlm"`}},
		{"no kind", up("      replicas: [{url: 'http://h'}]"), []string{"upstream.kind is required"}},
		{"no replicas", up("      kind: vllm"), []string{"upstream.replicas: none configured"}},
		{"bad url", up("      kind: vllm\n      replicas: [{url: 'h:8000'}]"), []string{"replicas[0].url"}},
		{"missing url", up("      kind: vllm\n      replicas: [{}]"), []string{"replicas[0].url: required"}},
		{"duplicate replica", up("      kind: vllm\n      replicas: [{url: 'http://h'}, {url: 'http://h/v1'}]"), []string{"is also replicas[0]"}},
		{"missing env var", up("      kind: vllm\n      api_key_env: NO_SUCH_KEY\n      replicas: [{url: 'http://h'}]"),
			[]string{"environment variable NO_SUCH_KEY is not set"}},
		{"empty env var", up("      kind: vllm\n      replicas: [{url: 'http://h', api_key_env: EMPTY_KEY}]"),
			[]string{"replicas[0].api_key_env: environment variable EMPTY_KEY is empty"}},
		{"bad duration", up("      kind: vllm\n      timeouts: {idle: 30}\n      replicas: [{url: 'http://h'}]"), []string{"not a duration"}},
		{"negative duration", up("      kind: vllm\n      health: {interval: -1s}\n      replicas: [{url: 'http://h'}]"), []string{"must not be negative"}},
		{"negative affinity", up("      kind: vllm\n      affinity: {prefix_bytes: -5}\n      replicas: [{url: 'http://h'}]"), []string{"prefix_bytes"}},
		{"every problem at once", "models:\n  - id: a\n  - id: a\n    upstream: {kind: x}", []string{"models[0] (a): needs either", "is also the id", `unknown kind "x"`, "none configured"}},
		{"unknown keys and bad values do not hide the rest",
			"models:\n  - id: a\n    natve: {model: embedded}\n  - id: a\n    native: {model: embedded, kv_cache_mem: lots, draft_tokens: 99, max_queued_requests: -1, max_sed: 4}",
			[]string{"field natve not found", "field max_sed not found", "not a size", "native.draft_tokens 99", "native.max_queued_requests must not be negative", "models[0] (a): needs either", "is also the id"}},
		{"negative unload_grace", "catalog: {models_dir: m, unload_grace: -1s}\nmodels: []", []string{"unload_grace must not be negative"}},
		{"negative store max_age", "models: [{id: m, native: {model: embedded}}]\nstore: {max_age: -1h}", []string{"store: max_age, max_bytes and max_responses must not be negative"}},
		{"negative store max_bytes", "models: [{id: m, native: {model: embedded}}]\nstore: {max_bytes: -1GiB}", []string{"store: max_age"}},
		{"unknown store key", "models: [{id: m, native: {model: embedded}}]\nstore: {url: 'redis://h'}", []string{"field url not found"}},
		{"negative max_seqs", "models:\n  - id: m\n    native: {model: embedded, max_seqs: -4}", []string{"native.max_seqs must not be negative"}},
		{"negative prompt_cache_size", "models:\n  - id: m\n    native: {model: embedded, prompt_cache_dir: kv, prompt_cache_size: -1GiB}", []string{"native.prompt_cache_size must not be negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml), testEnv)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadResolvesPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rill.yaml")
	body := "models:\n  - id: a\n    native: {model: models/a.gguf, draft_model: /abs/d.gguf, chat_template_file: t/a.jinja, prompt_cache_dir: kv}\n  - id: b\n    native: {model: embedded}\n" +
		"  - id: c\n    native: {model: 'hf://org/repo:Q8_0'}\n" +
		"data_dir: data\nstore: {backend: sqlite, max_age: 24h, max_bytes: 1GiB, max_responses: 5000}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Models[0].Native; got.Model != filepath.Join(dir, "models/a.gguf") || got.DraftModel != "/abs/d.gguf" ||
		got.ChatTemplateFile != filepath.Join(dir, "t/a.jinja") || got.PromptCacheDir != filepath.Join(dir, "kv") {
		t.Errorf("paths %q %q %q %q", got.Model, got.DraftModel, got.ChatTemplateFile, got.PromptCacheDir)
	}
	if f.DataDir != filepath.Join(dir, "data") {
		t.Errorf("data_dir %q", f.DataDir)
	}
	if st := f.Store; st.Backend != "sqlite" || time.Duration(st.MaxAge) != 24*time.Hour || st.MaxBytes != 1<<30 || st.MaxResponses != 5000 {
		t.Errorf("store %+v", st)
	}
	if f.Models[1].Native.Model != Embedded {
		t.Errorf("embedded became %q", f.Models[1].Native.Model)
	}
	if got := f.Models[2].Native.Model; got != "hf://org/repo:Q8_0" {
		t.Errorf("hub reference became %q", got)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Bytes
		ok   bool
	}{
		{"1024", 1024, true},
		{"512MiB", 512 << 20, true},
		{"1.5 GiB", 3 << 29, true},
		{"2GB", 2e9, true},
		{"10kb", 10000, true},
		{"7b", 7, true},
		{"", 0, false},
		{"lots", 0, false},
		{"NaN", 0, false},
		{"1e300GiB", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseBytes(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestFlagsAndFileAgree: the flags and the file's native section fill the
// same struct and are checked by the same rules, each naming what the user
// wrote.
func TestFlagsAndFileAgree(t *testing.T) {
	t.Parallel()
	f, err := Parse([]byte(`
models:
  - id: tiny
    context_length: 512
    max_tokens_policy: error
    native: {model: embedded, kv_cache_mem: 4MiB, batch_tokens: 64, draft_tokens: 2, max_seqs: 8, max_queued_requests: 4, spec: ngram,
      json_whitespace: bounded, chat_template_file: /etc/phi3.jinja, prompt_cache_dir: /var/cache/rill, prompt_cache_size: 2GiB}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	m := Model{Native: &Native{}}
	m.RegisterNativeFlags(fs)
	if err := fs.Parse([]string{"--model-id", "tiny", "--ctx", "512", "--max-tokens-policy", "error", "--kv-cache-mem", "4MiB", "--batch-tokens", "64",
		"--draft-tokens", "2", "--max-seqs", "8", "--max-queued-requests", "4", "--spec", "ngram", "--kv-cache-type", "",
		"--json-whitespace", "bounded", "--chat-template-file", "/etc/phi3.jinja", "--prompt-cache-dir", "/var/cache/rill", "--prompt-cache-size", "2GiB"}); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckNativeFlags(); err != nil {
		t.Fatal(err)
	}
	if got, want := m, f.Models[0]; got.ID != want.ID || got.ContextLength != want.ContextLength || got.MaxTokensPolicy != want.MaxTokensPolicy || *got.Native != *want.Native {
		t.Fatalf("flags %+v %+v\nfile  %+v %+v", got, *got.Native, want, *want.Native)
	}

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	m = Model{Native: &Native{}}
	m.RegisterNativeFlags(fs)
	if err := fs.Parse([]string{"--draft-tokens", "99", "--spec", "medusa", "--max-queued-requests", "-1", "--kv-cache-type", "q4", "--ctx", "-1", "--json-whitespace", "20", "--max-tokens-policy", "truncate"}); err != nil {
		t.Fatal(err)
	}
	err = m.CheckNativeFlags()
	for _, want := range []string{"--draft-tokens 99", `--spec "medusa"`, "--max-queued-requests must not be negative", `--kv-cache-type "q4"`, "--ctx must not be negative", `--json-whitespace "20": want compact or bounded`, `--max-tokens-policy "truncate": want clamp or error`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}
