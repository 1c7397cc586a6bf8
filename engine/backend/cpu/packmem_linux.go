package cpu

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// allocPacked returns size bytes for packed weights, asking the kernel for
// transparent huge pages: the weights are read in full for every token,
// and with 2 MiB pages their reads miss the TLB far less.
func allocPacked(size int) []byte {
	const huge = 2 << 20
	buf := make([]byte, size+huge)
	off := 0
	if a := addr(buf) % huge; a != 0 {
		off = int(huge - a)
	}
	buf = buf[off : off+size : off+size]
	if n := size &^ (huge - 1); n > 0 {
		// Advice only: without huge pages the weights work the same.
		_ = unix.Madvise(buf[:n], unix.MADV_HUGEPAGE)
	}
	return buf
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
