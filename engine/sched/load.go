package sched

import "rill/engine"

// Load implements engine.LoadReporter from the counters the loop publishes
// after every step: running and waiting choices, and KV blocks in use.
func (e *Engine) Load() []engine.ModelLoad {
	st := e.Stats()
	usage := 0.0
	if st.Cache.BlocksTotal > 0 {
		usage = float64(st.Cache.BlocksUsed) / float64(st.Cache.BlocksTotal)
	}
	return []engine.ModelLoad{{Model: e.info.ID, Running: st.Running, Waiting: st.Waiting, KVCacheUsage: &usage}}
}
