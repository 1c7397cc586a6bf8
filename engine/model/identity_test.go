package model

import (
	"testing"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	load := func(spec testmodel.Spec) *Model {
		t.Helper()
		data, err := testmodel.Bytes(spec)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a := load(testmodel.Target(quant.F32)).Fingerprint()
	if b := load(testmodel.Target(quant.F32)).Fingerprint(); a != b {
		t.Fatalf("the same model has two fingerprints: %s, %s", a, b)
	}
	reseeded := testmodel.Target(quant.F32)
	reseeded.Seed++
	for name, spec := range map[string]testmodel.Spec{
		"other weight type":  testmodel.Target(quant.F16),
		"other model":        testmodel.Draft(quant.F32),
		"same shape, reseed": reseeded,
	} {
		if b := load(spec).Fingerprint(); b == a {
			t.Errorf("%s: same fingerprint %s", name, a)
		}
	}
}
