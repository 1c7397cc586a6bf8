//go:build !unix

package gguf

import (
	"fmt"
	"os"
)

// Open reads the file at path into memory and parses it (this platform has
// no mmap support here). Tensor views point into that memory until Close.
func Open(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return f, nil
}
