package cpurun

import (
	"context"
	"slices"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

func load(t *testing.T, s testmodel.Spec) *model.Model {
	t.Helper()
	data, err := testmodel.Bytes(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// prompt is a batch of the tokens of one sequence at positions 0..n-1 in
// the blocks of table, with the logits of the last.
func prompt(n int, table []int32) *model.Batch {
	b := &model.Batch{Tables: [][]int32{table}}
	for i := range n {
		b.Tokens = append(b.Tokens, int32(3+5*i))
		b.Pos = append(b.Pos, int32(i))
		b.Seq = append(b.Seq, 0)
	}
	b.Logits = []int32{int32(n - 1)}
	return b
}

// TestRunnerContextLength: the runner serves the context it is made for,
// which picks long-context Phi-3's RoPE factors (the test model's original
// context is 512, its context 4096), as model.Runner does when told.
func TestRunnerContextLength(t *testing.T) {
	t.Parallel()
	m := load(t, testmodel.Phi3(quant.F32))
	c := New(cpu.Options{Threads: 1})
	defer c.Close()
	tests := []struct {
		context, want int // want: the context length model.Runner is set to
	}{
		{0, m.Config.ContextLength}, // the model's own
		{512, 512},                  // the short factors
		{4096, 4096},                // the long ones
	}
	b := prompt(9, []int32{0, 1, 2})
	var rows [][]float32
	for _, tc := range tests {
		r, err := c.NewRunner(m, native.RunnerSpec{MaxTokens: 16, ContextLength: tc.context, KVType: model.KVF32, Blocks: 4, BlockSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Forward(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		ref := model.NewRunner(m, c.be, 16)
		ref.SetContextLength(tc.want)
		kv, err := model.NewKV(&m.Config, model.KVF32, 4, 4)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("context %d: logits differ from model.Runner's at context %d", tc.context, tc.want)
		}
		rows = append(rows, slices.Clone(got))
	}
	if slices.Equal(rows[1], rows[2]) {
		t.Fatal("short and long RoPE factors gave the same logits: the test checks nothing")
	}
}

// TestRunnerCopyBlock: a block copied with CopyBlock serves a decode as the
// original does (a fork's partial prompt block).
func TestRunnerCopyBlock(t *testing.T) {
	t.Parallel()
	m := load(t, testmodel.Target(quant.Q8_0))
	c := New(cpu.Options{Threads: 1})
	defer c.Close()
	for _, kvType := range []model.KVType{model.KVF16, model.KVF32} {
		t.Run(kvType.String(), func(t *testing.T) {
			r, err := c.NewRunner(m, native.RunnerSpec{MaxTokens: 16, KVType: kvType, Blocks: 4, BlockSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := r.Forward(ctx, prompt(6, []int32{0, 1})); err != nil {
				t.Fatal(err)
			}
			decode := func(table []int32) []float32 {
				b := &model.Batch{Tokens: []int32{7}, Pos: []int32{6}, Seq: []int32{0}, Tables: [][]int32{table}, Logits: []int32{0}}
				out, err := r.Forward(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Clone(out)
			}
			fresh := decode([]int32{0, 3}) // block 3 was never written
			r.CopyBlock(2, 1, 2)
			copied := decode([]int32{0, 2})
			original := decode([]int32{0, 1})
			if !slices.Equal(copied, original) {
				t.Error("the copy serves other logits than the original block")
			}
			if slices.Equal(fresh, original) {
				t.Fatal("an empty block gives the original's logits: the test checks nothing")
			}
		})
	}
}
