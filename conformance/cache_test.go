package conformance_test

import (
	"encoding/json"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §3 rule 3: prompt_tokens_details.cached_tokens.

// needCacheMeasured skips a spec on a target that does not report
// cached_tokens at all; against the in-process rill it fails instead, since
// rill's native engine measures its prefix cache.
func needCacheMeasured() {
	GinkgoHelper()
	if env.main.caps.CacheMeasured {
		return
	}
	if env.inProcess {
		Fail("rill's native engine measures a prefix cache, but " + env.main.caps.CacheReason)
	}
	Skip(env.main.caps.CacheReason)
}

// needPrefixCache is needCacheMeasured for specs that need reuse observed.
func needPrefixCache() {
	GinkgoHelper()
	if env.main.caps.PrefixCache {
		return
	}
	if env.inProcess {
		Fail("rill's native engine reuses cached prefixes, but " + env.main.caps.CacheReason)
	}
	Skip(env.main.caps.CacheReason)
}

// expectWarm checks the cached count of a prompt seen before: with a known
// block size B, the longest full-block prefix that leaves the last prompt
// token to compute, floor((P-1)/B)*B; otherwise 0 < cached <= P.
func expectWarm(u *conformance.Usage, what string) {
	GinkgoHelper()
	Expect(u.CachedTokens).NotTo(BeNil(), "%s: prompt_tokens_details.cached_tokens is absent on a repeated prompt", what)
	if b := env.cfg.BlockSize; b > 0 {
		want := (u.PromptTokens - 1) / b * b
		Expect(*u.CachedTokens).To(Equal(want),
			"%s: a repeated %d-token prompt must reuse floor((%d-1)/%d)*%d = %d tokens (block size from %s)",
			what, u.PromptTokens, u.PromptTokens, b, b, want, conformance.EnvBlockSize)
		return
	}
	Expect(*u.CachedTokens).To(SatisfyAll(BeNumerically(">", 0), BeNumerically("<=", u.PromptTokens)),
		"%s: a repeated %d-token prompt must report 0 < cached_tokens <= prompt_tokens", what, u.PromptTokens)
}

// coldBound is what the probe learned of fresh prompts on ep. Without it
// the spec fails: the target measures a cache, so the probe should have.
func coldBound(ep conformance.Endpoint) conformance.ColdBound {
	GinkgoHelper()
	shared, ok := env.main.caps.SharedPrefix[ep.Name]
	if !ok {
		Fail(fmt.Sprintf("the probe could not learn how many tokens fresh prompts share on POST %s: %s", ep.Path, env.main.caps.SharedReason[ep.Name]))
	}
	return conformance.ColdBound{Shared: shared, BlockSize: env.cfg.BlockSize}
}

var _ = Describe("prompt_tokens_details.cached_tokens", Label("usage", "prefix-cache"), func() {
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			for _, v := range vias {
				Context(v.name, Label(v.label...), func() {
					It("is present, and no more than the prefix every fresh prompt shares, on a cold prompt", func(ctx SpecContext) {
						needCacheMeasured()
						u := v.usage(ctx, env.main, ep, ep.Body(env.main.Model, prompt(), map[string]any{"max_tokens": 2}), 1)
						expectNone(conformance.CheckCold(u, coldBound(ep)), "cached_tokens of a prompt that starts with a fresh nonce")
					})

					It("is the reused prefix when the same prompt comes again", func(ctx SpecContext) {
						needPrefixCache()
						b := ep.Body(env.main.Model, prompt(), map[string]any{"max_tokens": 2})
						cold := v.usage(ctx, env.main, ep, b, 1)
						warm := v.usage(ctx, env.main, ep, b, 1)
						Expect(warm.PromptTokens).To(Equal(cold.PromptTokens), "the same prompt counted differently")
						expectWarm(warm, "second request")
					})
				})
			}
		})
	}
})

var _ = Describe("usage assembly of fractional cached counts", Label("usage", "prefix-cache"), func() {
	BeforeEach(func() {
		if env.double == nil {
			Skip(env.doubleSkip)
		}
	})

	for _, v := range vias {
		Context(v.name, Label(v.label...), func() {
			DescribeTable("rounds the engine's count half to even and clamps it to [0, prompt_tokens]",
				func(ctx SpecContext, cached float64, promptTokens, want int) {
					script := fmt.Sprintf("prompt=%d cached=%v completion=2", promptTokens, cached)
					u := v.usage(ctx, env.double, conformance.Completions,
						conformance.Completions.Body(doubleModel, script, nil), 1)
					Expect(u.PromptTokens).To(Equal(promptTokens), "prompt_tokens")
					Expect(u.CachedTokens).NotTo(BeNil(), "cached_tokens is absent although the engine measured %v", cached)
					Expect(*u.CachedTokens).To(Equal(want), "engine count %v of a %d-token prompt", cached, promptTokens)
				},
				Entry("899.4 -> 899", 899.4, 1000, 899),
				Entry("899.5 -> 900", 899.5, 1000, 900),
				Entry("900.5 -> 900", 900.5, 1000, 900),
				Entry("1791.6 -> 1792", 1791.6, 2000, 1792),
				Entry("0.5 -> 0", 0.5, 100, 0),
				Entry("above prompt_tokens -> prompt_tokens", 1200.7, 1000, 1000),
				Entry("half above prompt_tokens -> prompt_tokens", 1000.5, 1000, 1000),
				Entry("negative -> 0", -3.5, 1000, 0),
			)

			It("counts the cached prefix once for n = 3 choices", func(ctx SpecContext) {
				u := v.usage(ctx, env.double, conformance.Chat,
					conformance.Chat.Body(doubleModel, "prompt=1000 cached=512.5 completion=2", map[string]any{"n": 3}), 3)
				Expect(u.PromptTokens).To(Equal(1000), "prompt_tokens of 3 choices sharing one 1000-token prompt")
				Expect(u.CachedTokens).NotTo(BeNil())
				Expect(*u.CachedTokens).To(Equal(512), "cached_tokens of 3 choices sharing one prompt with 512.5 cached")
				Expect(u.CompletionTokens).To(Equal(6), "completion_tokens summed over 3 choices of 2")
			})

			It("sends exactly {prompt_tokens, completion_tokens, total_tokens} when the engine measures neither cache nor drafts", func(ctx SpecContext) {
				ep := conformance.Completions
				body := ep.Body(doubleModel, "prompt=40 completion=2", nil)
				var raw json.RawMessage
				if v.tc == nil {
					r, err := env.double.Post(ctx, ep.Path, body)
					Expect(err).NotTo(HaveOccurred())
					Expect(r.Status).To(Equal(200), "%s", r.Body)
					raw = usageMember(r.Body)
				} else {
					tr := stream(ctx, *v.tc, env.double, ep, merge(body, withUsage()))
					finalUsage(tr, 1)
					raw = usageMember(tr.Chunks[len(tr.Chunks)-1])
				}
				Expect(string(raw)).To(Equal(`{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}`),
					"docs/design.md §3 rule 4: without a measured cache or drafting the usage is the plain object, details absent")
			})
		})
	}
})

// usageMember returns the raw "usage" member of a JSON object, as sent.
func usageMember(doc []byte) json.RawMessage {
	GinkgoHelper()
	var top map[string]json.RawMessage
	Expect(json.Unmarshal(doc, &top)).To(Succeed(), "%s", doc)
	return top["usage"]
}
