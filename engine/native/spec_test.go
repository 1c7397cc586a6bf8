package native

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

func loadSpec(t testing.TB, s testmodel.Spec) *model.Model {
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
	return m
}

// newDraftEngine starts the test target with its draft model.
func newDraftEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	opts.Draft = loadSpec(t, testmodel.Draft(quant.F32))
	return newTestEngine(t, opts)
}

// checkDraftAccounting asserts docs/design.md §3 rule 5's identities for one choice.
func checkDraftAccounting(t *testing.T, st *engine.Stats, k int) {
	t.Helper()
	if st.DraftAccepted == nil || st.DraftRejected == nil {
		t.Fatalf("drafting was active but the counters are nil: %+v", st)
	}
	acc, rej, comp := *st.DraftAccepted, *st.DraftRejected, st.CompletionTokens
	if acc < 0 || rej < 0 || acc > comp {
		t.Fatalf("accepted %d, rejected %d, completion %d: accepted must be within completion", acc, rej, comp)
	}
	if acc+rej > k*(comp-acc+1) {
		t.Fatalf("accepted %d + rejected %d > k*(completion-accepted+1) = %d", acc, rej, k*(comp-acc+1))
	}
}

var repetitive = strings.Repeat("The river ran past the hill. The fox drank from the river. ", 6)

// TestDraftingIsLosslessGreedy: at temperature 0 every proposer yields
// exactly the undrafted text, with consistent counters.
func TestDraftingIsLosslessGreedy(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	engines := map[string]*Engine{
		"draft model": newDraftEngine(t, Options{}),
		"ngram":       newTestEngine(t, Options{NGram: true}),
		"prediction":  plain,
	}
	id := plain.Models()[0].ID
	for _, prompt := range []string{repetitive, "Once upon a time", "A cached prefix is fast, and a good draft is faster."} {
		base := &engine.Request{Model: id, Prompt: prompt, MaxTokens: 48, IgnoreEOS: true}
		want := collect(t, plain, base)
		if want.final[0].Stats.DraftAccepted != nil {
			t.Fatal("counters present without drafting")
		}
		for name, e := range engines {
			req := *base
			if name == "prediction" {
				// Predict the right text with a mistake in the middle.
				txt := want.text[0]
				req.Prediction = txt[:len(txt)/2] + " and a fox" + txt[len(txt)/2:]
			}
			got := collect(t, e, &req)
			if got.text[0] != want.text[0] {
				t.Fatalf("%s on %.20q: drafted %q, plain %q", name, prompt, got.text[0], want.text[0])
			}
			st := got.final[0].Stats
			checkDraftAccounting(t, st, 4)
			t.Logf("%-11s %.20q: accepted %d rejected %d of %d tokens", name, prompt, *st.DraftAccepted, *st.DraftRejected, st.CompletionTokens)
			if name != "ngram" && *st.DraftAccepted == 0 {
				t.Errorf("%s accepted nothing on %.20q", name, prompt)
			}
			req.NoDraft = true
			if off := collect(t, e, &req); off.final[0].Stats.DraftAccepted != nil || off.text[0] != want.text[0] {
				t.Fatalf("%s with no_draft: counters %v, text %q", name, off.final[0].Stats.DraftAccepted, off.text[0])
			}
		}
	}
}

// TestDraftingStopConditions: drafts cut by max_tokens, stop strings and n>1
// keep the accounting identities and the undrafted output.
func TestDraftingStopConditions(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	drafted := newDraftEngine(t, Options{})
	id := plain.Models()[0].ID
	full := collect(t, plain, &engine.Request{Model: id, Prompt: repetitive, MaxTokens: 40}).text[0]
	words := strings.Fields(full)
	for i, req := range []engine.Request{
		{Model: id, Prompt: repetitive, MaxTokens: 1},
		{Model: id, Prompt: repetitive, MaxTokens: 7},
		{Model: id, Prompt: repetitive, MaxTokens: 40, Stop: []string{words[len(words)/2]}},
		{Model: id, Prompt: repetitive, MaxTokens: 20, N: 3},
	} {
		want := collect(t, plain, &req)
		got := collect(t, drafted, &req)
		for c := range want.text {
			if got.text[c] != want.text[c] || got.final[c].FinishReason != want.final[c].FinishReason {
				t.Fatalf("case %d choice %d: drafted %q (%s), plain %q (%s)", i, c, got.text[c], got.final[c].FinishReason, want.text[c], want.final[c].FinishReason)
			}
			if got.final[c].Stats.CompletionTokens != want.final[c].Stats.CompletionTokens {
				t.Fatalf("case %d: completion tokens %d drafted, %d plain", i, got.final[c].Stats.CompletionTokens, want.final[c].Stats.CompletionTokens)
			}
			checkDraftAccounting(t, got.final[c].Stats, 4)
		}
	}
}

