package grammar

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// TestRollbackRestoresMasks walks random allowed tokens, then rolls back to
// random earlier points and checks the mask is the one recorded there; it
// then takes another path, so stale frames would show.
func TestRollbackRestoresMasks(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"llama-spm", "qwen2"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := loadVocab(t, name)
			g, err := FromJSONSchema([]byte(benchSchema), JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := newSampler(v, 99)
			m := NewMatcher(g, v)
			var masks [][]uint64
			record := func() {
				m.Mask(s.mask)
				if len(masks) <= m.Len() {
					masks = append(masks, nil)
				}
				masks[m.Len()] = slices.Clone(s.mask)
			}
			for round := range 6 {
				for range 40 {
					record()
					id := s.next(m, m.Len())
					if id < 0 || m.Accept(id) != nil || m.Ended() {
						break
					}
				}
				k := s.rng.IntN(m.Len() + 1)
				if err := m.Rollback(k); err != nil {
					t.Fatal(err)
				}
				masks = masks[:m.Len()+1]
				m.Mask(s.mask)
				if !slices.Equal(s.mask, masks[m.Len()]) {
					t.Fatalf("round %d: mask after rolling back %d tokens to %d differs from the one recorded there", round, k, m.Len())
				}
				c := m.Clone()
				id := s.next(m, 0)
				if id >= 0 {
					_ = m.Accept(id)
				}
				c.Mask(s.mask)
				if !slices.Equal(s.mask, masks[c.Len()]) {
					t.Fatalf("round %d: a clone's mask changed when the original advanced", round)
				}
			}
			if err := m.Rollback(m.Len() + 1); err == nil {
				t.Error("rolling back more tokens than accepted succeeded")
			}
		})
	}
}

func TestEndOfGeneration(t *testing.T) {
	t.Parallel()
	v := loadVocab(t, "qwen2")
	g, err := FromJSONSchema([]byte(`{"type":"integer","maximum":99}`), JSONOptions{MaxWhitespace: -1})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	mask := make([]uint64, MaskWords(v.Size()))
	eog := v.EOG()
	has := func(id int) bool { return mask[id>>6]&(1<<(id&63)) != 0 }
	m.Mask(mask)
	for _, id := range eog {
		if has(id) {
			t.Errorf("end-of-generation %d allowed before any digit", id)
		}
	}
	var te *TokenError
	if err := m.Accept(eog[0]); !errors.As(err, &te) || te.Pos != 0 {
		t.Errorf("accepting end-of-generation at the start: %v, want a TokenError at 0", err)
	}
	seven := greedyTokens(t, v, "7")[0]
	if err := m.Accept(seven); err != nil {
		t.Fatal(err)
	}
	m.Mask(mask)
	if !m.Done() || !has(eog[0]) || !has(greedyTokens(t, v, "5")[0]) {
		t.Fatalf("after 7: done %v, eog %v; want both, and digits still allowed", m.Done(), has(eog[0]))
	}
	for id := range v.Size() {
		if v.Token(id) == nil && !slices.Contains(eog, id) && has(id) {
			t.Errorf("special token %d allowed", id)
		}
	}
	if err := m.Accept(eog[0]); err != nil {
		t.Fatal(err)
	}
	m.Mask(mask)
	if !m.Ended() || slices.ContainsFunc(mask, func(w uint64) bool { return w != 0 }) {
		t.Error("tokens allowed after end of generation")
	}
	if err := m.Rollback(1); err != nil || m.Ended() || !m.Done() {
		t.Errorf("rollback of end-of-generation: %v, ended %v", err, m.Ended())
	}
}

func TestAcceptPrefix(t *testing.T) {
	t.Parallel()
	v := loadVocab(t, "llama-bpe")
	// The draft has a space after the colon: the bounded policy.
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"],"additionalProperties":false}`), JSONOptions{MaxWhitespace: BoundedWhitespace})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	draft := greedyTokens(t, v, `{"a": true}`)
	bad := append(slices.Clone(draft[:2]), greedyTokens(t, v, `x":`)...) // {"ax": is no key of the schema
	if n := m.AcceptPrefix(bad); n != 2 || m.Len() != 2 {
		t.Fatalf("accepted %d of a draft whose third token is wrong (len %d), want 2", n, m.Len())
	}
	if err := m.Rollback(2); err != nil {
		t.Fatal(err)
	}
	if n := m.AcceptPrefix(draft); n != len(draft) || !m.Done() {
		t.Fatalf("accepted %d of %d valid draft tokens, done %v", n, len(draft), m.Done())
	}
}

// TestAddedTextTokens: an added token that stands for plain text (Qwen's
// <tool_call>, given to NewVocab with its text) is one token inside a
// grammar that wants that text, and is refused elsewhere.
func TestAddedTextTokens(t *testing.T) {
	t.Parallel()
	v := byteVocab(t, "<tool_call>", "</tool_call>")
	call, end := 256, 257
	b := NewBuilder()
	g, err := b.Build(Seq(Lit("<tool_call>\n"), Lit("{}"), Lit("\n</tool_call>")))
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	if !m.Allowed(call) || m.Allowed(end) {
		t.Fatalf("at the start: <tool_call> allowed %v, </tool_call> allowed %v", m.Allowed(call), m.Allowed(end))
	}
	if err := m.Accept(call); err != nil {
		t.Fatal(err)
	}
	if err := m.AcceptBytes([]byte("\n{}\n")); err != nil {
		t.Fatal(err)
	}
	if err := m.Accept(end); err != nil || !m.Done() {
		t.Fatalf("</tool_call>: %v, done %v", err, m.Done())
	}
}

func TestMaskLogits(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 2, 3, 4, 5, 6, 7}
	mask := []uint64{0b100101} // ids 0, 2 and 5 allowed; id 6 is a padding row
	MaskLogits(logits, mask)
	inf := float32(math.Inf(-1))
	want := []float32{1, inf, 3, inf, inf, 6, inf}
	if !slices.Equal(logits, want) {
		t.Errorf("masked logits %v, want %v", logits, want)
	}
	logits = []float32{1, 2, 3}
	MaskLogits(logits, nil)
	for _, l := range logits {
		if !math.IsInf(float64(l), -1) {
			t.Errorf("ids beyond the mask not masked: %v", logits)
		}
	}
}
