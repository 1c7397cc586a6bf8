package shared

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestLocateOrder(t *testing.T) {
	t.Parallel()
	first, second := t.TempDir(), t.TempDir()
	write := func(root, name string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(root), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(first, "models/both.gguf")
	write(second, "models/both.gguf")
	write(second, "models/second.gguf")
	for _, tc := range []struct {
		elem []string
		want string
		ok   bool
	}{
		{[]string{"models", "both.gguf"}, filepath.Join(first, "models", "both.gguf"), true},
		{[]string{"models", "second.gguf"}, filepath.Join(second, "models", "second.gguf"), true},
		{[]string{"models"}, filepath.Join(first, "models"), true},
		{[]string{"models", "absent.gguf"}, "", false},
	} {
		got, ok := locate([]string{first, filepath.Join(t.TempDir(), "missing"), second}, tc.elem...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("locate(%v) = %q, %v; want %q, %v", tc.elem, got, ok, tc.want, tc.ok)
		}
	}
}

// mirrorOwn are the mirror's own files, which have no original in ../shared.
var mirrorOwn = map[string]bool{"README.md": true, "models/SOURCES.md": true}

// TestMirrorModels pins the digests that models/SOURCES.md states, so that
// the models every clone tests against cannot change unnoticed.
func TestMirrorModels(t *testing.T) {
	t.Parallel()
	dir, ok := Mirror()
	if !ok {
		t.Fatalf("the repository's %s is missing (looked at %q)", MirrorDir, dir)
	}
	for name, want := range map[string]string{
		"stories260K.gguf":         "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d",
		"llama-2-tiny-random.gguf": "81f226c62d28ed4a1a9b9fa080fcd9f0cc40e0f9d5680036583ff98fbcd035cb",
	} {
		data, err := os.ReadFile(filepath.Join(dir, "models", name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: sha256 %s, want %s (models/SOURCES.md)", name, got, want)
		}
	}
}

// TestMirrorMatchesShared checks that every mirrored file has the bytes of
// its original in ../shared, so that a test reads the same data wherever
// Path finds it.
func TestMirrorMatchesShared(t *testing.T) {
	t.Parallel()
	mirror, ok := Mirror()
	if !ok {
		t.Fatalf("the repository's %s is missing (looked at %q)", MirrorDir, mirror)
	}
	ref := Dir(t)
	n := 0
	err := filepath.WalkDir(mirror, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(mirror, path)
		if err != nil {
			return err
		}
		if mirrorOwn[filepath.ToSlash(rel)] {
			return nil
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(ref, rel))
		if err != nil {
			t.Errorf("%s: no original in %s: %v", rel, ref, err)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s", rel, filepath.Join(ref, rel))
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Errorf("compared only %d files", n)
	}
}