// TestDraftingFollowsTargetDistribution samples a two-token continuation
// many times with and without the draft model at temperature 1 and checks
// with a χ² test that the distributions of the continuations agree.
func TestDraftingFollowsTargetDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	t.Parallel()
	plain := newTestEngine(t, Options{})
	drafted := newDraftEngine(t, Options{})
	ngramE := newTestEngine(t, Options{NGram: true})
	id := plain.Models()[0].ID
	const draws = 1500
	sample := func(e *Engine, prompt string, base int64) map[string]int {
		counts := map[string]int{}
		for i := range draws {
			r := collect(t, e, &engine.Request{Model: id, Prompt: prompt, MaxTokens: 2, IgnoreEOS: true,
				Sampling: engine.Sampling{Temperature: 1.5, Seed: seed(base + int64(i))}})
			counts[r.text[0]]++
		}
		return counts
	}
	for _, tc := range []struct {
		name   string
		e      *Engine
		prompt string
	}{
		{"draft model", drafted, "The fox and the bird"},
		{"ngram", ngramE, "the river ran past the river ran past the river ran"},
	} {
		want := sample(plain, tc.prompt, 1)
		got := sample(tc.e, tc.prompt, 1_000_000)
		chi, df := chiSquareTwoSample(want, got, 5)
		// Critical χ² at p = 1e-4 grows about like df + 4.3*sqrt(2 df).
		crit := float64(df) + 4.3*math.Sqrt(2*float64(df)) + 6
		t.Logf("%s: χ² = %.1f over %d degrees of freedom (critical %.1f), %d distinct continuations", tc.name, chi, df, crit, len(want))
		if df < 3 {
			t.Fatalf("%s: only %d bins; the test cannot tell distributions apart", tc.name, df+1)
		}
		if chi > crit {
			t.Fatalf("%s: drafted sampling differs from plain sampling: χ² = %.1f > %.1f\nplain %v\ndrafted %v", tc.name, chi, crit, top(want), top(got))
		}
	}
}

// chiSquareTwoSample compares two count tables of equal totals, pooling
// outcomes seen fewer than minCount times in total into one bin.
func chiSquareTwoSample(a, b map[string]int, minCount int) (float64, int) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var bins [][2]int
	var rest [2]int
	for k := range keys {
		if a[k]+b[k] < minCount {
			rest[0] += a[k]
			rest[1] += b[k]
			continue
		}
		bins = append(bins, [2]int{a[k], b[k]})
	}
	if rest[0]+rest[1] > 0 {
		bins = append(bins, rest)
	}
	chi := 0.0
	for _, c := range bins {
		d := float64(c[0] - c[1])
		chi += d * d / float64(c[0]+c[1])
	}
	return chi, len(bins) - 1
}

func top(m map[string]int) string {
	var b strings.Builder
	n := 0
	for k, v := range m {
		if v >= 40 && n < 8 {
			fmt.Fprintf(&b, "%q:%d ", k, v)
			n++
		}
	}
	return b.String()
}

func TestDraftVocabularyMustMatch(t *testing.T) {
	t.Parallel()
	data, err := testmodel.Bytes(testmodel.Draft(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite the draft with one token spelled differently.
	w := gguf.NewWriter()
	for _, k := range f.Metadata.Keys() {
		v, _ := f.Metadata.Value(k)
		if k == "tokenizer.ggml.tokens" {
			toks, _ := f.Metadata.Strings(k)
			toks[400] = "mismatch"
			if err := w.Set(k, toks); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		tt, _ := f.Tensor(ti.Name)
		if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, tt.Data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	df, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	draft, err := model.Load(df)
	if err != nil {
		t.Fatal(err)
	}
	target := loadSpec(t, testmodel.Target(quant.F32))
	_, err = New(target, testCompute(t), Options{Draft: draft})
	if err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("a draft with another vocabulary was accepted: %v", err)
	}
}
