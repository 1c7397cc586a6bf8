package model_test

import (
	"slices"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// TestSplitKV checks that a split cache (sliding layers in a memory of
// their own, under a block table of their own) gives bit-identical logits
// to one cache of every layer,
// and that a batch without fitting window tables is refused with an error.
func TestSplitKV(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	const bs, n = 16, 50 // a window of 8: the window skips blocks 0 and 1 at position 49
	for _, spec := range []testmodel.Spec{testmodel.Gemma3(quant.F32), testmodel.GptOss(quant.F32)} {
		m := fromSpec(t, spec)
		run := model.NewRunner(m, be, n)
		prompt := make([]int32, n)
		for i := range prompt {
			prompt[i] = int32(3 + i*7%(m.Config.VocabSize-3))
		}
		batch := func(windowTables [][]int32) *model.Batch {
			b := &model.Batch{Tables: [][]int32{contiguousTable(n, bs)}, WindowTables: windowTables, Logits: []int32{n - 1}}
			for i, tok := range prompt {
				b.Tokens, b.Pos, b.Seq = append(b.Tokens, tok), append(b.Pos, int32(i)), append(b.Seq, 0)
			}
			return b
		}
		one, err := model.NewKV(&m.Config, model.KVF16, 4, bs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := run.Forward(batch(nil), one)
		if err != nil {
			t.Fatal(err)
		}
		want = slices.Clone(want)
		split, err := model.NewSplitKVOn(be, &m.Config, model.KVF16, 4, 8, bs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := run.Forward(batch([][]int32{{6, 5, 2, 3}}), split)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: logits with a split cache differ from one cache", spec.Name)
		}
		for _, bad := range []struct {
			name   string
			tables [][]int32
			want   string
		}{
			{"no window tables", nil, "window tables"},
			{"short window table", [][]int32{{6, 5}}, "window blocks"},
			{"block past the window memory", [][]int32{{6, 5, 2, 8}}, "block 8 of 8"},
		} {
			if _, err := run.Forward(batch(bad.tables), split); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%s: %s: error %v, want one about %q", spec.Name, bad.name, err, bad.want)
			}
		}
	}
	if _, err := model.NewSplitKVOn(be, &fromSpec(t, testmodel.Target(quant.F32)).Config, model.KVF16, 4, 4, 16); err == nil {
		t.Error("NewSplitKVOn split a model without sliding layers")
	}
}
