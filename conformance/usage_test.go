package conformance_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §3 rules 1, 2 and 7: where usage appears, and its arithmetic.

var _ = Describe("usage on the wire", Label("usage"), func() {
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			body := func(extra ...map[string]any) map[string]any {
				return ep.Body(env.main.Model, shortPrompt(), merge(append([]map[string]any{{"max_tokens": 6}}, extra...)...))
			}

			Context("without stream", func() {
				It("always carries usage, with total_tokens = prompt_tokens + completion_tokens", func(ctx SpecContext) {
					_, u := post(ctx, env.main, ep, body())
					Expect(u.PromptTokens).To(BeNumerically(">", 0), "prompt_tokens")
				})
			})

			Context("with stream_options and stream false", func() {
				It("accepts stream_options and ignores it: 200 and a plain JSON response with usage", func(ctx SpecContext) {
					b := body(withUsage(), map[string]any{"stream": false})
					r, err := env.main.Post(ctx, ep.Path, b)
					Expect(err).NotTo(HaveOccurred())
					Expect(r.Status).To(Equal(200), "stream_options with stream false must be accepted; got %d: %s", r.Status, r.Body)
					Expect(r.ContentType).To(HavePrefix("application/json"), "stream false must not stream; Content-Type")
					expectNone(conformance.ValidateResponse(ep.Response, r.Body), "response")
					key, u, err := conformance.ResponseUsage(r.Body)
					Expect(err).NotTo(HaveOccurred())
					Expect(key).To(Equal(conformance.Object), "usage must be an object")
					expectNone(conformance.CheckUsage(u), "usage")
				})
			})

			for _, tc := range transports {
				Context("streamed over "+tc.tr.Name(), Label(tc.label), func() {
					for _, off := range []struct {
						name string
						opts map[string]any
					}{
						{"without stream_options", nil},
						{"with stream_options {} (include_usage defaults to false)", map[string]any{"stream_options": map[string]any{}}},
						{"with include_usage false", map[string]any{"stream_options": map[string]any{"include_usage": false}}},
						{"with stream_options null", map[string]any{"stream_options": nil}},
					} {
						Context(off.name, func() {
							It("sends no usage key in any chunk and ends with the end marker", func(ctx SpecContext) {
								tr := stream(ctx, tc, env.main, ep, body(off.opts))
								expectNone(conformance.CheckStream(tr, conformance.StreamWant{Choices: 1}), "%s stream", tc.tr.Name())
							})
						})
					}

					Context("with include_usage true", func() {
						It("puts \"usage\": null on every chunk and the usage on one last chunk with \"choices\": [], before the end marker", func(ctx SpecContext) {
							tr := stream(ctx, tc, env.main, ep, body(withUsage()))
							u := finalUsage(tr, 1)
							Expect(u.CompletionTokens).To(BeNumerically(">", 0), "completion_tokens of a stream that emitted text")
						})

						It("reports the prompt_tokens a non-streamed request for the same prompt reports", func(ctx SpecContext) {
							text := shortPrompt()
							b := ep.Body(env.main.Model, text, map[string]any{"max_tokens": 2})
							_, plain := post(ctx, env.main, ep, b)
							tr := stream(ctx, tc, env.main, ep, merge(b, withUsage()))
							u := finalUsage(tr, 1)
							Expect(u.PromptTokens).To(Equal(plain.PromptTokens),
								"prompt_tokens of the streamed request vs the non-streamed one")
						})
					})

					Context("with include_usage true and n = 2", func() {
						It("sends exactly one usage chunk, after both choices finished", func(ctx SpecContext) {
							tr := stream(ctx, tc, env.main, ep, body(withUsage(), map[string]any{"n": 2}))
							finalUsage(tr, 2)
						})
					})
				})
			}
		})
	}

})

var _ = Describe("the model list", func() {
	Describe("GET /v1/models", func() {
		It("lists the model under test in the ListModelsResponse shape", func(ctx SpecContext) {
			r, err := env.main.Send(ctx, "GET", "/v1/models", nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Status).To(Equal(200))
			expectNone(conformance.ValidateResponse("ListModelsResponse", r.Body), "GET /v1/models")
			Expect(strings.Contains(string(r.Body), `"`+env.main.Model+`"`)).To(BeTrue(),
				"the model %q is not in %s", env.main.Model, pretty(r.Body))
		})
	})
})
