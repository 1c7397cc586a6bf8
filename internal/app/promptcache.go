package app

import (
	"fmt"
	"path/filepath"

	"rill/config"
	"rill/engine/promptcache"
)

// promptCaches opens the prompt cache directories the native models of ms
// name, once each (models may share one): by cleaned path, each bounded by
// the largest size any of its models gives.
func promptCaches(ms []*config.Model) (map[string]*promptcache.Dir, error) {
	sizes := make(map[string]int64)
	var order []string
	for _, m := range ms {
		n := m.Native
		if n == nil || n.PromptCacheDir == "" {
			continue
		}
		p := filepath.Clean(n.PromptCacheDir)
		if _, ok := sizes[p]; !ok {
			order = append(order, p)
		}
		sizes[p] = max(sizes[p], int64(n.PromptCacheSize))
	}
	dirs := make(map[string]*promptcache.Dir, len(order))
	for _, p := range order {
		d, err := promptcache.Open(p, promptcache.Options{MaxBytes: sizes[p]})
		if err != nil {
			return nil, fmt.Errorf("prompt cache directory: %w", err)
		}
		dirs[p] = d
	}
	return dirs, nil
}

// promptCacheOf is the directory m's native engine uses, or nil.
func promptCacheOf(dirs map[string]*promptcache.Dir, m *config.Model) *promptcache.Dir {
	if m.Native == nil || m.Native.PromptCacheDir == "" {
		return nil
	}
	return dirs[filepath.Clean(m.Native.PromptCacheDir)]
}
