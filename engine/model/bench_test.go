package model_test

import (
	"fmt"
	"os"
	"path/filepath"
	"rill/engine/model"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/shared"
)

// benchModels are the models the speed benchmarks run on: the test models,
// the shared real tiny models when present, files named in RILL_BENCH_GGUF,
// and (with RILL_BENCH_BIG=1) the
// 245M-parameter benchmark model written to a temporary folder, where decode
// speed is bound by memory bandwidth rather than per-token overhead.
func benchModels(b *testing.B) map[string]func() *model.Model {
	out := map[string]func() *model.Model{}
	for _, s := range []testmodel.Spec{testmodel.Target(quant.F32), testmodel.Target(quant.Q8_0)} {
		out[s.Name+"-"+s.Type.String()] = func() *model.Model { return fromSpec(b, s) }
	}
	if dir, ok := shared.Find(); ok {
		for _, f := range []string{"stories260K.gguf", "llama-2-tiny-random.gguf"} {
			out[f[:len(f)-5]] = func() *model.Model {
				m, err := model.Open(filepath.Join(dir, "models", f))
				if err != nil {
					b.Fatal(err)
				}
				return m
			}
		}
	}
	// RILL_BENCH_GGUF names GGUF files to benchmark as well (comma
	// separated), so that a peer engine can be measured on the same file.
	for _, path := range strings.Split(os.Getenv("RILL_BENCH_GGUF"), ",") {
		if path == "" {
			continue
		}
		out[strings.TrimSuffix(filepath.Base(path), ".gguf")] = func() *model.Model {
			m, err := model.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}
	}
	if os.Getenv("RILL_BENCH_BIG") != "" {
		for _, t := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0} {
			s := testmodel.Bench(t)
			out[s.Name+"-"+t.String()] = func() *model.Model {
				path := filepath.Join(b.TempDir(), "bench.gguf")
				if err := testmodel.WriteFile(path, s); err != nil {
					b.Fatal(err)
				}
				m, err := model.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				return m
			}
		}
	}
	return out
}

func fromSpec(tb testing.TB, s testmodel.Spec) *model.Model {
	data, err := testmodel.Bytes(s)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// decoder runs greedy-free decoding: it feeds token 1 (any valid id) at
// successive positions of one sequence, the cost of a decode step.
type decoder struct {
	r  *model.Runner
	kv *model.KV
	b  model.Batch
}

func newDecoder(m *model.Model, be model.Backend, ctx, maxBatch int) *decoder {
	return newDecoderKV(m, be, ctx, maxBatch, model.KVF16)
}

// newDecoderKV is newDecoder over a KV cache of type typ.
func newDecoderKV(m *model.Model, be model.Backend, ctx, maxBatch int, typ model.KVType) *decoder {
	kv, err := model.NewKV(&m.Config, typ, (ctx+15)/16, 16)
	if err != nil {
		panic(err)
	}
	d := &decoder{r: model.NewRunner(m, be, maxBatch), kv: kv}
	d.b.Tables = [][]int32{contiguousTable(ctx, 16)}
	return d
}

func (d *decoder) run(pos, n int) error {
	table := d.b.Tables[0]
	d.b.Reset()
	d.b.Tables = append(d.b.Tables, table)
	for i := range n {
		d.b.Tokens = append(d.b.Tokens, int32(1+i%7))
		d.b.Pos = append(d.b.Pos, int32(pos+i))
		d.b.Seq = append(d.b.Seq, 0)
	}
	d.b.Logits = append(d.b.Logits, int32(n-1))
	_, err := d.r.Forward(&d.b, d.kv)
	return err
}

// BenchmarkDecodeDepth measures one decode step at depth 2048 and 8192
// (the position decoded, so attention reads that many cached positions)
// per KV cache type, the types of one depth run one after the other:
// ns/op is per token. The cache below the position is not filled (zeros
// cost the kernels what any values cost), which spares the prefill.
// Quantised types are skipped for heads that are not a multiple of 32.
func BenchmarkDecodeDepth(b *testing.B) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for name, load := range benchModels(b) {
		b.Run(name, func(b *testing.B) {
			m := load()
			defer m.Close()
			for _, depth := range []int{2048, 8192} {
				for _, typ := range []model.KVType{model.KVF32, model.KVF16, model.KVQ8_0, model.KVQ4_0} {
					if (typ == model.KVQ8_0 || typ == model.KVQ4_0) && m.Config.HeadDim%32 != 0 {
						continue
					}
					b.Run(fmt.Sprintf("depth=%d/%s", depth, typ), func(b *testing.B) {
						d := newDecoderKV(m, be, depth+1, 1, typ)
						d.r.SetContextLength(depth + 1)
						b.ReportAllocs()
						b.ResetTimer()
						for b.Loop() {
							if err := d.run(depth, 1); err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
					})
				}
			}
		})
	}
}

// BenchmarkDecode measures llama-bench's tg128: 128 tokens decoded one at a
// time from an empty context. ns/op is per 128 tokens; tokens/s and
// allocs/token are reported.
func BenchmarkDecode(b *testing.B) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for name, load := range benchModels(b) {
		b.Run(name, func(b *testing.B) {
			m := load()
			defer m.Close()
			d := newDecoder(m, be, 128, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for pos := range 128 {
					if err := d.run(pos, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(128*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkPrefill measures llama-bench's pp64: one 64-token prompt in one
// forward pass.
func BenchmarkPrefill(b *testing.B) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for name, load := range benchModels(b) {
		b.Run(name, func(b *testing.B) {
			m := load()
			defer m.Close()
			d := newDecoder(m, be, 64, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := d.run(0, 64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(64*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestDecodeAllocatesNothing: a steady-state decode step allocates nothing.
func TestDecodeAllocatesNothing(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := fromSpec(t, testmodel.Target(quant.Q8_0))
	d := newDecoder(m, be, 256, 1)
	pos := 0
	step := func() {
		if err := d.run(pos, 1); err != nil {
			t.Fatal(err)
		}
		pos++
	}
	step() // first call sizes the logits buffers
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("a decode step allocates %v times", a)
	}
}
