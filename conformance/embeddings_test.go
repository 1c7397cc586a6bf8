package conformance_test

import (
	"context"
	"fmt"
	"math"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// OpenAI's embeddings endpoint, POST /v1/embeddings: a list of vectors
// in input order, usage with no completion, base64 as little-endian
// float32 bytes, and dimensions either honoured (Matryoshka truncation,
// renormalised) or refused by name.

// Tolerances, as cosine distances. A vector computed again (alone, or in
// another batch) may differ by the rounding of a different batch shape;
// base64 and float carry the same float32s and must agree exactly but for
// the decimal printing of floats.
const (
	embedSame  = 1e-4
	embedExact = 1e-6
)

// findEmbedder returns the target of the embeddings specs: in-process the
// rill on the tiny embedder, elsewhere RILL_CONFORMANCE_EMBEDDING_MODEL or
// the main model when it embeds; nil and a reason when there is none.
func findEmbedder(ctx context.Context, e *suiteEnv) (*target, string) {
	GinkgoHelper()
	if e.embedder != nil {
		ok, why := conformance.ProbeEmbeddings(ctx, e.embedder.Target, e.embedder.Model)
		Expect(ok).To(BeTrue(), "the in-process embedding model: %s", why)
		return e.embedder, ""
	}
	t := *e.main.Target
	if m := e.cfg.EmbeddingModel; m != "" {
		t.Model = m
		Expect(t.ResolveModel(ctx)).To(Succeed(), "%s", conformance.EnvEmbeddingModel)
	}
	if ok, why := conformance.ProbeEmbeddings(ctx, &t, t.Model); !ok {
		return nil, "the target has no model that embeds: " + why
	}
	return &target{Target: &t}, ""
}

// needEmbedder skips a spec when the target has no embedding model.
func needEmbedder() *target {
	GinkgoHelper()
	if env.embedder == nil {
		Skip(env.embedderSkip)
	}
	return env.embedder
}

// embed posts an embeddings request for n inputs that must succeed and
// returns its checked answer.
func embed(ctx context.Context, t *target, input any, n int, extra ...map[string]any) *conformance.Embeddings {
	GinkgoHelper()
	body := merge(append([]map[string]any{{"model": t.Model, "input": input}}, extra...)...)
	r, err := t.Post(ctx, conformance.EmbeddingsPath, body)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Status).To(Equal(200), "POST %s answered %d: %s", conformance.EmbeddingsPath, r.Status, r.Body)
	e, p := conformance.ParseEmbeddings(r.Body, n)
	expectNone(p, "POST %s", conformance.EmbeddingsPath)
	return e
}

// expectClose fails unless a and b are within tol in cosine distance.
func expectClose(a, b []float32, tol float64, what string) {
	GinkgoHelper()
	Expect(len(a)).To(Equal(len(b)), "%s: %d values against %d", what, len(a), len(b))
	d := conformance.CosineDistance(a, b)
	Expect(d).To(BeNumerically("<=", tol), "%s: cosine distance %.3g, want at most %.0g", what, d, tol)
}

// Token ids every vocabulary has as ordinary tokens (low ids are bytes or
// common pieces in BPE vocabularies).
var (
	embedIDsA = []int{20, 21, 22, 23, 24, 25, 26, 27}
	embedIDsB = []int{40, 41, 42, 43, 44}
)

