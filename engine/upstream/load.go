package upstream

import (
	"math"
	"net/url"

	"rill/engine"
)

// Load implements engine.LoadReporter: the requests rill has in flight at
// each replica, and whether the health checker counts it as up. rill queues
// nothing for an upstream: Waiting is the sum of what the healthy replicas'
// own /metrics report waiting, and KVCacheUsage the mean of their reported
// KV usage, nil when none reports it (replica_metrics.go). Replica URLs
// come without their user info (metrics are not the place for credentials).
func (e *Engine) Load() []engine.ModelLoad {
	l := engine.ModelLoad{Model: e.info.ID, Replicas: make([]engine.ReplicaLoad, len(e.replicas))}
	var kvSum float64
	kvN := 0
	for i, r := range e.replicas {
		inFlight := int(r.inflight.Load())
		healthy := !r.down.Load()
		l.Running += inFlight
		l.Replicas[i] = engine.ReplicaLoad{URL: withoutUser(r.base), Healthy: healthy, InFlight: inFlight}
		if !healthy {
			continue
		}
		g := r.gauges()
		if !math.IsNaN(g.kvUsage) {
			kvSum += min(max(g.kvUsage, 0), 1)
			kvN++
		}
		if !math.IsNaN(g.waiting) && g.waiting > 0 {
			l.Waiting += int(math.Round(g.waiting))
		}
	}
	if kvN > 0 {
		u := kvSum / float64(kvN)
		l.KVCacheUsage = &u
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
