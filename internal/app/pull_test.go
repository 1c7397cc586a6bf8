package app

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rill/config"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/hub"
	"rill/hub/hubtest"
)

// TestPullCommand runs `rill pull` against a fake Hub, the environment
// naming it and the cache as a user would.
func TestPullCommand(t *testing.T) {
	data := bytes.Repeat([]byte("gguf"), 10_000)
	srv := hubtest.New("org/tiny-GGUF", hubtest.File{Path: "tiny-Q8_0.gguf", Data: data, LFS: true})
	defer srv.Close()
	home := t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	want := filepath.Join(home, "hub", "models--org--tiny-GGUF", "snapshots", hubtest.Commit, "tiny-Q8_0.gguf")
	tests := []struct {
		name    string
		args    []string
		offline string
		out     string
		errHas  string
	}{
		{"pulls and prints the path", []string{"org/tiny-GGUF:Q8_0"}, "", want + "\n", ""},
		{"hf:// prefix and no quant", []string{"-log-level", "warn", "hf://org/tiny-GGUF"}, "", want + "\n", ""},
		{"offline from the cache", []string{"org/tiny-GGUF"}, "1", want + "\n", ""},
		{"offline, not cached", []string{"org/other"}, "1", "", "offline (HF_HUB_OFFLINE): org/other is not in the hub cache"},
		{"no model", nil, "", "", "want one model, ORG/REPO[:QUANT]; got 0 arguments"},
		{"two models", []string{"a/b", "c/d"}, "", "", "got 2 arguments"},
		{"bad reference", []string{"tiny"}, "", "", `hub reference "tiny": want ORG/REPO[:QUANT]`},
		{"unknown repository", []string{"org/missing"}, "", "", "404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HF_HUB_OFFLINE", tt.offline)
			var out bytes.Buffer
			err := pull(context.Background(), tt.args, &out)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("error %v, want it to say %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.out {
				t.Errorf("printed %q, want %q", out.String(), tt.out)
			}
			if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, data) {
				t.Errorf("cached file: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestResolveHubModels: hf:// references of a configuration's native
// models become cache paths, a model without an id is named after its
// reference, and local paths are left alone.
func TestResolveHubModels(t *testing.T) {
	srv := hubtest.New("org/tiny-GGUF",
		hubtest.File{Path: "tiny-Q4_K_M.gguf", Data: []byte("main model"), LFS: true},
		hubtest.File{Path: "draft-Q8_0.gguf", Data: []byte("draft model"), LFS: true})
	defer srv.Close()
	cache := t.TempDir()
	snap := filepath.Join(cache, "models--org--tiny-GGUF", "snapshots", hubtest.Commit)
	ms := []*config.Model{
		{Native: &config.Native{Model: "hf://org/tiny-GGUF", DraftModel: "hf://org/tiny-GGUF:Q8_0"}},
		{ID: "named", Native: &config.Native{Model: "hf://org/tiny-GGUF:q4_k_m"}},
		{ID: "local", Native: &config.Native{Model: "/models/a.gguf"}},
		{ID: "up"},
	}
	opts := hub.Options{Endpoint: srv.URL, CacheDir: cache, Logger: slog.New(slog.DiscardHandler)}
	if err := resolveHubModels(context.Background(), ms, opts); err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, model, draft string }{
		{"org/tiny-GGUF", filepath.Join(snap, "tiny-Q4_K_M.gguf"), filepath.Join(snap, "draft-Q8_0.gguf")},
		{"named", filepath.Join(snap, "tiny-Q4_K_M.gguf"), ""},
		{"local", "/models/a.gguf", ""},
	}
	for i, w := range want {
		if n := ms[i].Native; ms[i].ID != w.id || n.Model != w.model || n.DraftModel != w.draft {
			t.Errorf("model %d: id %q model %q draft %q; want %+v", i, ms[i].ID, n.Model, n.DraftModel, w)
		}
	}
	bad := []*config.Model{{Native: &config.Native{Model: "hf://org/tiny-GGUF:Q2_K"}}}
	if err := resolveHubModels(context.Background(), bad, opts); err == nil || !strings.Contains(err.Error(), "hf://org/tiny-GGUF:Q2_K: org/tiny-GGUF:Q2_K: no GGUF file for quantisation Q2_K") {
		t.Errorf("missing quant: %v", err)
	}
}

// TestProgress: the log lines and the terminal bar say how far a download is.
func TestProgress(t *testing.T) {
	updates := []struct{ done, total int64 }{{0, 4 << 20}, {1 << 20, 4 << 20}, {2 << 20, 4 << 20}, {4 << 20, 4 << 20}}
	tests := []struct {
		name string
		make func(*bytes.Buffer) hub.Progress
		want []string
	}{
		{"log lines", func(b *bytes.Buffer) hub.Progress {
			return &logProgress{log: slog.New(slog.NewTextHandler(b, nil)), every: time.Nanosecond}
		}, []string{"msg=\"hub: downloading\" file=m.gguf bytes=1048576 size=4194304 done=25.0%", "done=50.0%", "done=100.0%", "msg=\"hub: file ready\" file=m.gguf"}},
		{"terminal bar", func(b *bytes.Buffer) hub.Progress { return &barProgress{w: b} },
			[]string{"\r\033[Km.gguf [" + strings.Repeat(" ", 30) + "]   0% 0 B/4.0 MiB", "[" + strings.Repeat("=", 30) + "] 100% 4.0 MiB/4.0 MiB", "\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := tt.make(&b)
			for _, u := range updates {
				p.Update("m.gguf", u.done, u.total)
				time.Sleep(time.Millisecond)
			}
			p.Done("m.gguf", nil)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output %q lacks %q", b.String(), w)
				}
			}
		})
	}
}

// TestOpenConfigFromHub: a configuration file's native.model may be an
// hf:// reference, pulled with the environment's Hub settings before the
// model loads; the file's local files are checked first, so a missing
// one fails before any download.
func TestOpenConfigFromHub(t *testing.T) {
	gguf, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	srv := hubtest.New("rill/tiny-GGUF", hubtest.File{Path: "tiny-F32.gguf", Data: gguf, LFS: true})
	defer srv.Close()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	log := slog.New(slog.DiscardHandler)

	bad := writeConfig(t, "models:\n  - id: tiny\n    native: {model: 'hf://rill/tiny-GGUF:F32', draft_model: missing.gguf}\n")
	if _, err := OpenConfig(bad, log); err == nil || !strings.Contains(err.Error(), "native.draft_model") {
		t.Errorf("missing draft: %v", err)
	}
	if reqs := srv.Requests(); len(reqs) > 0 {
		t.Errorf("a configuration with a missing file reached the Hub: %q", reqs)
	}

	e, err := OpenConfig(writeConfig(t, "models:\n  - id: tiny\n    native: {model: 'hf://rill/tiny-GGUF:F32', kv_cache_mem: 4MiB}\n"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if ms := e.Models(); len(ms) != 1 || ms[0].ID != "tiny" {
		t.Errorf("models %+v", ms)
	}
}