var _ = Describe("POST /v1/embeddings", Label("embeddings"), func() {
	texts := []string{"The quick brown fox", "jumps over the lazy dog", "The quick brown fox"}

	Context("with an array of texts", func() {
		It("answers a list of embedding objects in input order, for the model asked", func(ctx SpecContext) {
			t := needEmbedder()
			r, err := t.Post(ctx, conformance.EmbeddingsPath, map[string]any{"model": t.Model, "input": texts})
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Status).To(Equal(200), "POST %s answered %d: %s", conformance.EmbeddingsPath, r.Status, r.Body)
			e, p := conformance.ParseEmbeddings(r.Body, len(texts))
			expectNone(p, "POST %s", conformance.EmbeddingsPath)
			expectNone(conformance.ValidateResponse("CreateEmbeddingResponse", r.Body), "POST %s against openapi.yaml", conformance.EmbeddingsPath)
			Expect(e.Model).To(Equal(t.Model), "the answer's model")
		})

		It("gives each text the vector it has alone, so that equal texts get equal vectors", func(ctx SpecContext) {
			t := needEmbedder()
			batch := embed(ctx, t, texts, len(texts))
			alone := make([][]float32, len(texts))
			for i, s := range texts {
				alone[i] = embed(ctx, t, s, 1).Vectors[0]
			}
			for i := range texts {
				expectClose(batch.Vectors[i], alone[i], embedSame, fmt.Sprintf("data[%d] of the batch against %q alone", i, texts[i]))
			}
			expectClose(batch.Vectors[0], batch.Vectors[2], embedSame, "two equal texts in one batch")
			// Order, not only equality: data[1] is nearer its own text than the other's.
			Expect(conformance.CosineDistance(batch.Vectors[1], alone[1])).To(BeNumerically("<", conformance.CosineDistance(batch.Vectors[1], alone[0])),
				"data[1] is nearer %q than its own text %q: items out of input order", texts[0], texts[1])
		})

		It("counts the prompt tokens of every text in usage, with total_tokens equal to them", func(ctx SpecContext) {
			t := needEmbedder()
			sum := 0
			for _, s := range texts {
				sum += embed(ctx, t, s, 1).PromptTokens
			}
			e := embed(ctx, t, texts, len(texts))
			Expect(e.PromptTokens).To(Equal(sum), "usage.prompt_tokens of the batch against the sum over the texts alone")
			Expect(e.TotalTokens).To(Equal(e.PromptTokens))
		})
	})

	Context("with one text", func() {
		It("answers the vector the same text has in a one-element array", func(ctx SpecContext) {
			t := needEmbedder()
			one := embed(ctx, t, texts[0], 1)
			arr := embed(ctx, t, []string{texts[0]}, 1)
			expectClose(one.Vectors[0], arr.Vectors[0], embedSame, "a string against the same string in an array")
			Expect(one.PromptTokens).To(Equal(arr.PromptTokens), "usage.prompt_tokens of a string and of the same string in an array")
		})

		It("answers a unit vector", func(ctx SpecContext) {
			t := needEmbedder()
			v := embed(ctx, t, texts[1], 1).Vectors[0]
			Expect(math.Abs(conformance.Norm(v)-1)).To(BeNumerically("<=", 1e-3), "length of the vector: %g", conformance.Norm(v))
		})
	})

	Context("with encoding_format base64", func() {
		It("sends the little-endian float32 bytes of the float vector", func(ctx SpecContext) {
			t := needEmbedder()
			f := embed(ctx, t, texts[:2], 2)
			b := embed(ctx, t, texts[:2], 2, map[string]any{"encoding_format": "base64"})
			for i := range f.Vectors {
				expectClose(b.Vectors[i], f.Vectors[i], embedExact, fmt.Sprintf("data[%d] decoded from base64 against the float answer", i))
			}
			Expect(b.PromptTokens).To(Equal(f.PromptTokens), "usage.prompt_tokens in base64 and in float")
		})
	})

	Context("with token ids", func() {
		It("answers for an array of ids the vector it has in an array of arrays, in input order", func(ctx SpecContext) {
			t := needEmbedder()
			a := embed(ctx, t, embedIDsA, 1)
			b := embed(ctx, t, [][]int{embedIDsB}, 1)
			both := embed(ctx, t, [][]int{embedIDsA, embedIDsB}, 2)
			expectClose(both.Vectors[0], a.Vectors[0], embedSame, "data[0] of [[A], [B]] against [A]")
			expectClose(both.Vectors[1], b.Vectors[0], embedSame, "data[1] of [[A], [B]] against [[B]]")
			Expect(both.PromptTokens).To(Equal(a.PromptTokens+b.PromptTokens), "usage.prompt_tokens of [[A], [B]] against [A] and [[B]] alone")
			Expect(a.PromptTokens).To(BeNumerically(">=", len(embedIDsA)), "usage.prompt_tokens of %d ids", len(embedIDsA))
		})
	})

	Context("with dimensions half the model's size", func() {
		It("truncates and renormalises the vector, or refuses with a 400 naming dimensions", func(ctx SpecContext) {
			t := needEmbedder()
			full := embed(ctx, t, texts[0], 1).Vectors[0]
			half := len(full) / 2
			Expect(half).To(BeNumerically(">", 0), "a vector of %d values cannot be halved", len(full))
			r, err := t.Post(ctx, conformance.EmbeddingsPath, map[string]any{"model": t.Model, "input": texts[0], "dimensions": half})
			Expect(err).NotTo(HaveOccurred())
			if r.Status != 200 {
				expectNone(conformance.CheckError(r.Status, r.Body), "POST %s with dimensions %d", conformance.EmbeddingsPath, half)
				Expect(r.Status).To(Equal(400), "a refused dimensions: %s", r.Body)
				Expect(strings.Contains(string(r.Body), "dimensions")).To(BeTrue(), "the refusal does not name dimensions: %s", r.Body)
				return
			}
			e, p := conformance.ParseEmbeddings(r.Body, 1)
			expectNone(p, "POST %s with dimensions %d", conformance.EmbeddingsPath, half)
			v := e.Vectors[0]
			Expect(v).To(HaveLen(half), "dimensions %d was accepted but the vector has %d values (the model's are %d)", half, len(v), len(full))
			Expect(math.Abs(conformance.Norm(v)-1)).To(BeNumerically("<=", 1e-3), "length of the truncated vector: %g", conformance.Norm(v))
			expectClose(v, full[:half], embedSame, "the truncated vector against the first values of the full one")
		})
	})

	Context("with bad input", Label("errors"), func() {
		DescribeTable("refuses it with a 400 in OpenAI's error shape",
			func(ctx SpecContext, input any) {
				t := needEmbedder()
				r, err := t.Post(ctx, conformance.EmbeddingsPath, map[string]any{"model": t.Model, "input": input})
				Expect(err).NotTo(HaveOccurred())
				expectNone(conformance.CheckError(r.Status, r.Body), "POST %s with input %v", conformance.EmbeddingsPath, input)
				Expect(r.Status).To(Equal(400), "input %v: %s", input, r.Body)
			},
			Entry("an empty string", ""),
			Entry("an empty array", []string{}),
			Entry("an array with an empty string", []string{"a", ""}),
		)
	})
})
