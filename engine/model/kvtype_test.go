package model_test

import (
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
)

// TestParseKVType: llama.cpp's names of the cache types, in any case,
// round-trip through String; anything else is refused with the list of
// types.
func TestParseKVType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want model.KVType
		name string
	}{
		{"", model.KVF16, "f16"},
		{"f16", model.KVF16, "f16"},
		{"F32", model.KVF32, "f32"},
		{"q8_0", model.KVQ8_0, "q8_0"},
		{"Q4_0", model.KVQ4_0, "q4_0"},
	} {
		got, err := model.ParseKVType(tc.in)
		if err != nil || got != tc.want || got.String() != tc.name {
			t.Errorf("ParseKVType(%q) = %v, %v; want %s", tc.in, got, err, tc.name)
		}
	}
	for _, in := range []string{"q8", "q4_1", "bf16", "f16 "} {
		if _, err := model.ParseKVType(in); err == nil || !strings.Contains(err.Error(), "want f16, f32, q8_0 or q4_0") {
			t.Errorf("ParseKVType(%q): err = %v", in, err)
		}
	}
}

// TestKVSizeQuantized: a Q8_0 or Q4_0 block's memory is its rows' GGML
// blocks, with no padding; a head size that is not a multiple of 32 is
// refused with an error that says so.
func TestKVSizeQuantized(t *testing.T) {
	t.Parallel()
	c := &model.Config{Layers: 2, HeadsKV: 3, HeadDim: 64}
	for _, tc := range []struct {
		typ  model.KVType
		elem quant.Type
		want int64
	}{
		{model.KVQ8_0, quant.Q8_0, 2 * 2 * 16 * 3 * 2 * 34},
		{model.KVQ4_0, quant.Q4_0, 2 * 2 * 16 * 3 * 2 * 18},
		{model.KVF16, quant.F16, 2 * 2 * 16 * 3 * 64 * 2},
	} {
		if got := model.KVBytesPerBlock(c, tc.typ, 16); got != tc.want {
			t.Errorf("KVBytesPerBlock(%v) = %d, want %d", tc.typ, got, tc.want)
		}
		kv, err := model.NewKV(c, tc.typ, 4, 16)
		if err != nil {
			t.Fatal(err)
		}
		if s := kv.Memory().Spec(); s.Type != tc.elem {
			t.Errorf("%v: a cache of %v", tc.typ, s.Type)
		}
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	for _, typ := range []model.KVType{model.KVQ8_0, model.KVQ4_0} {
		_, err := model.NewKVOn(be, &model.Config{Layers: 1, HeadsKV: 1, HeadDim: 80}, typ, 1, 16)
		if err == nil || !strings.Contains(err.Error(), "multiple of 32, not 80") {
			t.Errorf("%v cache of heads of 80: err = %v", typ, err)
		}
	}
}
