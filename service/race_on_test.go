//go:build race

package service

// raceEnabled: the race detector is on, and its instrumentation makes
// frames larger, which figures about stacks cannot allow for.
const raceEnabled = true
