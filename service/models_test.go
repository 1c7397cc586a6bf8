package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"rill/engine"
)

// managedEngine is a double of a catalogue: models loaded on demand,
// whose states LoadModel and UnloadModel flip, and one ("broken") that
// never loads.
type managedEngine struct {
	*fakeEngine
	mu     sync.Mutex
	state  map[string]string
	loads  map[string]int64
	unload map[string]int64
}

func newManagedEngine() *managedEngine {
	m := &managedEngine{state: map[string]string{"a": engine.StateUnloaded, "b": engine.StateLoaded, "broken": engine.StateUnloaded},
		loads: map[string]int64{}, unload: map[string]int64{}}
	m.fakeEngine = &fakeEngine{models: []engine.ModelCard{{ID: "a"}, {ID: "b"}, {ID: "broken"}, {ID: "fixed"}}}
	return m
}

func (m *managedEngine) Models() []engine.ModelCard {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]engine.ModelCard(nil), m.fakeEngine.models...)
	for i := range out {
		out[i].State = m.state[out[i].ID]
		if out[i].ID == "broken" {
			out[i].LoadError = "tensor missing"
		}
	}
	return out
}

func (m *managedEngine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model == "broken" {
		return nil, fmt.Errorf("%w: model %q: tensor missing", engine.ErrModelLoad, req.Model)
	}
	return m.fakeEngine.Generate(ctx, req)
}

func (m *managedEngine) LoadModel(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch _, ok := m.state[id]; {
	case id == "broken":
		return fmt.Errorf("%w: model %q: tensor missing", engine.ErrModelLoad, id)
	case id == "fixed":
		return fmt.Errorf("%w: always loaded", engine.ErrUnsupported)
	case !ok:
		return engine.ErrUnknownModel
	}
	m.state[id] = engine.StateLoaded
	m.loads[id]++
	return nil
}

func (m *managedEngine) UnloadModel(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.state[id]; !ok {
		return engine.ErrUnknownModel
	}
	m.state[id] = engine.StateUnloaded
	m.unload[id]++
	return nil
}

func (m *managedEngine) Lifecycle() []engine.ModelLifecycle {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []engine.ModelLifecycle
	for _, id := range []string{"a", "b", "broken"} {
		out = append(out, engine.ModelLifecycle{Model: id, State: m.state[id], Loads: m.loads[id],
			Unloads: map[string]int64{engine.UnloadOperator: m.unload[id]}})
	}
	return out
}

func TestModelsLoadedOnDemand(t *testing.T) {
	t.Parallel()
	m := newManagedEngine()
	ts := httptest.NewServer(New(Options{Engine: m, APIKey: "k", Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(ts.Close)
	do := func(method, path, body string, key bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	status, body := do("GET", "/v1/models", "", true)
	mustValidate(t, "ListModelsResponse", []byte(body))
	for _, want := range []string{
		`{"id":"a","object":"model","created":0,"owned_by":"rill","status":{"value":"unloaded"}}`,
		`"status":{"value":"loaded"}`,
		`"status":{"value":"unloaded","failed":true,"error":"tensor missing"}`,
		`{"id":"fixed","object":"model","created":0,"owned_by":"rill"}`,
	} {
		if status != 200 || !strings.Contains(body, want) {
			t.Errorf("/v1/models: %d %s\nwant it to hold %s", status, body, want)
		}
	}

	for _, tc := range []struct {
		name, path, body string
		key              bool
		status           int
		want             string // in the body
	}{
		{"load", "/models/load", `{"model":"a"}`, true, 200, `{"id":"a","status":{"value":"loaded"}}`},
		{"unload", "/models/unload", `{"model":"b"}`, true, 200, `{"id":"b","status":{"value":"unloaded"}}`},
		{"needs the key", "/models/load", `{"model":"a"}`, false, 401, `invalid_api_key`},
		{"load fails", "/models/load", `{"model":"broken"}`, true, 503, `"code":"model_load_failed"`},
		{"unknown", "/models/unload", `{"model":"zzz"}`, true, 404, `"code":"model_not_found"`},
		{"always loaded", "/models/load", `{"model":"fixed"}`, true, 400, `"code":"unsupported_model"`},
		{"no model", "/models/load", `{}`, true, 400, `model`},
		{"unknown field", "/models/load", `{"model":"a","x":1}`, true, 400, `x`},
		{"get", "/models/load", ``, true, 405, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.name == "get" {
				method = "GET"
			}
			status, body := do(method, tc.path, tc.body, tc.key)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s: %d %s; want %d with %s", method, tc.path, status, body, tc.status, tc.want)
			}
		})
	}

	status, body = do("POST", "/v1/completions", `{"model":"broken","prompt":"hi"}`, true)
	if status != 503 || !strings.Contains(body, `"code":"model_load_failed"`) || !strings.Contains(body, "tensor missing") {
		t.Errorf("completion on a model that cannot load: %d %s", status, body)
	}

	_, body = do("GET", "/metrics", "", true)
	for _, want := range []string{
		`rill_model_loaded{model_name="a"} 1`,
		`rill_model_loaded{model_name="b"} 0`,
		`rill_model_loads_total{model_name="a"} 1`,
		`rill_model_unloads_total{model_name="b",reason="operator"} 1`,
		`rill_model_unloads_total{model_name="b",reason="idle"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
