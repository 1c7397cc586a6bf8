package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// DirModel is one model of a models folder.
type DirModel struct {
	// ID is the file name without .gguf (and without the split suffix).
	ID string
	// Files are the model's GGUF files: one, or a split GGUF's parts in order.
	Files []string
	// Size is the files' total size in bytes.
	Size int64
}

// splitName matches the parts of a split GGUF, as llama.cpp's gguf-split
// names them: name-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.+)-(\d{5})-of-(\d{5})\.gguf$`)

// ScanModelsDir lists the GGUF models of the folder dir (not of its
// subfolders), sorted by id. A split GGUF whose parts are not all there
// is an error, as are two files that give the same id.
func ScanModelsDir(dir string) ([]DirModel, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("models folder: %w", err)
	}
	byID := map[string]*DirModel{}
	parts := map[string]int{} // the part count a split model's names give
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(strings.ToLower(name), ".gguf") || !ent.Type().IsRegular() && ent.Type()&os.ModeSymlink == 0 {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		id, n := name[:len(name)-len(".gguf")], 1
		if sm := splitName.FindStringSubmatch(name); sm != nil {
			id = sm[1]
			n, _ = strconv.Atoi(sm[3])
		}
		m := byID[id]
		if m == nil {
			m = &DirModel{ID: id}
			byID[id] = m
			parts[id] = n
		} else if parts[id] != n || n == 1 {
			return nil, fmt.Errorf("models folder %s: %s and %s both name model %q", dir, m.Files[0], name, id)
		}
		m.Files = append(m.Files, filepath.Join(dir, name))
		m.Size += info.Size()
	}
	var out []DirModel
	for id, m := range byID {
		if len(m.Files) != parts[id] {
			return nil, fmt.Errorf("models folder %s: split model %q has %d of its %d parts", dir, id, len(m.Files), parts[id])
		}
		slices.Sort(m.Files)
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b DirModel) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
