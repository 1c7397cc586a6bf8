package native

import "rill/engine"

// Load implements engine.LoadReporter from the counters the loop publishes
// after every step. Running counts admitted choices, paused ones included
// (they hold their KV blocks while their readers catch up); Waiting counts
// choices not yet admitted.
func (e *Engine) Load() []engine.ModelLoad {
	st := e.Stats()
	usage := 0.0
	if st.Cache.BlocksTotal > 0 {
		usage = float64(st.Cache.BlocksUsed) / float64(st.Cache.BlocksTotal)
	}
	l := engine.ModelLoad{Model: e.info.ID, Running: st.Running + st.Paused, Waiting: st.Waiting, KVCacheUsage: &usage}
	if d := e.disk; d != nil {
		l.PromptCacheDisk = &engine.DiskCacheCounts{Loaded: d.loaded.Load(), Refused: d.refused.Load(),
			Saved: d.saved.Load(), Dropped: d.dropped.Load() + d.failed.Load()}
	}
	return []engine.ModelLoad{l}
}
