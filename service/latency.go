package service

import (
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The inter-token latency histogram is the one metric observed per token.
// A shared prometheus.Histogram would cost every token several atomic
// operations on cache lines that all streams of a model contend for; here
// each request tallies its latencies in a plain local array and adds the
// tally to its model's histogram once, when it ends. Per token that is a
// bucket search and two increments, no atomics. Scrapes see the tokens of
// requests that have ended.

// latencyTally is one request's inter-token latencies, bucketed by
// itlBuckets (the last slot counts those above the highest bound). Owned by
// the request's goroutine.
type latencyTally struct {
	counts [numITLBuckets + 1]uint64
	sum    float64
}

// numITLBuckets is len(itlBuckets), which the tally's array needs as a
// constant; init checks that they agree.
const numITLBuckets = 25

func init() {
	if len(itlBuckets) != numITLBuckets || !slices.IsSorted(itlBuckets) {
		panic("service: itlBuckets must be numITLBuckets sorted bounds")
	}
}

func (t *latencyTally) observe(seconds float64) {
	t.counts[sort.SearchFloat64s(itlBuckets, seconds)]++
	t.sum += seconds
}

// latencyHistogram is one model's inter-token latency histogram, fed with
// whole tallies. Safe for concurrent use.
type latencyHistogram struct {
	counts  [numITLBuckets + 1]atomic.Uint64
	sumBits atomic.Uint64 // math.Float64bits of the sum
}

// add adds t to h.
func (h *latencyHistogram) add(t *latencyTally) {
	for i, n := range t.counts {
		if n != 0 {
			h.counts[i].Add(n)
		}
	}
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+t.sum)) {
			return
		}
	}
}

// latencyCollector exposes the models' latencyHistograms as one histogram
// family with the label model_name.
type latencyCollector struct {
	desc *prometheus.Desc

	mu      sync.RWMutex
	byModel map[string]*latencyHistogram
}

func newLatencyCollector(name, help string) *latencyCollector {
	return &latencyCollector{desc: prometheus.NewDesc(name, help, []string{labelModel}, nil),
		byModel: make(map[string]*latencyHistogram)}
}

// model returns the histogram of model id, making it on first use.
func (c *latencyCollector) model(id string) *latencyHistogram {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.byModel[id]
	if h == nil {
		h = new(latencyHistogram)
		c.byModel[id] = h
	}
	return h
}

// Describe implements prometheus.Collector.
func (c *latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. A bucket and the count may
// disagree by a tally that is being added during the scrape; the next
// scrape sees it whole.
func (c *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for id, h := range c.byModel {
		buckets := make(map[float64]uint64, numITLBuckets)
		var cumulative uint64
		for i, bound := range itlBuckets {
			cumulative += h.counts[i].Load()
			buckets[bound] = cumulative
		}
		count := cumulative + h.counts[numITLBuckets].Load()
		sum := math.Float64frombits(h.sumBits.Load())
		ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets, id)
	}
}
