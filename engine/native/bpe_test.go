package native

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/shared"
)

// qwenVocabModel returns a small random model that carries Qwen2's
// 151,936-token byte-level BPE vocabulary (and its chat template), made
// from the test model's recipe with the vocabulary-sized tensors resized.
// It skips when the reference folder is absent.
func qwenVocabModel(t testing.TB) *model.Model {
	t.Helper()
	vf, err := gguf.Open(shared.Path(t, "models", "vocab", "ggml-vocab-qwen2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer vf.Close()
	spec := testmodel.Spec{Name: "rill-tiny-qwen-vocab", Embd: 32, Layers: 1, Heads: 2, KV: 1, FF: 64, Context: 4096, Type: quant.F16, Seed: 9}
	data, err := testmodel.Bytes(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	copyMeta := func(src *gguf.File, tokenizer bool) {
		for _, k := range src.Metadata.Keys() {
			if strings.HasPrefix(k, "tokenizer.") != tokenizer {
				continue
			}
			v, _ := src.Metadata.Value(k)
			if err := w.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyMeta(f, false)
	copyMeta(vf, true)
	tokens, _ := vf.Metadata.Strings("tokenizer.ggml.tokens")
	rng := rand.New(rand.NewPCG(spec.Seed, 1))
	for _, ti := range f.Tensors {
		tt, _ := f.Tensor(ti.Name)
		if ti.Name != "token_embd.weight" && ti.Name != "output.weight" {
			if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, tt.Data); err != nil {
				t.Fatal(err)
			}
			continue
		}
		vals := make([]float32, len(tokens)*spec.Embd)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		rb, err := quant.F16.RowBytes(spec.Embd)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(tokens)*rb)
		if err := quant.Quantize(quant.F16, buf, vals); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(ti.Name, quant.F16, []int{spec.Embd, len(tokens)}, buf); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	mf, err := gguf.Parse([]byte(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mf)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestConstrainedBPEVocabulary: on a 151,936-token byte-level BPE
// vocabulary the grammar's mask holds a random model to a JSON Schema and
// to forced tool calls, sampled and greedy, with and without n-gram
// drafting.
func TestConstrainedBPEVocabulary(t *testing.T) {
	t.Parallel()
	m := qwenVocabModel(t)
	e, err := New(m, testCompute(t), Options{Logger: discard, NGram: true, KVCacheBytes: 32 << 20})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	start(t, e)
	id := e.Models()[0].ID
	if e.tok.Size() != 151936 {
		t.Fatalf("vocabulary of %d tokens", e.tok.Size())
	}
	schema := compileSchema(t, eventSchema)
	weather := compileSchema(t, weatherParams)
	rf := &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(eventSchema), Strict: true}
	for _, noDraft := range []bool{false, true} {
		for _, temp := range []float64{0, 1} {
			what := fmt.Sprintf("no_draft %v T=%v", noDraft, temp)
			r := collect(t, e, &engine.Request{Model: id, Messages: userTurn("Plan a trip to the sea."), MaxTokens: 1500, N: 2,
				ResponseFormat: rf, NoDraft: noDraft, Sampling: engine.Sampling{Temperature: temp, Seed: seed(21)}})
			for c, text := range r.text {
				if r.final[c].FinishReason != engine.FinishStop {
					t.Fatalf("%s choice %d: finish %q: %s", what, c, r.final[c].FinishReason, text)
				}
				validate(t, schema, text)
			}
			t.Logf("%s: %d tokens: %.200s", what, r.final[0].Stats.CompletionTokens, r.text[0])

			parallel := false
			calls := collectTools(t, e, &engine.Request{Model: id, Messages: userTurn("Weather in Rome?"), MaxTokens: 600,
				Tools: testTools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"},
				ParallelToolCalls: &parallel, NoDraft: noDraft, Sampling: engine.Sampling{Temperature: temp, Seed: seed(22)}})
			got := calls[0]
			if got.final.FinishReason != engine.FinishToolCalls || len(got.calls) != 1 || got.calls[0].Name != "get_weather" {
				t.Fatalf("%s: forced call: %+v", what, got)
			}
			validate(t, weather, got.calls[0].Arguments)
		}
	}
}
