//go:build !linux

package app

import "os"

// isTerminal reports whether f looks like a terminal: a character device.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
