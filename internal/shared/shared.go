// Package shared locates the project's reference material for tests: tiny
// real GGUF models (models/) and recordings of llama.cpp (refdata/).
//
// It lives in two places with the same layout:
//
//   - the reference folder ../shared beside the repository root, which has
//     everything, including material too large to commit (the vocab-only
//     GGUFs of models/vocab, the chat templates of refdata/chat-templates);
//   - the repository's own mirror, testdata/shared, a byte-identical subset
//     (the two tiny models with their provenance, and llama.cpp's recordings)
//     that every clone carries, so that `go test ./...` on a fresh clone runs
//     the checks against real models and llama.cpp.
//
// Path resolves a file or folder in ../shared first and in the mirror
// second: both hold the same bytes (TestMirrorMatchesShared checks it), and a
// folder such as refdata/ is fuller in ../shared. Tests skip, with a message
// that says where they looked, when neither has what they need; nothing is
// ever downloaded.
package shared

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// MirrorDir is the mirror's folder, relative to the repository root.
const MirrorDir = "testdata/shared"

// repoRoot returns the folder holding go.mod, walking up from the working
// directory (a test runs in its package's folder).
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Find returns the reference folder ../shared and whether it exists.
func Find() (string, bool) {
	root, ok := repoRoot()
	if !ok {
		return "", false
	}
	dir := filepath.Join(filepath.Dir(root), "shared")
	if _, err := os.Stat(dir); err != nil {
		return dir, false
	}
	return dir, true
}

// Mirror returns the repository's mirror folder and whether it exists.
func Mirror() (string, bool) {
	root, ok := repoRoot()
	if !ok {
		return "", false
	}
	dir := filepath.Join(root, filepath.FromSlash(MirrorDir))
	if _, err := os.Stat(dir); err != nil {
		return dir, false
	}
	return dir, true
}

// roots returns the places Path looks in, in order: ../shared, the mirror.
func roots() []string {
	var out []string
	for _, find := range []func() (string, bool){Find, Mirror} {
		if dir, _ := find(); dir != "" {
			out = append(out, dir)
		}
	}
	return out
}

// locate returns the first of roots/elem that exists.
func locate(roots []string, elem ...string) (string, bool) {
	rel := filepath.Join(elem...)
	for _, root := range roots {
		p := filepath.Join(root, rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// Lookup returns the path of elem (such as "models", "stories260K.gguf") in
// ../shared or else in the mirror, and whether either has it. It is Path
// for code that must not skip, such as fuzz seeds and benchmarks.
func Lookup(elem ...string) (string, bool) { return locate(roots(), elem...) }

// Path returns a file or folder of the reference material, from ../shared or
// else from the repository's mirror, or skips the test when neither has it.
func Path(tb testing.TB, elem ...string) string {
	tb.Helper()
	p, ok := Lookup(elem...)
	if !ok {
		tb.Skipf("%s is in neither the reference folder ../shared nor the repository's %s (looked in %s): skipping",
			filepath.Join(elem...), MirrorDir, strings.Join(roots(), ", "))
	}
	return p
}

// Root returns the folder to join reference paths to: ../shared when it is
// there, else the repository's mirror (which holds only part of it, so a
// caller that may need more must check that its file exists). It skips the
// test when neither is there. Prefer Path, which looks in both for each path.
func Root(tb testing.TB) string {
	tb.Helper()
	if dir, ok := Find(); ok {
		return dir
	}
	if dir, ok := Mirror(); ok {
		return dir
	}
	tb.Skipf("neither the reference folder ../shared nor the repository's %s is there (looked in %s): skipping the checks against real models and llama.cpp's recordings",
		MirrorDir, strings.Join(roots(), ", "))
	return ""
}

// Dir returns the reference folder ../shared itself, or skips the test when
// it is absent. Use it only for material the mirror does not carry (the
// vocab-only GGUFs, the chat templates); Path and Root also find the mirror.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, ok := Find()
	if !ok {
		tb.Skipf("reference folder ../shared not found (looked at %q): skipping the checks that need material the repository does not carry", dir)
	}
	return dir
}
