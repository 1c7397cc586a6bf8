package model_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"rill/engine/model"
	"slices"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/sample"
	"rill/engine/tokenizer"
	"rill/internal/shared"
)

// sharedDir returns ../shared or the repository's mirror of it, skipping
// the test when neither is there.
func sharedDir(t testing.TB) string { return shared.Root(t) }

type oracleStep struct {
	ID   int          `json:"id"`
	Top5 [][2]float64 `json:"top5"`
}

type oracleCase struct {
	PromptIDs    []int        `json:"prompt_ids"`
	GeneratedIDs []int        `json:"generated_ids"`
	Steps        []oracleStep `json:"steps"`
}

// contiguousTable maps positions 0..n-1 to blocks 0.. in order.
func contiguousTable(n, bs int) []int32 {
	t := make([]int32, (n+bs-1)/bs)
	for i := range t {
		t[i] = int32(i)
	}
	return t
}

// tolerance bounds the per-step largest top-5 logprob difference from
// llama.cpp: its median over the steps of a prompt, and its maximum.
type tolerance struct{ median, max float64 }

// TestOracle checks tokenisation, greedy decoding and top-5
// log-probabilities against llama.cpp's recorded oracle (llama-server
// b10587) on the real tiny models.
//
// llama.cpp accumulates attention values in half precision (flash attention
// over its default F16 cache), which makes its numbers chaotic at about
// 1e-3: rill with the same rounding, its attention scores nudged by one ulp,
// moves between 1.0e-3 and 3.9e-3 away from llama.cpp on stories260K. So
// the typical step must agree within 1e-3 and no step may leave that noise
// band. (Measured when written: medians 2.6e-4 and 2.9e-4, largest 1.05e-3
// and 2.2e-3 on stories260K; 4e-5 at most on llama-2-tiny-random.)
func TestOracle(t *testing.T) {
	shared := sharedDir(t)
	checkOracle(t, sharedModels(shared), filepath.Join(shared, "refdata/llamacpp/b_oracle/oracle_greedy_top5.json"), tolerance{1e-3, 5e-3})
}

// TestOracleUnseenPrompts does the same for prompts rill's tests had not
// seen, recorded from another llama.cpp build (node-llama-cpp 3.21.1's,
// scripts/peer/oracle.mjs): unicode, CJK, emoji, whitespace runs, tabs and
// newlines, "</s>" inside the text, and a 653-token prompt. Tokens must be
// equal, prompt and continuation alike. Log-probabilities get the noise of
// two llama.cpp builds on top of rill's: on the oracle's own two prompts
// that build is up to 3.9e-3 from b10587, and on these prompts rill is a
// median 1e-3 to 1e-2 from it, the 653-token prompt furthest (half-precision
// value sums over hundreds of positions). The bound catches real errors,
// not rounding: a norm epsilon 30 times too large, or a RoPE base 1% off,
// fails it.
func TestOracleUnseenPrompts(t *testing.T) {
	shared := sharedDir(t)
	checkOracle(t, sharedModels(shared), filepath.Join("testdata", "llamacpp_greedy_top5.json"), tolerance{1.5e-2, 4e-2})
}

// sharedModels opens the models an oracle names from ../shared/models.
func sharedModels(shared string) func(file string) (*model.Model, error) {
	return func(file string) (*model.Model, error) {
		return model.Open(filepath.Join(shared, "models", file))
	}
}

// checkOracle runs every prompt of the oracle file at path on the models it
// names, which open loads by file name, over an F16 KV cache.
func checkOracle(t *testing.T, open func(file string) (*model.Model, error), path string, tol tolerance) {
	checkOracleKV(t, open, path, tol, model.KVF16)
}

// checkOracleKV is checkOracle over a KV cache of type kvType.
func checkOracleKV(t *testing.T, open func(file string) (*model.Model, error), path string, tol tolerance, kvType model.KVType) {
	checkOracleRun(t, open, path, func(string) tolerance { return tol }, kvType, false)
}

