package service

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rill/engine"
	"rill/internal/buildinfo"
)

// Prometheus metrics (GET /metrics). The names mirror vLLM's (vllm:X is
// rill_X here, Prometheus' convention for a prefix), so that dashboards
// built for vLLM port over by renaming the prefix. Every series carries the
// label model_name.
//
// The token counters and the per-request histograms are observed where the
// usage of a request is assembled (finish), from that very usage: they are
// the numbers the client was sent, counted once per completed request,
// whatever the transport. A request that fails or is cancelled sends no
// usage and counts nothing but its time to first token. The gauges come
// from the engine (engine.LoadReporter), read when the metrics are scraped.
//
// Cost per token: one read of the monotonic clock and a bucket search into
// the request's own inter-token latency tally (latency.go); no atomics, no
// allocation, no map. The per-model handles are resolved once per request.
const metricsPrefix = "rill_"

// Metric and label names, for the tests and the page.
const (
	labelModel        = "model_name"
	labelFinish       = "finished_reason"
	labelReplica      = "replica"
	metricPrompt      = metricsPrefix + "prompt_tokens_total"
	metricGeneration  = metricsPrefix + "generation_tokens_total"
	metricCacheQuery  = metricsPrefix + "prefix_cache_queries_total"
	metricCacheHit    = metricsPrefix + "prefix_cache_hits_total"
	metricDraft       = metricsPrefix + "spec_decode_num_draft_tokens_total"
	metricAccepted    = metricsPrefix + "spec_decode_num_accepted_tokens_total"
	metricSuccess     = metricsPrefix + "request_success_total"
	metricTTFT        = metricsPrefix + "time_to_first_token_seconds"
	metricITL         = metricsPrefix + "inter_token_latency_seconds"
	metricE2E         = metricsPrefix + "e2e_request_latency_seconds"
	metricReqPrompt   = metricsPrefix + "request_prompt_tokens"
	metricReqGen      = metricsPrefix + "request_generation_tokens"
	metricRunning     = metricsPrefix + "num_requests_running"
	metricWaiting     = metricsPrefix + "num_requests_waiting"
	metricKVUsage     = metricsPrefix + "kv_cache_usage_perc"
	metricDiskBlocks  = metricsPrefix + "prompt_cache_disk_blocks_total"
	metricReplicaUp   = metricsPrefix + "upstream_replica_healthy"
	metricReplicaBusy = metricsPrefix + "upstream_replica_requests_in_flight"
	metricBuildInfo   = metricsPrefix + "build_info"
)

// Histogram buckets. The latency buckets are vLLM's, with finer ones below
// them for a CPU engine on small models, whose tokens come in well under
// vLLM's first bucket.
var (
	ttftBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
		0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	e2eBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40,
		50, 60, 120, 240, 480, 960, 1920, 7680}
)

// tokenBuckets are 1, 2, 5, 10, 20, 50, … up to limit, as vLLM builds
// them for its per-request token histograms.
func tokenBuckets(limit int) []float64 {
	var out []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*scale > limit {
				return out
			}
			out = append(out, float64(m*scale))
		}
	}
}

// metrics is a Server's registry and its series. Safe for concurrent use.
type metrics struct {
	registry *prometheus.Registry
	handler  http.Handler

	promptTokens, generationTokens  *prometheus.CounterVec
	cacheQueries, cacheHits         *prometheus.CounterVec
	draftTokens, acceptedTokens     *prometheus.CounterVec
	success                         *prometheus.CounterVec
	ttft, e2e                       *prometheus.HistogramVec
	itl                             *latencyCollector
	requestPrompt, requestGenerated *prometheus.HistogramVec

	mu      sync.RWMutex
	byModel map[string]*modelMetrics

	keys *keyVecs // per API key of the keys file (keys.go)
}

// modelMetrics are one model's series, resolved once so that a request
// touches no label map.
type modelMetrics struct {
	promptTokens, generationTokens prometheus.Counter
	cacheQueries, cacheHits        prometheus.Counter
	draftTokens, acceptedTokens    prometheus.Counter
	finishedStop, finishedLength   prometheus.Counter
	ttft, e2e                      prometheus.Observer
	itl                            *latencyHistogram
	requestPrompt, requestGen      prometheus.Observer
}

