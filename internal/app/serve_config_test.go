package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rill.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenConfig(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
models:
  - id: tiny
    description: configured
    native: {model: embedded, kv_cache_mem: 4MiB}
  - id: remote
    upstream:
      kind: vllm
      model: served-name
      health: {interval: 1h}
      replicas: [{url: "http://127.0.0.1:9"}]
`)
	r, err := OpenConfig(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ms := r.Models()
	if len(ms) != 2 || ms[0].ID != "tiny" || ms[0].Description != "configured" || ms[1].ID != "remote" || ms[1].OwnedBy != "vllm" {
		t.Errorf("models %+v", ms)
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, "models:\n  - id: tiny\n    native: {model: embedded}\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"with model flags", []string{"--config", good, "--model", "x.gguf", "--ctx", "64"}, "--config and --ctx, --model exclude each other"},
		{"missing file", []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, "no such file"},
		{"invalid file", []string{"--config", writeConfig(t, "models:\n  - id: a\n    upstream: {kind: vlm, replicas: [{url: 'http://h'}]}\n")}, `unknown kind "vlm"`},
		{"unloadable model", []string{"--config", writeConfig(t, "models:\n  - id: a\n    native: {model: missing.gguf}\n")}, `model "a"`},
	}
	for _, tc := range cases {
		err := Serve(context.Background(), append(tc.args, "--addr", "127.0.0.1:0", "--log-level", "error"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestConfigModelFilesAtOnce: every native model file that is missing or
// not a file is reported in one error, before any model is loaded.
func TestConfigModelFilesAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeConfig(t, "models:\n"+
		"  - id: a\n    native: {model: "+filepath.Join(dir, "a.gguf")+"}\n"+
		"  - id: b\n    native: {model: embedded, draft_model: "+filepath.Join(dir, "draft.gguf")+"}\n"+
		"  - id: c\n    native: {model: "+dir+"}\n"+
		"  - id: d\n    native: {model: embedded}\n")
	_, err := OpenConfig(path, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a configuration with missing model files opened")
	}
	for _, want := range []string{`model "a": native.model`, `model "b": native.draft_model`, `model "c": native.model: ` + dir + " is not a file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
