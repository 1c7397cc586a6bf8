package conformance_test

import (
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// Reasoning on the Responses API (docs/design.md §3 rules 9 and 12): a model that
// reasons shows its thinking block as reasoning output items before its
// answer, and output_tokens_details.reasoning_tokens counts them as chat's
// completion_tokens_details.reasoning_tokens counts reasoning_content.
// Targets without a model that reasons skip with the reasoning probe's
// reason; the in-process rill has one when ../shared is present.

// needReasoningResponses returns the target's model that reasons, skipping
// when there is none or it has no Responses API (with ws: no WebSocket mode).
func needReasoningResponses(ws bool) *target {
	GinkgoHelper()
	t := needReasoning()
	needResponsesOn(t, ws)
	return t
}

// expectReasoningFirst checks that obj's reasoning items come before its
// answer: no reasoning item after a message.
func expectReasoningFirst(obj *conformance.ResponseObject, raw []byte) {
	GinkgoHelper()
	answered := false
	for i, it := range obj.Output {
		switch it.Type {
		case "message":
			answered = true
		case "reasoning":
			Expect(answered).To(BeFalse(), "output item %d is reasoning after the answer: %s", i, raw)
		}
	}
}

var _ = Describe("POST /v1/responses on a model that reasons", Label("responses", "usage"), func() {
	body := func(t *target, text string, extra ...map[string]any) map[string]any {
		return conformance.ResponsesBody(t.Model, text, merge(append([]map[string]any{{"max_output_tokens": maxOut}}, extra...)...))
	}

	for _, v := range respVias {
		Context(v.name, Label(v.label...), func() {
			It("shows its thinking as reasoning items before the answer, counted in reasoning_tokens", func(ctx SpecContext) {
				t := needReasoningResponses(false)
				obj, u, raw := v.runOn(ctx, t, body(t, shortPrompt()))
				Expect(u.ReasoningTokens).NotTo(BeNil(),
					"output_tokens_details.reasoning_tokens of a model that reasons (0 when it did not), as chat's: %s", raw)
				expectReasoningFirst(obj, raw)
				r := *u.ReasoningTokens
				if obj.ReasoningText() != "" {
					Expect(r).To(BeNumerically(">", 0), "reasoning %q was sent but reasoning_tokens is 0", obj.ReasoningText())
				}
				if obj.OutputText() != "" || len(obj.FunctionCalls()) > 0 {
					Expect(r).To(BeNumerically("<", u.OutputTokens),
						"the answer %q took tokens, yet all %d output tokens count as reasoning", obj.OutputText(), u.OutputTokens)
				}
			})
		})
	}

	It("says what chat says for the same greedy request: reasoning_content as reasoning items, content as output text, the same counts", func(ctx SpecContext) {
		t := needReasoningResponses(false)
		text := shortPrompt()
		obj, u, raw := postResponseOn(ctx, t, body(t, text, map[string]any{"temperature": 0}))
		cu, said := via{}.texts(ctx, t, conformance.Chat, conformance.Chat.Body(t.Model, text, map[string]any{"max_tokens": maxOut, "temperature": 0}), 1)
		Expect(obj.ReasoningText()).To(Equal(said[0].Reasoning), "the reasoning items' text against chat's reasoning_content: %s", raw)
		Expect(obj.OutputText()).To(Equal(said[0].Content), "the output text against chat's content")
		Expect(u.InputTokens).To(Equal(cu.PromptTokens), "input_tokens against chat's prompt_tokens")
		Expect(u.OutputTokens).To(Equal(cu.CompletionTokens), "output_tokens against chat's completion_tokens")
		Expect(u.ReasoningTokens).To(Equal(cu.ReasoningTokens), "reasoning_tokens against chat's")
	})

	It("turns thinking off with reasoning.effort minimal: no reasoning item, reasoning_tokens 0 (rill's mapping)", func(ctx SpecContext) {
		t := needReasoningResponses(false)
		if !env.inProcess {
			Skip("what reasoning.effort does to a model's template is the server's choice; rill's is thinking off for none and minimal")
		}
		obj, u, raw := postResponseOn(ctx, t, body(t, shortPrompt(), map[string]any{"reasoning": map[string]any{"effort": "minimal"}}))
		Expect(obj.ReasoningText()).To(BeEmpty(), "reasoning with thinking off: %s", raw)
		Expect(u.ReasoningTokens).NotTo(BeNil(), "reasoning_tokens of a model that reasons, thinking off: %s", raw)
		Expect(*u.ReasoningTokens).To(BeZero(), "reasoning_tokens with thinking off")
		var echo struct {
			Reasoning struct {
				Effort *string `json:"effort"`
			} `json:"reasoning"`
		}
		Expect(json.Unmarshal(raw, &echo)).To(Succeed())
		Expect(echo.Reasoning.Effort).To(HaveValue(Equal("minimal")), "the response echoes reasoning.effort: %s", raw)
	})

	It("continues a conversation that reasoned by previous_response_id, and its output items sent back cost the same input", func(ctx SpecContext) {
		t := needReasoningResponses(false)
		text := shortPrompt()
		first, u1, raw := postResponseOn(ctx, t, body(t, text, map[string]any{"temperature": 0}))
		_, u2, _ := postResponseOn(ctx, t, body(t, "and then?", map[string]any{"temperature": 0, "previous_response_id": first.ID}))
		Expect(u2.InputTokens).To(BeNumerically(">", u1.InputTokens), "the continued conversation holds the first turn: %s", raw)

		var out struct {
			Output []json.RawMessage `json:"output"`
		}
		Expect(json.Unmarshal(raw, &out)).To(Succeed())
		input := []any{map[string]any{"role": "user", "content": text}}
		for _, it := range out.Output {
			input = append(input, it)
		}
		input = append(input, map[string]any{"role": "user", "content": "and then?"})
		_, u3, raw3 := postResponseOn(ctx, t, map[string]any{"model": t.Model, "input": input, "store": false,
			"max_output_tokens": maxOut, "temperature": 0})
		Expect(u3.InputTokens).To(Equal(u2.InputTokens),
			"the first turn's output items sent back (reasoning included) against the same turn by previous_response_id: %s", raw3)
	})
})