// checkOracleRun is checkOracleKV; withPrompt, the prompt's batch names
// its length (model.Batch.Prompt), as the engine does, so that a backend
// computes it with its prompt arithmetic (the CPU backend's tiled
// attention for prompts of at least 64 tokens, as llama.cpp computes
// ubatches of at least 64).
// Each model file's bound is tolFor(file).
func checkOracleRun(t *testing.T, open func(file string) (*model.Model, error), path string, tolFor func(file string) tolerance, kvType model.KVType, withPrompt bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var oracle struct {
		Models   map[string]map[string]oracleCase `json:"models"`
		Settings map[string]struct {
			ContextSize int `json:"context_size"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(raw, &oracle); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for file, cases := range oracle.Models {
		tol := tolFor(file)
		m, err := open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		tok, err := tokenizer.FromGGUF(m.File.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		for prompt, oc := range cases {
			t.Run(file+"/"+prompt, func(t *testing.T) {
				ids := tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
				if !slices.Equal(ids, oc.PromptIDs) {
					t.Fatalf("rill tokenises the prompt as %v, llama.cpp as %v", ids, oc.PromptIDs)
				}
				const bs = 16
				total := len(oc.PromptIDs) + len(oc.GeneratedIDs)
				kv, err := model.NewKV(&m.Config, kvType, (total+bs-1)/bs, bs)
				if err != nil {
					t.Fatal(err)
				}
				r := model.NewRunner(m, be, len(oc.PromptIDs))
				if n := oracle.Settings[file].ContextSize; n > 0 {
					r.SetContextLength(n) // llama.cpp's n_ctx picks long or short RoPE factors
				}
				table := contiguousTable(total, bs)
				b := &model.Batch{Tables: [][]int32{table}}
				for i, id := range oc.PromptIDs {
					b.Tokens = append(b.Tokens, int32(id))
					b.Pos = append(b.Pos, int32(i))
					b.Seq = append(b.Seq, 0)
				}
				b.Logits = []int32{int32(len(oc.PromptIDs) - 1)}
				if withPrompt {
					b.Prompt = []int32{int32(len(oc.PromptIDs))}
				}
				pos := len(oc.PromptIDs)
				var worst float64
				stepDiffs := make([]float64, 0, len(oc.Steps))
				for step, want := range oc.Steps {
					logits, err := r.Forward(b, kv)
					if err != nil {
						t.Fatal(err)
					}
					ls := sample.NewLogSoftmax(logits)
					top := ls.Top(5, nil)
					got := top[0].ID
					var stepWorst float64
					for k, w := range want.Top5 {
						d := math.Abs(float64(ls.Of(int(w[0]))) - w[1])
						stepWorst = max(stepWorst, d)
						worst = max(worst, d)
						if top[k].ID != int(w[0]) && math.Abs(float64(top[k].Logprob)-w[1]) > tol.max {
							t.Errorf("step %d: top[%d] = %d (%.5f), llama.cpp %d (%.5f)", step, k, top[k].ID, top[k].Logprob, int(w[0]), w[1])
						}
					}
					stepDiffs = append(stepDiffs, stepWorst)
					if got != want.ID {
						t.Fatalf("step %d: greedy token %d, llama.cpp %d", step, got, want.ID)
					}
					b.Reset()
					b.Tables = append(b.Tables, table)
					b.Tokens = append(b.Tokens, int32(got))
					b.Pos = append(b.Pos, int32(pos))
					b.Seq = append(b.Seq, 0)
					b.Logits = append(b.Logits, 0)
					pos++
				}
				slices.Sort(stepDiffs)
				median := stepDiffs[len(stepDiffs)/2]
				t.Logf("logprob difference from llama.cpp over %d steps: median %.2e, largest %.2e", len(oc.Steps), median, worst)
				if median > tol.median || worst > tol.max {
					t.Errorf("logprob differences: median %.2e (limit %.0e), largest %.2e (limit %.0e)", median, tol.median, worst, tol.max)
				}
			})
		}
	}
}
