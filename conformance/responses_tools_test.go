package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/conformance"
)

// The Responses API with function tools and text.format: function_call
// output items, their streamed events reassembling into the non-streamed
// items with the same usage, the call's output in the next turn, and
// json_schema output valid against its schema. Targets that made no
// forced call in the probe skip with its reason (so do targets whose
// Responses API refuses tools their chat takes); the in-process rill must
// have them.

// responsesToolBody asks for a greedy reply that may (or must) call
// ResponsesProbeTool, one call at most.
func responsesToolBody(choice any) map[string]any {
	return conformance.ResponsesBody(env.main.Model, "What is the weather in Oslo?", map[string]any{
		"tools": []any{conformance.ResponsesProbeTool}, "tool_choice": choice, "parallel_tool_calls": false,
		"temperature": 0, "max_output_tokens": 400,
	})
}

// postResponseTools sends a plain request that must succeed (a target
// whose Responses API refuses it skips) and validate, and returns its
// response object and usage.
func postResponseTools(ctx context.Context, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage) {
	GinkgoHelper()
	r, err := env.main.Post(ctx, conformance.ResponsesPath, body)
	Expect(err).NotTo(HaveOccurred())
	if r.Status >= 400 && r.Status < 500 && !env.inProcess {
		Skip(fmt.Sprintf("target's Responses API refuses tools or text.format (%d: %s)", r.Status, r.Body))
	}
	Expect(r.Status).To(Equal(http.StatusOK), "POST %s answered %d: %s", conformance.ResponsesPath, r.Status, r.Body)
	expectNone(conformance.ValidateResponse("Response", r.Body), "POST %s against openapi.yaml", conformance.ResponsesPath)
	obj, u, err := conformance.ParseResponseObject(r.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(u).NotTo(BeNil(), "a non-streamed response must carry usage: %s", r.Body)
	expectNone(conformance.CheckResponsesUsage(u), "usage")
	return obj, u
}

// onlyCityCall checks that a response's output is one completed
// function_call of ResponsesProbeTool, and returns it.
func onlyCityCall(obj *conformance.ResponseObject, what string) conformance.ResponseFunctionCall {
	GinkgoHelper()
	calls := obj.FunctionCalls()
	Expect(calls).To(HaveLen(1), "%s: one forced call with parallel_tool_calls false", what)
	c := calls[0]
	expectCityCall(conformance.ToolCall{Name: c.Name, Arguments: c.Arguments}, what)
	Expect(c.CallID).NotTo(BeEmpty(), "%s: a function_call has a call_id", what)
	Expect(c.Status).To(Equal("completed"), "%s: the call's status", what)
	Expect(obj.OutputText()).To(BeEmpty(), "%s: a reply of forced calls has no text", what)
	Expect(obj.Status).To(Equal("completed"), "%s: a response that calls tools is completed (the Responses API has no tool_calls status)", what)
	return c
}

var _ = Describe("POST /v1/responses with tools", Label("responses", "tools"), func() {
	BeforeEach(func() {
		needResponses(false)
		needTools()
	})

	for _, tc := range transports {
		Context("streamed over "+tc.tr.Name(), Label(tc.label), func() {
			It("sends function_call events that reassemble into the non-streamed output items, with the same usage", Label("usage"), func(ctx SpecContext) {
				body := responsesToolBody(conformance.ForceResponsesProbeTool)
				whole, wu := postResponseTools(ctx, body)
				want := onlyCityCall(whole, "not streamed")

				var tr *conformance.ResponseTranscript
				var err error
				if tc.tr == conformance.WebSocket {
					needResponses(true)
					tr, err = env.main.StreamResponseWS(ctx, body)
				} else {
					tr, err = env.main.StreamResponse(ctx, body)
				}
				Expect(err).NotTo(HaveOccurred())
				expectNone(conformance.CheckResponseStream(tr), "%s stream of /v1/responses with tools", tr.Transport)
				var types []string
				for _, e := range tr.Events {
					types = append(types, e.Type)
				}
				Expect(types).To(ContainElements("response.output_item.added", "response.function_call_arguments.done", "response.output_item.done"),
					"a streamed call announces its item and closes its arguments and item")
				final, su, err := tr.Final()
				Expect(err).NotTo(HaveOccurred())
				got := onlyCityCall(final, "streamed")
				Expect(got.Name).To(Equal(want.Name), "streamed call vs non-streamed")
				Expect(conformance.SameArguments(got.Arguments, want.Arguments)).To(BeTrue(),
					"streamed arguments %q are other JSON than the non-streamed %q (temperature 0)", got.Arguments, want.Arguments)
				Expect(su.InputTokens).To(Equal(wu.InputTokens), "input_tokens streamed vs not")
				Expect(su.OutputTokens).To(Equal(wu.OutputTokens), "output_tokens of the same greedy call, streamed vs not")
				Expect(su.TotalTokens).To(Equal(wu.TotalTokens), "total_tokens streamed vs not")
			})
		})
	}

	Context("with tool_choice required", func() {
		It("answers with function_call items and status completed", func(ctx SpecContext) {
			obj, _ := postResponseTools(ctx, responsesToolBody("required"))
			onlyCityCall(obj, "required")
		})
	})

	Context("with the call's output in the next turn", func() {
		It("answers the conversation of the call and its output, a longer input", func(ctx SpecContext) {
			first, u1 := postResponseTools(ctx, responsesToolBody(conformance.ForceResponsesProbeTool))
			c := onlyCityCall(first, "first turn")
			// The items sent back, as a client that keeps its history does
			// (no store needed).
			next := responsesToolBody("auto")
			next["input"] = []any{
				map[string]any{"role": "user", "content": "What is the weather in Oslo?"},
				map[string]any{"type": "function_call", "call_id": c.CallID, "name": c.Name, "arguments": c.Arguments},
				map[string]any{"type": "function_call_output", "call_id": c.CallID, "output": `{"celsius": -3}`},
			}
			next["max_output_tokens"] = maxOut
			obj, u2 := postResponseTools(ctx, next)
			Expect(obj.Status).To(BeElementOf("completed", "incomplete"))
			Expect(u2.InputTokens).To(BeNumerically(">", u1.InputTokens), "the turn holds the first turn, its call and the call's output")
		})
	})
})

var _ = Describe("POST /v1/responses with text.format json_schema", Label("responses", "tools"), func() {
	BeforeEach(func() {
		needResponses(false)
		needJSONSchema()
	})
	for _, v := range respVias {
		Context(v.name, Label(v.label...), func() {
			It("returns one JSON document valid against the schema, with exact usage", func(ctx SpecContext) {
				schema := compileSchema(eventSchema)
				body := conformance.ResponsesBody(env.main.Model, "Make a task about the river.", map[string]any{
					"text":        map[string]any{"format": map[string]any{"type": "json_schema", "name": "task", "strict": true, "schema": eventSchema}},
					"temperature": 1, "seed": 3, "max_output_tokens": 600,
				})
				if !env.inProcess {
					delete(body, "seed") // rill's extension
					postResponseTools(ctx, body)
				}
				obj, _, raw := v.run(ctx, body)
				Expect(obj.Status).To(Equal("completed"), "a small schema fits in 600 tokens: %s", raw)
				text := obj.OutputText()
				inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
				Expect(err).NotTo(HaveOccurred(), "the output text is not JSON: %q", text)
				Expect(schema.Validate(inst)).To(Succeed(), fmt.Sprintf("the output text is not valid against the schema: %q", text))
			})
		})
	}
})
