package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/conformance"
)

// Tool calls and structured outputs: the wire shapes any server must get
// right. Streamed tool-call fragments reassemble into the non-streamed
// message, forced calls end with finish_reason tool_calls, usage stays
// exact, and json_schema output is a valid document. Targets without them
// skip with the probe's reason; the in-process rill must have them.

// needTools skips (or, in-process, fails) a spec on a target that made no
// forced tool call in the probe.
func needTools() {
	GinkgoHelper()
	if env.main.caps.Tools {
		return
	}
	if env.inProcess {
		Fail("the in-process rill must call tools: " + env.main.caps.ToolsReason)
	}
	Skip(env.main.caps.ToolsReason)
}

// needJSONSchema is needTools for response_format json_schema.
func needJSONSchema() {
	GinkgoHelper()
	if env.main.caps.JSONSchema {
		return
	}
	if env.inProcess {
		Fail("the in-process rill must accept json_schema: " + env.main.caps.JSONSchemaReason)
	}
	Skip(env.main.caps.JSONSchemaReason)
}

// toolBody asks for a greedy, seeded reply that may (or must) call
// ProbeTool, one call at most.
func toolBody(choice any) map[string]any {
	return conformance.Chat.Body(env.main.Model, "What is the weather in Oslo?", map[string]any{
		"tools": []any{conformance.ProbeTool}, "tool_choice": choice, "parallel_tool_calls": false,
		"temperature": 0, "seed": 7, "max_tokens": 400,
	})
}

// expectCityCall checks a call of ProbeTool with arguments valid against
// its parameters.
func expectCityCall(c conformance.ToolCall, what string) {
	GinkgoHelper()
	Expect(c.Name).To(Equal("get_weather"), "%s: the called function", what)
	var args map[string]any
	Expect(json.Unmarshal([]byte(c.Arguments), &args)).To(Succeed(), "%s: arguments %q are not a JSON object", what, c.Arguments)
	city, ok := args["city"].(string)
	Expect(ok).To(BeTrue(), "%s: arguments %q have no string city", what, c.Arguments)
	Expect(len([]rune(city))).To(BeNumerically("<=", 12), "%s: city %q is longer than maxLength 12", what, city)
	Expect(args).To(HaveLen(1), "%s: arguments %q have properties beyond city (additionalProperties false)", what, c.Arguments)
}

// noContent checks that a reply that only calls tools has no content: null,
// absent or empty.
func noContent(c *string, what string) {
	GinkgoHelper()
	if c != nil {
		Expect(*c).To(BeEmpty(), "%s: a reply of forced calls has content", what)
	}
}

