package service

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"rill/engine"
)

// Operators' routes of a catalogue of models loaded on demand
// (engine.ModelManager), behind the API key like every route not open.
const (
	pathLoadModel   = "/models/load"
	pathUnloadModel = "/models/unload"
)

// modelRequest is the body of POST /models/load and /models/unload.
type modelRequest struct {
	Model string `json:"model"`
}

func (s *Server) handleLoadModel(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	s.manageModel(w, r, info, engine.ModelManager.LoadModel)
}

func (s *Server) handleUnloadModel(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	s.manageModel(w, r, info, engine.ModelManager.UnloadModel)
}

// manageModel serves a load or an unload: op on the model the body names,
// answered with the model's state afterwards.
func (s *Server) manageModel(w http.ResponseWriter, r *http.Request, info *requestInfo,
	op func(engine.ModelManager, context.Context, string) error) {
	var body modelRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	mm, ok := s.engine.(engine.ModelManager)
	if !ok {
		s.fail(w, r, info, invalid("model", "unsupported_model",
			"The model '%s' is always loaded: this server loads no models on demand.", clip(body.Model, maxEchoBytes)))
		return
	}
	if err := op(mm, r.Context(), body.Model); err != nil {
		s.fail(w, r, info, modelError(err, body.Model))
		return
	}
	for _, m := range s.engine.Models() {
		if m.ID == body.Model {
			b := append(make([]byte, 0, 96), `{"id":`...)
			b = appendString(b, m.ID)
			b = append(b, `,"status":`...)
			b = appendModelStatus(b, &m)
			writeJSON(w, r, append(b, "}\n"...))
			return
		}
	}
	s.fail(w, r, info, fromEngine(engine.ErrUnknownModel, body.Model))
}

// modelError maps an error of engine.ModelManager to the wire.
func modelError(err error, model string) *apiError {
	if errors.Is(err, engine.ErrUnsupported) {
		return invalid("model", "unsupported_model",
			"The model '%s' is always loaded: it cannot be loaded or unloaded on demand.", clip(model, maxEchoBytes))
	}
	return fromEngine(err, model)
}

// Metrics of models loaded on demand (engine.LifecycleReporter).
const (
	metricModelLoaded       = metricsPrefix + "model_loaded"
	metricModelLoads        = metricsPrefix + "model_loads_total"
	metricModelLoadFailures = metricsPrefix + "model_load_failures_total"
	metricModelUnloads      = metricsPrefix + "model_unloads_total"
	labelReason             = "reason"
)

var (
	descModelLoaded = prometheus.NewDesc(metricModelLoaded,
		"1 while the model is loaded (or being unloaded), 0 while it is not; models loaded on demand only.", []string{labelModel}, nil)
	descModelLoads = prometheus.NewDesc(metricModelLoads,
		"Loads of the model that succeeded.", []string{labelModel}, nil)
	descModelLoadFailures = prometheus.NewDesc(metricModelLoadFailures,
		"Loads of the model that failed.", []string{labelModel}, nil)
	descModelUnloads = prometheus.NewDesc(metricModelUnloads,
		"Unloads of the model, by reason: idle (its TTL ran out), evicted (room for another under the cap or the memory budget), operator (POST /models/unload).",
		[]string{labelModel, labelReason}, nil)
)

// lifecycleCollector exposes the loads and unloads of models loaded on
// demand, read at each scrape.
type lifecycleCollector struct {
	engine engine.LifecycleReporter
}

// Describe implements prometheus.Collector.
func (c *lifecycleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descModelLoaded, descModelLoads, descModelLoadFailures, descModelUnloads} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *lifecycleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.engine.Lifecycle() {
		loaded := 0.0
		if l.State == engine.StateLoaded {
			loaded = 1
		}
		ch <- prometheus.MustNewConstMetric(descModelLoaded, prometheus.GaugeValue, loaded, l.Model)
		ch <- prometheus.MustNewConstMetric(descModelLoads, prometheus.CounterValue, float64(l.Loads), l.Model)
		ch <- prometheus.MustNewConstMetric(descModelLoadFailures, prometheus.CounterValue, float64(l.LoadFailures), l.Model)
		// Every reason, at zero until it happens, so that rate() sees the first.
		for _, reason := range []string{engine.UnloadIdle, engine.UnloadEvicted, engine.UnloadOperator} {
			ch <- prometheus.MustNewConstMetric(descModelUnloads, prometheus.CounterValue, float64(l.Unloads[reason]), l.Model, reason)
		}
	}
}
