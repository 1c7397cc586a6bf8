package router

import (
	"reflect"
	"testing"

	"rill/engine"
)

// loaded is a fake that reports a load for each of its models.
type loaded struct {
	*fake
	loads []engine.ModelLoad
}

func (l loaded) Load() []engine.ModelLoad { return l.loads }

// TestLoad: the router reports the loads of the engines that report
// theirs, in engine order, and leaves out the others.
func TestLoad(t *testing.T) {
	t.Parallel()
	usage := 0.25
	a := loaded{&fake{models: models("a")}, []engine.ModelLoad{{Model: "a", Running: 2, Waiting: 1, KVCacheUsage: &usage}}}
	b := &fake{models: models("b")}
	c := loaded{&fake{models: models("c", "d")}, []engine.ModelLoad{
		{Model: "c", Running: 1, Replicas: []engine.ReplicaLoad{{URL: "http://x", Healthy: true, InFlight: 1}}},
		{Model: "d"},
	}}
	r, err := New(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	var lr engine.LoadReporter = r
	want := append(append([]engine.ModelLoad(nil), a.loads...), c.loads...)
	if got := lr.Load(); !reflect.DeepEqual(got, want) {
		t.Errorf("Load() = %+v, want %+v", got, want)
	}
}
