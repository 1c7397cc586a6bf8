package native

import "testing"

// newCPUCompute makes the CPU backend the tests run engines on. This
// package's tests cannot import engine/native/cpurun (it imports this
// package), so cpurun_test.go, an external test file, sets it.
var newCPUCompute func() Compute

// SetCPUCompute is how cpurun_test.go sets newCPUCompute.
func SetCPUCompute(f func() Compute) { newCPUCompute = f }

// testCompute returns a CPU backend for one engine of the test. New takes
// it over; it is closed when the test ends as well, for engines that New
// refused (a second Close does nothing).
func testCompute(t testing.TB) Compute {
	t.Helper()
	if newCPUCompute == nil {
		t.Fatal("no CPU compute: cpurun_test.go did not run")
	}
	c := newCPUCompute()
	t.Cleanup(func() { c.Close() })
	return c
}
