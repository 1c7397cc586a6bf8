package upstream

import (
	"net/url"

	"rill/engine"
)

// Load implements engine.LoadReporter: the requests rill has in flight at
// each replica, and whether the health checker counts it as up. rill queues
// nothing for an upstream and cannot see its KV cache, so Waiting is 0 and
// KVCacheUsage nil. Replica URLs come without their user info (metrics are
// not the place for credentials).
func (e *Engine) Load() []engine.ModelLoad {
	l := engine.ModelLoad{Model: e.info.ID, Replicas: make([]engine.ReplicaLoad, len(e.replicas))}
	for i, r := range e.replicas {
		inFlight := int(r.inflight.Load())
		l.Running += inFlight
		l.Replicas[i] = engine.ReplicaLoad{URL: withoutUser(r.base), Healthy: !r.down.Load(), InFlight: inFlight}
	}
	return []engine.ModelLoad{l}
}

// withoutUser drops the user info of a replica's base URL.
func withoutUser(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.User == nil {
		return base
	}
	u.User = nil
	return u.String()
}
