package native_test

import (
	"rill/engine/backend/cpu"
	"rill/engine/native"
	"rill/engine/native/cpurun"
)

// The package's tests run their engines on the CPU backend, the one the
// rill command wires in.
func init() {
	native.SetCPUCompute(func() native.Compute { return cpurun.New(cpu.Options{}) })
}
