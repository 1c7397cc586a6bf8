package conformance_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §3 rule 10: stream_options.continuous_usage_stats, vLLM's
// extension: the running usage on every chunk with choices.

// needContinuousUsage skips a spec on a target that ignores the option;
// rill implements it, so in-process that fails instead.
func needContinuousUsage() {
	GinkgoHelper()
	if env.main.caps.ContinuousUsage {
		return
	}
	if env.inProcess {
		Fail("rill implements continuous_usage_stats, but " + env.main.caps.ContinuousUsageReason)
	}
	Skip(env.main.caps.ContinuousUsageReason)
}

// continuous returns the stream_options member that asks for running usage.
func continuous(includeUsage bool) map[string]any {
	return map[string]any{"stream_options": map[string]any{"include_usage": includeUsage, "continuous_usage_stats": true}}
}

var _ = Describe("stream_options.continuous_usage_stats", Label("usage"), func() {
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			for _, tc := range transports {
				Context("streamed over "+tc.tr.Name(), Label(tc.label), func() {
					Context("with include_usage true", func() {
						It("puts the running usage on every chunk with choices, rising to the total of the last chunk", func(ctx SpecContext) {
							needContinuousUsage()
							body := ep.Body(env.main.Model, prompt(), merge(map[string]any{"max_tokens": 12}, ep.Logprobs(), continuous(true)))
							tr := stream(ctx, tc, env.main, ep, body)
							expectNone(conformance.CheckStream(tr, conformance.StreamWant{IncludeUsage: true, ContinuousUsage: true, Choices: 1}), "%s stream", tc.tr.Name())
							expectNone(conformance.CheckRunning(tr, conformance.RunningWant{Choices: 1, Logprobs: true}), "%s running usage", tc.tr.Name())
						})

						It("counts the prompt once and sums completion tokens over n = 2 choices, as the total does", func(ctx SpecContext) {
							needContinuousUsage()
							body := ep.Body(env.main.Model, prompt(), merge(map[string]any{"max_tokens": 8, "n": 2}, ep.Logprobs(), continuous(true)))
							tr := stream(ctx, tc, env.main, ep, body)
							expectNone(conformance.CheckStream(tr, conformance.StreamWant{IncludeUsage: true, ContinuousUsage: true, Choices: 2}), "%s stream", tc.tr.Name())
							expectNone(conformance.CheckRunning(tr, conformance.RunningWant{Choices: 2, Logprobs: true}), "%s running usage", tc.tr.Name())
						})

						It("keeps to the rules without logprobs", func(ctx SpecContext) {
							needContinuousUsage()
							body := ep.Body(env.main.Model, prompt(), merge(map[string]any{"max_tokens": 12}, continuous(true)))
							tr := stream(ctx, tc, env.main, ep, body)
							expectNone(conformance.CheckStream(tr, conformance.StreamWant{IncludeUsage: true, ContinuousUsage: true, Choices: 1}), "%s stream", tc.tr.Name())
							expectNone(conformance.CheckRunning(tr, conformance.RunningWant{Choices: 1}), "%s running usage", tc.tr.Name())
						})
					})

					Context("without include_usage", func() {
						It("is ignored: no chunk has a usage key", func(ctx SpecContext) {
							body := ep.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 6}, continuous(false)))
							tr := stream(ctx, tc, env.main, ep, body)
							expectNone(conformance.CheckStream(tr, conformance.StreamWant{Choices: 1}), "%s stream", tc.tr.Name())
						})
					})
				})
			}
		})
	}

	Context("without stream", func() {
		It("is accepted and ignored: a plain JSON response with usage", func(ctx SpecContext) {
			ep := conformance.Chat
			_, u := post(ctx, env.main, ep, ep.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 4, "stream": false}, continuous(true))))
			Expect(u.PromptTokens).To(BeNumerically(">", 0), "prompt_tokens")
		})
	})
})
