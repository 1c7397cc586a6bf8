//go:build unix

package gguf

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open memory-maps the file at path read-only and parses it. Tensor views
// point into the mapping until Close, which unmaps it. The file must not be
// truncated or rewritten while it is open: reading a view of a shrunk file
// raises SIGBUS, as with any mapping.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	// The mapping outlives the descriptor.
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("open %s: not a regular file", path)
	}
	size := st.Size()
	if size == 0 {
		// mmap refuses a zero length; let Parse name the problem.
		_, err := Parse(nil)
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("open %s: %d bytes do not fit in memory", path, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = unix.Munmap(data)
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	page := os.Getpagesize()
	f.evict = func(b []byte) {
		// Only the pages b covers whole: a neighbour's bytes stay mapped.
		start := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(page))
		lo := 0
		if start != 0 {
			lo = page - start
		}
		if hi := lo + (len(b)-lo)/page*page; len(b) > lo && hi > lo {
			// Advice only: the data stays the file's, whatever the answer.
			_ = unix.Madvise(b[lo:hi], unix.MADV_DONTNEED)
		}
	}
	f.release = func() error {
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("munmap %s: %w", path, err)
		}
		return nil
	}
	return f, nil
}