var _ = Describe("POST /v1/chat/completions with tools", Label("tools"), func() {
	for _, tc := range transports {
		Context("streamed over "+tc.tr.Name()+" with include_usage", Label(tc.label), func() {
			It("sends tool-call fragments that reassemble into the non-streamed message, with the same usage", func(ctx SpecContext) {
				needTools()
				body := toolBody(conformance.ForceProbeTool)
				raw, whole := post(ctx, env.main, conformance.Chat, body)
				want, problems, err := conformance.ResponseToolCalls(raw, 1)
				Expect(err).NotTo(HaveOccurred())
				expectNone(problems, "non-streamed tool_calls")

				tr := stream(ctx, tc, env.main, conformance.Chat, merge(body, withUsage()))
				streamed := finalUsage(tr, 1)
				got, problems, err := tr.StreamToolCalls(1)
				Expect(err).NotTo(HaveOccurred())
				expectNone(problems, "%s delta.tool_calls fragments", tc.tr.Name())

				w, g := want[0], got[0]
				Expect(w.Calls).To(HaveLen(1), "non-streamed: one call forced with parallel_tool_calls false")
				Expect(g.Calls).To(HaveLen(len(w.Calls)), "streamed calls vs non-streamed calls")
				expectCityCall(w.Calls[0], "non-streamed")
				Expect(g.Calls[0].Name).To(Equal(w.Calls[0].Name), "streamed call's name vs non-streamed")
				Expect(conformance.SameArguments(g.Calls[0].Arguments, w.Calls[0].Arguments)).To(BeTrue(),
					"streamed arguments %q reassemble to other JSON than the non-streamed %q (temperature 0, seed 7)", g.Calls[0].Arguments, w.Calls[0].Arguments)
				Expect(g.FinishReason).To(Equal(w.FinishReason), "finish_reason streamed vs non-streamed")
				noContent(w.Content, "non-streamed")
				noContent(g.Content, "streamed")

				Expect(streamed.PromptTokens).To(Equal(whole.PromptTokens), "prompt_tokens streamed vs non-streamed")
				Expect(streamed.CompletionTokens).To(Equal(whole.CompletionTokens), "completion_tokens streamed vs non-streamed (the same greedy calls)")
			})
		})
	}

	Context("with tool_choice required", func() {
		It("answers with tool calls and finish_reason tool_calls", func(ctx SpecContext) {
			needTools()
			raw, _ := post(ctx, env.main, conformance.Chat, toolBody("required"))
			choices, problems, err := conformance.ResponseToolCalls(raw, 1)
			Expect(err).NotTo(HaveOccurred())
			expectNone(problems, "tool_calls")
			c := choices[0]
			Expect(c.Calls).To(HaveLen(1), "calls with parallel_tool_calls false")
			expectCityCall(c.Calls[0], "required")
			Expect(c.FinishReason).To(Equal("tool_calls"), "a reply that calls tools ends with finish_reason tool_calls")
			noContent(c.Content, "required")
		})
	})

	Context("with a named tool_choice", func() {
		It("calls that function, ending with finish_reason tool_calls (or stop, as OpenAI answers a named choice)", func(ctx SpecContext) {
			needTools()
			raw, _ := post(ctx, env.main, conformance.Chat, toolBody(conformance.ForceProbeTool))
			choices, problems, err := conformance.ResponseToolCalls(raw, 1)
			Expect(err).NotTo(HaveOccurred())
			expectNone(problems, "tool_calls")
			c := choices[0]
			Expect(c.Calls).To(HaveLen(1))
			expectCityCall(c.Calls[0], "named")
			Expect(c.FinishReason).To(BeElementOf("tool_calls", "stop"))
			if env.inProcess {
				Expect(c.FinishReason).To(Equal("tool_calls"), "rill ends every reply that calls tools with tool_calls")
			}
		})
	})
})

// eventSchema is a small structured output every model can finish.
var eventSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"title":    map[string]any{"type": "string", "maxLength": 20},
		"priority": map[string]any{"type": "integer", "minimum": 1, "maximum": 5},
		"done":     map[string]any{"type": "boolean"},
	},
	"required":             []any{"title", "priority", "done"},
	"additionalProperties": false,
}

// compileSchema compiles a JSON Schema given as Go values.
func compileSchema(schema map[string]any) *jsonschema.Schema {
	GinkgoHelper()
	raw, err := json.Marshal(schema)
	Expect(err).NotTo(HaveOccurred())
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	c := jsonschema.NewCompiler()
	Expect(c.AddResource("schema.json", doc)).To(Succeed())
	s, err := c.Compile("schema.json")
	Expect(err).NotTo(HaveOccurred())
	return s
}

var _ = Describe("POST /v1/chat/completions with response_format json_schema", Label("tools"), func() {
	for _, v := range vias {
		Context(v.name, Label(v.label...), func() {
			It("returns one JSON document valid against the schema, with exact usage", func(ctx SpecContext) {
				needJSONSchema()
				schema := compileSchema(eventSchema)
				body := conformance.Chat.Body(env.main.Model, "Make a task about the river.", map[string]any{
					"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{
						"name": "task", "strict": true, "schema": eventSchema}},
					"temperature": 1, "seed": 3, "max_tokens": 600,
				})
				var choice conformance.ToolCallChoice
				if v.tc == nil {
					raw, _ := post(ctx, env.main, conformance.Chat, body)
					choices, _, err := conformance.ResponseToolCalls(raw, 1)
					Expect(err).NotTo(HaveOccurred())
					choice = choices[0]
				} else {
					tr := stream(ctx, *v.tc, env.main, conformance.Chat, merge(body, withUsage()))
					finalUsage(tr, 1)
					choices, problems, err := tr.StreamToolCalls(1)
					Expect(err).NotTo(HaveOccurred())
					expectNone(problems, "stream")
					choice = choices[0]
				}
				Expect(choice.FinishReason).To(Equal("stop"), "a small schema fits in 600 tokens")
				Expect(choice.Content).NotTo(BeNil(), "no content")
				inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(*choice.Content)))
				Expect(err).NotTo(HaveOccurred(), "the content is not JSON: %q", *choice.Content)
				Expect(schema.Validate(inst)).To(Succeed(), fmt.Sprintf("the content is not valid against the schema: %q", *choice.Content))
			})
		})
	}
})
