package native

import (
	"testing"

	"rill/engine"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// TestMoEModelCard: the engine serves a mixture-of-experts model, and its
// card carries the model's total and active parameter counts (a dense
// model's are equal); two greedy choices of one prompt, decoded side by
// side in every step's batch, say the same thing.
func TestMoEModelCard(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec  testmodel.Spec
		dense bool
	}{
		{testmodel.Qwen3MoE(quant.Q8_0), false},
		{testmodel.Qwen2MoE(quant.F32), false},
		{testmodel.Target(quant.F32), true},
	} {
		m := loadSpec(t, c.spec)
		total, active := m.Params()
		e, err := New(m, testCompute(t), Options{Logger: discard, KVCacheBytes: 8 << 20})
		if err != nil {
			m.Close()
			t.Fatal(err)
		}
		start(t, e)
		card := e.Models()[0]
		if card.Params != total || card.ActiveParams != active || total <= 0 || (active == total) != c.dense {
			t.Errorf("%s: card counts %d and %d active, model %d and %d; dense %v", c.spec.Name, card.Params, card.ActiveParams, total, active, c.dense)
		}
		r := collect(t, e, &engine.Request{Model: card.ID, Prompt: "Once upon a time", MaxTokens: 12, N: 2})
		if r.text[0] == "" || r.text[0] != r.text[1] || r.final[0].Stats.CompletionTokens != 12 {
			t.Errorf("%s: greedy choices %q and %q", c.spec.Name, r.text[0], r.text[1])
		}
	}
}
