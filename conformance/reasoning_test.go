package conformance_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §3 rule 9: completion_tokens_details.reasoning_tokens counts the
// tokens of a thinking block streamed as reasoning_content; it is a part of
// completion_tokens, absent for models that do not reason, summed over
// choices.

// needReasoning skips a spec when the target has no model that reasons.
func needReasoning() *target {
	GinkgoHelper()
	if env.reasoning == nil {
		Skip(env.reasoningSkip)
	}
	return env.reasoning
}

// texts sends body the way v says and returns the usage and what each of
// the n choices said.
func (v via) texts(ctx context.Context, t *target, ep conformance.Endpoint, body map[string]any, n int) (*conformance.Usage, []conformance.ChoiceText) {
	GinkgoHelper()
	var u *conformance.Usage
	var texts []conformance.ChoiceText
	var err error
	if v.tc == nil {
		var raw []byte
		raw, u = post(ctx, t, ep, body)
		texts, err = conformance.ResponseChoiceTexts(raw, n)
	} else {
		tr := stream(ctx, *v.tc, t, ep, merge(body, withUsage()))
		u = finalUsage(tr, n)
		texts, err = tr.ChoiceTexts(n)
	}
	Expect(err).NotTo(HaveOccurred())
	return u, texts
}

var _ = Describe("completion_tokens_details.reasoning_tokens", Label("usage"), func() {
	Describe("POST "+conformance.Chat.Path, func() {
		for _, v := range vias {
			Context(v.name, Label(v.label...), func() {
				Context("on a model that does not reason", func() {
					It("leaves reasoning_tokens absent (or null) and sends no reasoning_content", func(ctx SpecContext) {
						if env.reasoning != nil && env.reasoning.Model == env.main.Model {
							Skip("the target's model reasons; there is no model without reasoning to observe")
						}
						u, texts := v.texts(ctx, env.main, conformance.Chat, conformance.Chat.Body(env.main.Model, shortPrompt(), map[string]any{"max_tokens": 6}), 1)
						Expect(u.ReasoningTokens).To(BeNil(), "reasoning_tokens of a model that does not reason")
						Expect(texts[0].Reasoning).To(BeEmpty(), "reasoning_content of a model that does not reason")
					})
				})

				Context("on a model that reasons", func() {
					It("reports reasoning_tokens as a part of completion_tokens that covers the reasoning_content sent", func(ctx SpecContext) {
						t := needReasoning()
						u, texts := v.texts(ctx, t, conformance.Chat, conformance.Chat.Body(t.Model, shortPrompt(), map[string]any{"max_tokens": 16}), 1)
						Expect(u.ReasoningTokens).NotTo(BeNil(), "reasoning_tokens of a model that reasons (0 when it did not)")
						r := *u.ReasoningTokens
						Expect(r).To(BeNumerically("<=", u.CompletionTokens), "reasoning_tokens is a part of completion_tokens")
						if texts[0].Reasoning != "" {
							Expect(r).To(BeNumerically(">", 0), "reasoning_content %q was sent but reasoning_tokens is 0", texts[0].Reasoning)
						}
						if texts[0].Content != "" {
							Expect(r).To(BeNumerically("<", u.CompletionTokens),
								"the answer %q took tokens, yet all %d completion tokens count as reasoning", texts[0].Content, u.CompletionTokens)
						}
					})

					It("sums reasoning_tokens over n = 2 choices", func(ctx SpecContext) {
						t := needReasoning()
						b := conformance.Chat.Body(t.Model, shortPrompt(), map[string]any{"max_tokens": 12, "temperature": 0})
						one, oneTexts := v.texts(ctx, t, conformance.Chat, b, 1)
						two, twoTexts := v.texts(ctx, t, conformance.Chat, merge(b, map[string]any{"n": 2}), 2)
						if twoTexts[0] != oneTexts[0] || twoTexts[1] != oneTexts[0] {
							Skip("at temperature 0 the two choices differ from each other or from n = 1, so the count of each is not observable")
						}
						Expect(one.ReasoningTokens).NotTo(BeNil(), "reasoning_tokens with n = 1")
						Expect(two.ReasoningTokens).NotTo(BeNil(), "reasoning_tokens with n = 2")
						Expect(two.CompletionTokens).To(Equal(2*one.CompletionTokens), "completion_tokens of two choices that each equal the n = 1 answer")
						Expect(*two.ReasoningTokens).To(Equal(2**one.ReasoningTokens),
							"reasoning_tokens with n = 2 must be the sum over the choices: each equals the n = 1 answer, which reasoned %d tokens", *one.ReasoningTokens)
					})
				})
			})
		}
	})

	Describe("POST "+conformance.Completions.Path, func() {
		Context("on a model that reasons", func() {
			It("leaves reasoning_tokens absent: a legacy completion is raw text, not split", func(ctx SpecContext) {
				t := needReasoning()
				_, u := post(ctx, t, conformance.Completions, conformance.Completions.Body(t.Model, shortPrompt(), map[string]any{"max_tokens": 6}))
				Expect(u.ReasoningTokens).To(BeNil(), "reasoning_tokens of a legacy completion")
			})
		})
	})
})
