// Package shared locates the project's reference folder, ../shared beside
// the repository root: tiny real GGUF models (models/) and recordings of
// llama.cpp (refdata/). Tests use it and skip, with a message, when the
// folder is absent; nothing is ever downloaded.
package shared

import (
	"os"
	"path/filepath"
	"testing"
)

// Find returns the reference folder and whether it exists. It walks up from
// the working directory (a test runs in its package's folder) to the folder
// holding go.mod.
func Find() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			shared := filepath.Join(filepath.Dir(dir), "shared")
			if _, err := os.Stat(shared); err != nil {
				return shared, false
			}
			return shared, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Dir returns the reference folder, or skips the test when it is absent.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, ok := Find()
	if !ok {
		tb.Skipf("reference folder ../shared not found (looked at %q): skipping the checks against real models and llama.cpp's recordings", dir)
	}
	return dir
}

// Path returns a file or folder inside the reference folder, or skips the
// test when it is absent.
func Path(tb testing.TB, elem ...string) string {
	tb.Helper()
	p := filepath.Join(append([]string{Dir(tb)}, elem...)...)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("%s not found: skipping", p)
	}
	return p
}
