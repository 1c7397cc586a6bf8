package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanModelsDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  string // id:parts of each model, or the error's text
	}{
		{"plain", []string{"b.gguf", "a.gguf", "notes.txt"}, "a:1 b:1"},
		{"split is one", []string{"big-00002-of-00002.gguf", "big-00001-of-00002.gguf", "x.gguf"}, "big:2 x:1"},
		{"split part missing", []string{"big-00001-of-00003.gguf", "big-00003-of-00003.gguf"}, "has 2 of its 3 parts"},
		{"same id twice", []string{"m.gguf", "m-00001-of-00001.gguf"}, "both name model"},
		{"empty", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("GGUF"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ms, err := ScanModelsDir(dir)
			var got []string
			for _, m := range ms {
				got = append(got, fmt.Sprintf("%s:%d", m.ID, len(m.Files)))
				if m.Size != int64(4*len(m.Files)) {
					t.Errorf("%s: size %d", m.ID, m.Size)
				}
			}
			gs := strings.Join(got, " ")
			if err != nil {
				gs = err.Error()
			}
			if !strings.Contains(gs, tc.want) || tc.want == "" && gs != "" {
				t.Errorf("got %q, want %q", gs, tc.want)
			}
		})
	}
}
