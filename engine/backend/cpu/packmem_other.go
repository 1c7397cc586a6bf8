//go:build !linux

package cpu

// allocPacked returns size bytes for packed weights.
func allocPacked(size int) []byte { return make([]byte, size) }
