package service

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"rill/engine"
	"rill/internal/buildinfo"
)

func TestTokenBuckets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit int
		want  []float64
	}{
		{0, nil},
		{1, []float64{1}},
		{4, []float64{1, 2}},
		{256, []float64{1, 2, 5, 10, 20, 50, 100, 200}},
		{2048, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}},
	}
	for _, tt := range tests {
		if got := tokenBuckets(tt.limit); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("tokenBuckets(%d) = %v, want %v", tt.limit, got, tt.want)
		}
	}
}

// TestLatencyHistogram: tallies added to a model's histogram come out of a
// scrape as a cumulative histogram with the right count and sum.
func TestLatencyHistogram(t *testing.T) {
	t.Parallel()
	c := newLatencyCollector("test_seconds", "test")
	var a, b latencyTally
	for _, v := range []float64{0.00005, 0.0003, 0.0003} {
		a.observe(v)
	}
	b.observe(100)    // above the highest bound: only in +Inf
	b.observe(0.0001) // on a bound: in that bucket (le)
	c.model("m").add(&a)
	c.model("m").add(&b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || len(fams[0].Metric) != 1 {
		t.Fatalf("families %v", fams)
	}
	h := fams[0].Metric[0].GetHistogram()
	if h.GetSampleCount() != 5 || h.GetSampleSum() != 0.00005+0.0003+0.0003+100+0.0001 {
		t.Errorf("count %d, sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{0.0001: 2, 0.00025: 2, 0.0005: 4, 80: 4}
	for _, bk := range h.GetBucket() {
		if n, ok := want[bk.GetUpperBound()]; ok && bk.GetCumulativeCount() != n {
			t.Errorf("bucket le=%v: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), n)
		}
	}
	if l := fams[0].Metric[0].GetLabel(); len(l) != 1 || l[0].GetName() != "model_name" || l[0].GetValue() != "m" {
		t.Errorf("labels %v", l)
	}
}

// TestMetricsUnknownModel: a request for a model that is not served makes
// no series (clients cannot grow the metrics with made-up names).
func TestMetricsUnknownModel(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	ts := newTestServer(t, fake, Options{})
	resp, _ := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
		`{"model":"made-up-model","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
	resp, _ = post(t, ts.Client(), ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("known model: %d", resp.StatusCode)
	}
	r, err := ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var body strings.Builder
	if _, err := io.Copy(&body, r.Body); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body.String(), "made-up-model") {
		t.Error("/metrics has series for a model that is not served")
	}
	if !strings.Contains(body.String(), `rill_prompt_tokens_total{model_name="tiny"} 1`) {
		t.Errorf("/metrics lacks the served model's count:\n%.2000s", body.String())
	}
}

// TestMetricsBuildInfo: /metrics has rill_build_info at 1 with the
// running binary's version, revision and Go version as labels.
func TestMetricsBuildInfo(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &fakeEngine{}, Options{})
	r, err := ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var body strings.Builder
	if _, err := io.Copy(&body, r.Body); err != nil {
		t.Fatal(err)
	}
	info := buildinfo.Read()
	want := fmt.Sprintf(`rill_build_info{goversion=%q,revision=%q,version=%q} 1`, info.GoVersion, info.Revision, info.Version)
	if !strings.Contains(body.String(), want+"\n") {
		t.Errorf("/metrics lacks %s:\n%.3000s", want, body.String())
	}
}
