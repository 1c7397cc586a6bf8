package upstream

import (
	"context"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What a replica says of its own load, read from its Prometheus /metrics
// after each passing health check: the share of its KV cache in use and
// the requests it holds waiting. The names are tried in order; the first
// one a replica exports counts. llama.cpp's server exports no KV usage
// (b10587), only its deferred requests.
var (
	// kvUsageNames are gauges of the fraction of KV cache in use, 0 to 1.
	kvUsageNames = []string{
		"vllm:kv_cache_usage_perc",
		"vllm:gpu_cache_usage_perc", // vLLM before v1
		"sglang:token_usage",
		"llamacpp:kv_cache_usage_ratio", // llama.cpp before 2025
		"rill_kv_cache_usage_perc",
	}
	// waitingNames are gauges of the requests queued, not yet running.
	waitingNames = []string{
		"vllm:num_requests_waiting",
		"sglang:num_queue_reqs",
		"llamacpp:requests_deferred",
		"rill_num_requests_waiting",
	}
)

// maxMetricsBytes bounds what is read of a replica's /metrics.
const maxMetricsBytes = 4 << 20

// replicaGauges is what one scrape found: NaN where the replica reports
// nothing.
type replicaGauges struct {
	kvUsage, waiting float64
}

var noGauges = replicaGauges{kvUsage: math.NaN(), waiting: math.NaN()}

// scrape reads r's /metrics and stores what it says of r's load; a replica
// without Prometheus metrics (404, 405, 501, or a body of another type) is
// not asked again. A failed scrape forgets the last figures and leaves r's
// health alone: the metrics are not the health check.
func (e *Engine) scrape(ctx context.Context, r *replica) {
	g, absent, err := e.readGauges(ctx, r)
	if absent {
		r.noMetrics.Store(true)
	}
	if err != nil {
		e.log.Debug("upstream replica metrics", "model", e.info.ID, "replica", r.base, "err", err)
	}
	r.storeGauges(g)
}

// readGauges asks r for GET /metrics. absent reports a replica that
// serves none.
func (e *Engine) readGauges(ctx context.Context, r *replica) (g replicaGauges, absent bool, err error) {
	resp, err := e.getResponse(ctx, r, "/metrics", "text/plain;version=0.0.4")
	if err != nil {
		return noGauges, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return noGauges, true, fmt.Errorf("GET /metrics answered %d", resp.StatusCode)
	default:
		return noGauges, false, fmt.Errorf("GET /metrics answered %d", resp.StatusCode)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/plain" {
		return noGauges, true, fmt.Errorf("GET /metrics answered %q, not Prometheus text", mt)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return noGauges, false, fmt.Errorf("GET /metrics: %w", err)
	}
	name := e.opts.UpstreamModel // New defaults it to the ID
	return replicaGauges{
		kvUsage: gauge(fams, kvUsageNames, name, math.Max),
		waiting: gauge(fams, waitingNames, name, func(a, b float64) float64 { return a + b }),
	}, false, nil
}

// gauge is the value of the first of names that fams holds: over the
// series labelled with model (model_name or model) where there are such,
// else over all its series, combined by agg. NaN when none is there.
func gauge(fams map[string]*dto.MetricFamily, names []string, model string, agg func(a, b float64) float64) float64 {
	for _, name := range names {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			continue
		}
		series := f.GetMetric()
		var mine []*dto.Metric
		for _, m := range series {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "model_name" || l.GetName() == "model") && l.GetValue() == model {
					mine = append(mine, m)
					break // a series with both labels counts once
				}
			}
		}
		if len(mine) > 0 {
			series = mine
		}
		v := math.NaN()
		for _, m := range series {
			x := value(m)
			if math.IsNaN(x) {
				continue
			}
			if math.IsNaN(v) {
				v = x
			} else {
				v = agg(v, x)
			}
		}
		return v
	}
	return math.NaN()
}

// value is a gauge's, counter's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return math.NaN()
}

func (r *replica) storeGauges(g replicaGauges) {
	r.kvUsage.Store(math.Float64bits(g.kvUsage))
	r.waiting.Store(math.Float64bits(g.waiting))
}

func (r *replica) gauges() replicaGauges {
	return replicaGauges{
		kvUsage: math.Float64frombits(r.kvUsage.Load()),
		waiting: math.Float64frombits(r.waiting.Load()),
	}
}
