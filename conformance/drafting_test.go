package conformance_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §3 rules 4 and 5: the draft counters of completion_tokens_details.

var _ = Describe("completion_tokens_details draft counters", Label("usage", "drafting"), func() {
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			for _, v := range vias {
				Context(v.name, Label(v.label...), func() {
					Context("without drafting", func() {
						It("leaves accepted_prediction_tokens and rejected_prediction_tokens absent (or null)", func(ctx SpecContext) {
							extra := map[string]any{"max_tokens": 6}
							if env.main.caps.Drafting {
								// rill's extension turns drafting off per request.
								extra["no_draft"] = true
							}
							u := v.usage(ctx, env.main, ep, ep.Body(env.main.Model, shortPrompt(), extra), 1)
							if env.main.caps.Drafting && u.AcceptedPredictionTokens != nil {
								Skip("target drafts for every request and ignores no_draft; no request without drafting can be observed")
							}
							Expect(u.AcceptedPredictionTokens).To(BeNil(), "accepted_prediction_tokens without drafting")
							Expect(u.RejectedPredictionTokens).To(BeNil(), "rejected_prediction_tokens without drafting")
						})
					})

					Context("with drafting", func() {
						It("reports both counters, consistent with at most k draft tokens per step", func(ctx SpecContext) {
							if !env.main.caps.Drafting {
								Skip(env.main.caps.DraftingReason)
							}
							u := v.usage(ctx, env.main, ep, ep.Body(env.main.Model, prompt(), map[string]any{"max_tokens": 32}), 1)
							expectNone(conformance.CheckDraft(u, env.cfg.DraftK, 1), "draft counters (k = %d from %s)", env.cfg.DraftK, conformance.EnvDraftK)
						})

						It("keeps the counters of n = 2 choices, summed, within the summed bounds", func(ctx SpecContext) {
							if !env.main.caps.Drafting {
								Skip(env.main.caps.DraftingReason)
							}
							b := ep.Body(env.main.Model, prompt(), map[string]any{"max_tokens": 16})
							one := v.usage(ctx, env.main, ep, b, 1)
							two := v.usage(ctx, env.main, ep, merge(b, map[string]any{"n": 2}), 2)
							expectNone(conformance.CheckDraft(one, env.cfg.DraftK, 1), "n = 1")
							expectNone(conformance.CheckDraft(two, env.cfg.DraftK, 2), "n = 2 (bounds summed over choices)")
						})
					})
				})
			}
		})
	}
})

// Predicted Outputs: a prediction the client sends is a draft, so its
// counters mean what OpenAI says they mean for that request.
var _ = Describe("POST /v1/chat/completions with a predicted output", Label("usage", "drafting"), func() {
	for _, v := range vias {
		Context(v.name, Label(v.label...), func() {
			It("reports accepted and rejected prediction tokens, consistent with the completion", func(ctx SpecContext) {
				ep := endpoints[0]
				Expect(ep.Path).To(Equal("/v1/chat/completions"))
				b := ep.Body(env.main.Model, prompt(), map[string]any{
					"max_tokens": 24,
					"prediction": map[string]any{"type": "content", "content": "The river ran past the hill and the fox drank from the river."},
				})
				u := v.usage(ctx, env.main, ep, b, 1)
				if u.AcceptedPredictionTokens == nil && u.RejectedPredictionTokens == nil {
					Skip("target ignores prediction: no accepted/rejected_prediction_tokens")
				}
				expectNone(conformance.CheckDraft(u, env.cfg.DraftK, 1), "prediction counters (k = %d)", env.cfg.DraftK)
			})
		})
	}
})