// newMetrics registers rill's series, the Go runtime's and the process's,
// and the gauges of e when it reports its load. Every model e serves has
// its series from the start, at zero.
func newMetrics(e engine.Engine) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{registry: reg, byModel: make(map[string]*modelMetrics)}
	model := []string{labelModel}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(v)
		return v
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, model)
		reg.MustRegister(v)
		return v
	}
	// The counters' names end in _total already: client_golang keeps them.
	m.promptTokens = counter(metricPrompt, "Prompt tokens of completed requests, as their usage reported them (prompt_tokens).", model)
	m.generationTokens = counter(metricGeneration, "Generated tokens of completed requests, as their usage reported them (completion_tokens).", model)
	m.cacheQueries = counter(metricCacheQuery, "Prompt tokens looked up in the prefix cache: prompt_tokens of completed requests whose usage measured a cache.", model)
	m.cacheHits = counter(metricCacheHit, "Prompt tokens served from the prefix cache (cached_tokens of completed requests).", model)
	m.draftTokens = counter(metricDraft, "Draft tokens proposed to the target model (accepted + rejected prediction tokens of completed requests).", model)
	m.acceptedTokens = counter(metricAccepted, "Draft tokens the target model accepted (accepted_prediction_tokens of completed requests).", model)
	m.success = counter(metricSuccess, "Choices that finished, by finish_reason (a request with n choices counts n).", []string{labelModel, labelFinish})

	m.ttft = histogram(metricTTFT, "Time from the start of a request to its first token, in seconds.", ttftBuckets)
	m.itl = newLatencyCollector(metricITL, "Time between two consecutive pieces of text of one choice, as the transport received them, in seconds (counted when the request ends).")
	reg.MustRegister(m.itl)
	m.e2e = histogram(metricE2E, "Time from the start of a completed request to its last token, in seconds.", e2eBuckets)
	longest := 0
	for _, md := range e.Models() {
		longest = max(longest, md.ContextLength)
	}
	if longest == 0 {
		longest = 1 << 20
	}
	m.requestPrompt = histogram(metricReqPrompt, "Prompt tokens per completed request.", tokenBuckets(longest))
	m.requestGenerated = histogram(metricReqGen, "Generated tokens per completed request (all choices).", tokenBuckets(longest))

	if lr, ok := e.(engine.LoadReporter); ok {
		reg.MustRegister(&loadCollector{engine: lr})
	}
	if lr, ok := e.(engine.LifecycleReporter); ok {
		reg.MustRegister(&lifecycleCollector{engine: lr})
	}
	m.keys = newKeyVecs(reg)
	reg.MustRegister(buildInfoGauge(buildinfo.Read()))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, md := range e.Models() {
		m.model(md.ID)
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// buildInfoGauge is rill_build_info, always 1, whose labels say which
// build is running (Prometheus' convention, as go_build_info): a query
// joins on it to break a series down by version.
func buildInfoGauge(info buildinfo.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metricBuildInfo,
		Help: "A metric with a constant 1 whose labels are the version, VCS revision and Go version rill was built with.",
		ConstLabels: prometheus.Labels{
			"version": info.Version, "revision": info.Revision, "goversion": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// model returns the series of model id, making them on first use.
func (m *metrics) model(id string) *modelMetrics {
	m.mu.RLock()
	mm := m.byModel[id]
	m.mu.RUnlock()
	if mm != nil {
		return mm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mm = m.byModel[id]; mm != nil {
		return mm
	}
	mm = &modelMetrics{
		promptTokens:     m.promptTokens.WithLabelValues(id),
		generationTokens: m.generationTokens.WithLabelValues(id),
		cacheQueries:     m.cacheQueries.WithLabelValues(id),
		cacheHits:        m.cacheHits.WithLabelValues(id),
		draftTokens:      m.draftTokens.WithLabelValues(id),
		acceptedTokens:   m.acceptedTokens.WithLabelValues(id),
		finishedStop:     m.success.WithLabelValues(id, string(engine.FinishStop)),
		finishedLength:   m.success.WithLabelValues(id, string(engine.FinishLength)),
		ttft:             m.ttft.WithLabelValues(id),
		itl:              m.itl.model(id),
		e2e:              m.e2e.WithLabelValues(id),
		requestPrompt:    m.requestPrompt.WithLabelValues(id),
		requestGen:       m.requestGenerated.WithLabelValues(id),
	}
	m.byModel[id] = mm
	return mm
}

// begin starts the metrics of one request for model with the given number
// of choices (wire indexes), started at start.
func (m *metrics) begin(model string, choices int, start time.Time) *requestMetrics {
	return &requestMetrics{m: m.model(model), start: start, last: make([]time.Duration, choices)}
}

// requestMetrics observes one request. It is owned by the goroutine that
// runs the generation; a nil *requestMetrics observes nothing. Times are
// kept as offsets from start: time.Since reads only the monotonic clock,
// half the cost of time.Now, and it runs once per event.
type requestMetrics struct {
	m     *modelMetrics
	start time.Time
	// ttft is the time to the first event of any choice; 0 until then.
	ttft time.Duration
	// last is, per wire index, when its last piece of text came (0: none yet).
	last []time.Duration
	// itl tallies the inter-token latencies; made by the first (a
	// stream waiting for its engine holds thousands of these).
	itl                  *latencyTally
	stopped, lengthLimit int // choices finished, by reason
	// key is the API key the request is charged to; nil for none.
	key *keyUse
}

// event observes one engine event of the choice at wire index i: the time
// to the first token, the inter-token latency of a piece of text (or of a
// tool call), the finish reason of a final event (tool_calls counts as a
// stop, as in vLLM's metrics).
func (o *requestMetrics) event(i int, ev *engine.Event) {
	if o == nil {
		return
	}
	now := max(time.Since(o.start), 1) // 0 means "not yet"
	if o.ttft == 0 {
		o.ttft = now
		o.m.ttft.Observe(now.Seconds())
	}
	if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 {
		if last := o.last[i]; last != 0 {
			if o.itl == nil {
				o.itl = new(latencyTally)
			}
			o.itl.observe(float64(now-last) / float64(time.Second))
		}
		o.last[i] = now
	}
	if ev.Final {
		if ev.FinishReason == engine.FinishLength {
			o.lengthLimit++
		} else {
			o.stopped++
		}
	}
}

// end adds the request's inter-token latencies to its model's histogram.
// The generation calls it once, however it ended.
func (o *requestMetrics) end() {
	if o == nil {
		return
	}
	if o.itl != nil {
		o.m.itl.add(o.itl)
		o.itl = nil
	}
}

// finish counts the usage of a completed request: the numbers its client
// was sent (or would have been, without include_usage).
func (o *requestMetrics) finish(u *Usage) {
	if o == nil {
		return
	}
	m := o.m
	m.e2e.Observe(time.Since(o.start).Seconds())
	m.promptTokens.Add(float64(u.PromptTokens))
	m.generationTokens.Add(float64(u.CompletionTokens))
	m.requestPrompt.Observe(float64(u.PromptTokens))
	m.requestGen.Observe(float64(u.CompletionTokens))
	if u.CachedTokens != nil {
		m.cacheQueries.Add(float64(u.PromptTokens))
		m.cacheHits.Add(float64(*u.CachedTokens))
	}
	if u.AcceptedPredictionTokens != nil || u.RejectedPredictionTokens != nil {
		accepted := deref(u.AcceptedPredictionTokens)
		m.acceptedTokens.Add(float64(accepted))
		m.draftTokens.Add(float64(accepted + deref(u.RejectedPredictionTokens)))
	}
	m.finishedStop.Add(float64(o.stopped))
	m.finishedLength.Add(float64(o.lengthLimit))
	o.key.charge(u)
}

// timeToFirstToken is the request's time to its first token, 0 if none
// came (or o is nil).
func (o *requestMetrics) timeToFirstToken() time.Duration {
	if o == nil {
		return 0
	}
	return o.ttft
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// loadCollector exposes an engine's load as gauges, read at each scrape.
type loadCollector struct {
	engine engine.LoadReporter
}

var (
	descRunning = prometheus.NewDesc(metricRunning,
		"Choices being generated now (engines behind HTTP: requests in flight there).", []string{labelModel}, nil)
	descWaiting = prometheus.NewDesc(metricWaiting,
		"Choices queued in rill for a slot in the batch.", []string{labelModel}, nil)
	descKVUsage = prometheus.NewDesc(metricKVUsage,
		"Fraction of KV cache blocks in use, 0 to 1 (1 means 100 percent), as vLLM reports it.", []string{labelModel}, nil)
	descDiskBlocks = prometheus.NewDesc(metricDiskBlocks,
		"Blocks of the prompt cache's disk tier by event: loaded instead of computed, refused (bad files, deleted), saved, dropped (not written).", []string{labelModel, "event"}, nil)
	descReplicaUp = prometheus.NewDesc(metricReplicaUp,
		"1 when the health checker counts the replica as up, 0 when it is out of rotation.", []string{labelModel, labelReplica}, nil)
	descReplicaBusy = prometheus.NewDesc(metricReplicaBusy,
		"Requests rill has in flight at the replica.", []string{labelModel, labelReplica}, nil)
)

// Describe implements prometheus.Collector.
func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descDiskBlocks, descReplicaUp, descReplicaBusy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.engine.Load() {
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(l.Running), l.Model)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(l.Waiting), l.Model)
		if l.KVCacheUsage != nil {
			ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, *l.KVCacheUsage, l.Model)
		}
		if d := l.PromptCacheDisk; d != nil {
			for _, ev := range []struct {
				name string
				n    int64
			}{{"loaded", d.Loaded}, {"refused", d.Refused}, {"saved", d.Saved}, {"dropped", d.Dropped}} {
				ch <- prometheus.MustNewConstMetric(descDiskBlocks, prometheus.CounterValue, float64(ev.n), l.Model, ev.name)
			}
		}
		for _, r := range l.Replicas {
			up := 0.0
			if r.Healthy {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descReplicaUp, prometheus.GaugeValue, up, l.Model, r.URL)
			ch <- prometheus.MustNewConstMetric(descReplicaBusy, prometheus.GaugeValue, float64(r.InFlight), l.Model, r.URL)
		}
	}
}

// MetricsHandler serves the Prometheus metrics without the API key, for a
// listener of its own (rill serve --metrics-addr). On the API's listener
// GET /metrics serves the same, behind the key when one is set.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.handler }

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	s.metrics.handler.ServeHTTP(w, r)
}
