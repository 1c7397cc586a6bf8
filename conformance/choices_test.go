package conformance_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/design.md §3 rule 6: n > 1 counts the prompt (and its cached prefix) once and
// sums completion tokens over the choices.

// completionBounds is the range of completion_tokens the observed choices
// allow: a choice that ran to length emitted exactly maxTokens; one that
// stopped emitted its logprob entries, plus possibly the end-of-sequence
// token, which servers count but send no logprob for. ok is false when no
// choice could be observed.
func completionBounds(tokens []int, finish []string, maxTokens int) (lo, hi int, ok bool, desc string) {
	var parts []string
	for j := range tokens {
		switch {
		case finish[j] == "length":
			lo += maxTokens
			hi += maxTokens
			ok = true
		case tokens[j] > 0:
			lo += tokens[j]
			hi += tokens[j] + 1
			ok = true
		default:
			hi += maxTokens
		}
		parts = append(parts, fmt.Sprintf("choice %d: %d logprob entries, finish_reason %q", j, tokens[j], finish[j]))
	}
	return lo, hi, ok, strings.Join(parts, "; ")
}

var _ = Describe("n > 1", Label("usage"), func() {
	const n, maxTokens = 3, 8
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			for _, v := range vias {
				Context(v.name, Label(v.label...), func() {
					It("counts the prompt once and sums completion_tokens over the choices", func(ctx SpecContext) {
						b := ep.Body(env.main.Model, prompt(), merge(map[string]any{"max_tokens": maxTokens}, ep.Logprobs()))
						one, _, _ := v.send(ctx, env.main, ep, b, 1)
						many, tokens, finish := v.send(ctx, env.main, ep, merge(b, map[string]any{"n": n}), n)
						Expect(many.PromptTokens).To(Equal(one.PromptTokens),
							"prompt_tokens with n = %d must count the shared prompt once (%d with n = 1)", n, one.PromptTokens)
						lo, hi, ok, desc := completionBounds(tokens, finish, maxTokens)
						if !ok {
							Skip("per-choice token counts are unobservable: the target sent no logprobs and no choice ran to max_tokens (" + desc + ")")
						}
						Expect(many.CompletionTokens).To(SatisfyAll(BeNumerically(">=", lo), BeNumerically("<=", hi)),
							"completion_tokens %d must be the sum over the %d choices, between %d and %d by what they emitted (%s)",
							many.CompletionTokens, n, lo, hi, desc)
					})

					It("counts the cached prefix once", Label("prefix-cache"), func(ctx SpecContext) {
						needPrefixCache()
						b := ep.Body(env.main.Model, prompt(), map[string]any{"max_tokens": 2})
						one := v.usage(ctx, env.main, ep, b, 1)
						many := v.usage(ctx, env.main, ep, merge(b, map[string]any{"n": n}), n)
						Expect(many.PromptTokens).To(Equal(one.PromptTokens), "prompt_tokens of n = %d vs n = 1", n)
						expectWarm(many, fmt.Sprintf("n = %d on a prompt seen before", n))
					})
				})
			}
		})
	}
})
