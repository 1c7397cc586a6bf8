package app

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rill/config"
	"rill/engine"
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

// phi3Template is Phi-3-mini's chat template, which shows no system
// message of its own.
const phi3Template = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}"

// TestConfigChatTemplateFile: a chat template file, given in the
// configuration file (relative to it) or by --chat-template-file, replaces
// the model's template (the embedded model's is ChatML).
func TestConfigChatTemplateFile(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "models:\n  - id: tiny\n    native: {model: embedded, kv_cache_mem: 4MiB, chat_template_file: phi3.jinja}\n")
	tmplPath := filepath.Join(filepath.Dir(cfg), "phi3.jinja")
	if err := os.WriteFile(tmplPath, []byte(phi3Template), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	fromFile, err := OpenConfig(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer fromFile.Close()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	m := config.Model{ID: "tiny", Native: &config.Native{}}
	m.RegisterNativeFlags(fs)
	if err := fs.Parse([]string{"--kv-cache-mem", "4MiB", "--chat-template-file", tmplPath}); err != nil {
		t.Fatal(err)
	}
	fromFlags, err := OpenFlags(&m, log)
	if err != nil {
		t.Fatal(err)
	}
	defer fromFlags.Close()
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "Be brief."}, {Role: engine.RoleUser, Content: "Hi"}}
	want := "<|user|>\nBe brief.\nHi<|end|>\n<|assistant|>\n"
	for name, es := range map[string]*Engines{"config file": fromFile, "flag": fromFlags} {
		chat, err := es.Tokenize(context.Background(), &engine.TokenizeRequest{Model: "tiny", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		// The same text as a prompt: BOS, then the text with its special
		// tokens parsed.
		text, err := es.Tokenize(context.Background(), &engine.TokenizeRequest{Model: "tiny", Prompt: want})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(chat.Tokens, text.Tokens) {
			got, _ := es.Detokenize(context.Background(), &engine.DetokenizeRequest{Model: "tiny", Tokens: chat.Tokens})
			t.Errorf("%s: prompt %q, want %q", name, got.Prompt, want)
		}
	}
}

// TestConfigChatTemplateFileErrors: a chat template file that is missing,
// empty or does not parse stops the server before any model loads, with
// the file's name and, for a syntax error, its line and column; the
// configuration file's problems come all at once.
func TestConfigChatTemplateFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.jinja")
	empty := filepath.Join(dir, "empty.jinja")
	missing := filepath.Join(dir, "missing.jinja")
	if err := os.WriteFile(broken, []byte("{% for m in messages %}\n{{ m.content }\n{% endfor %}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{broken, "chat template file " + broken + ": template syntax error at line 2, column 14"},
		{empty, "chat template file " + empty + " is empty"},
		{missing, "chat template file " + missing + ": no such file or directory"},
	} {
		err := Serve(context.Background(), []string{"--chat-template-file", tc.file, "--addr", "127.0.0.1:0", "--log-level", "error"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--chat-template-file %s: error %v, want %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	cfg := writeConfig(t, "models:\n"+
		"  - id: a\n    native: {model: embedded, chat_template_file: "+broken+"}\n"+
		"  - id: b\n    native: {model: embedded, chat_template_file: "+missing+"}\n")
	_, err := OpenConfig(cfg, slog.New(slog.DiscardHandler))
	for _, want := range []string{`model "a": native.chat_template_file: chat template file ` + broken + ": template syntax error at line 2",
		`model "b": native.chat_template_file: chat template file ` + missing} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
