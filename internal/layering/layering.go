// Package layering checks the design's import boundaries from tests: which
// of the module's packages a package reaches through its imports, directly
// or through others (test files and other GOOS/GOARCH files aside).
package layering

import (
	"errors"
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"strings"
)

// module is the module path; its packages are the ones the walk follows.
const module = "rill"

// Imports returns the module's packages that pkg (an import path such as
// "rill/engine/native") reaches, each with the chain of imports from pkg
// that reaches it first. It reads the sources of the module the working
// directory is in.
func Imports(pkg string) (map[string][]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	seen := map[string][]string{}
	var walk func(path string, chain []string) error
	walk = func(path string, chain []string) error {
		if _, ok := seen[path]; ok {
			return nil
		}
		seen[path] = chain
		p, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				if err := walk(imp, append(chain[:len(chain):len(chain)], imp)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(pkg, []string{pkg}); err != nil {
		return nil, err
	}
	delete(seen, pkg)
	return seen, nil
}

// Reached returns the first package of imports (as Imports returns them)
// that is forbidden or inside it ("rill/engine/backend" covers
// "rill/engine/backend/cpu"), and the chain that reaches it.
func Reached(imports map[string][]string, forbidden string) (pkg string, chain []string, ok bool) {
	for p, c := range imports {
		if p == forbidden || strings.HasPrefix(p, forbidden+"/") {
			return p, c, true
		}
	}
	return "", nil, false
}

// moduleRoot is the folder of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("layering: no go.mod above the working directory")
		}
		dir = parent
	}
}
