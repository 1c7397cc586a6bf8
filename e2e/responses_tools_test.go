package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The Responses API with tools and text.format, through the official
// openai-go client (responses.create, streamed and not, and its WebSocket
// mode) against a real loopback rill on the embedded random model, which
// cannot "want" a tool call or JSON: only the grammar makes these pass.

var responseTools = []responses.ToolUnionParam{
	{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: openai.String("Current weather in a city."),
		Parameters: weatherParams, Strict: openai.Bool(true)}},
	{OfFunction: &responses.FunctionToolParam{Name: "add", Description: openai.String("Adds two integers."),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{
			"a": map[string]any{"type": "integer"}, "b": map[string]any{"type": "integer"}},
			"required": []any{"a", "b"}, "additionalProperties": false},
		Strict: openai.Bool(true)}},
}

// responseCall is what the checks compare of a function_call item.
type responseCall struct{ name, arguments, callID string }

// onlyCall checks that out is one completed function_call item of a
// declared function, with arguments valid against get_weather's
// parameters when it calls that, and returns it.
func onlyCall(t *testing.T, out []responses.ResponseOutputItemUnion, named bool, what string) responseCall {
	t.Helper()
	if len(out) != 1 || out[0].Type != "function_call" {
		t.Fatalf("%s: output of %d items, the first a %q: want one function_call", what, len(out), out[0].Type)
	}
	fc := out[0].AsFunctionCall()
	if fc.Name != "get_weather" && (named || fc.Name != "add") {
		t.Fatalf("%s: call of %q", what, fc.Name)
	}
	if fc.Name == "get_weather" {
		mustValidate(t, schemaOf(t, weatherParams), fc.Arguments, what)
	} else {
		mustValidate(t, schemaOf(t, map[string]any{"type": "object", "required": []any{"a", "b"}}), fc.Arguments, what)
	}
	if !strings.HasPrefix(fc.ID, "fc_") || !strings.HasPrefix(fc.CallID, "call_") || fc.Status != "completed" {
		t.Fatalf("%s: id %q call_id %q status %q", what, fc.ID, fc.CallID, fc.Status)
	}
	return responseCall{fc.Name, fc.Arguments, fc.CallID}
}

// streamResponse runs params streamed and checks the events as the SDK
// yields them: sequence numbers 0, 1, 2, …; each function_call item added
// with empty arguments, its deltas adding up to its done event and its
// done item. It returns the final response.
func streamResponse(t *testing.T, s *toolsServer, params responses.ResponseNewParams, opts ...option.RequestOption) *responses.Response {
	t.Helper()
	stream := s.client.Responses.NewStreaming(context.Background(), params, opts...)
	args := map[string]string{}
	var final *responses.Response
	seq := int64(0)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("event %d (%s) has sequence_number %d", seq, ev.Type, ev.SequenceNumber)
		}
		seq++
		switch ev.Type {
		case "response.output_item.added":
			if ev.Item.Type == "function_call" && (ev.Item.Arguments.OfString != "" || ev.Item.Name == "") {
				t.Fatalf("added %s", ev.RawJSON())
			}
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.done":
			if ev.Arguments != args[ev.ItemID] {
				t.Fatalf("arguments done %q, deltas %q", ev.Arguments, args[ev.ItemID])
			}
		case "response.output_item.done":
			if ev.Item.Type == "function_call" && ev.Item.AsFunctionCall().Arguments != args[ev.Item.ID] {
				t.Fatalf("item done %s, deltas %q", ev.RawJSON(), args[ev.Item.ID])
			}
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil {
		t.Fatal("no response.completed")
	}
	return final
}

func TestResponsesToolCallsWithOpenAIClient(t *testing.T) {
	t.Parallel()
	for _, d := range drafting {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			s := startToolsServer(t, d.args...)
			ctx := context.Background()
			for _, tc := range []struct {
				name   string
				choice responses.ResponseNewParamsToolChoiceUnion
			}{
				{"required", responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}},
				{"named", responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}}},
			} {
				for _, temp := range []float64{0, 1} {
					what := fmt.Sprintf("%s T=%v", tc.name, temp)
					params := responses.ResponseNewParams{Model: "rill-tiny",
						Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
						Tools: responseTools, ToolChoice: tc.choice, ParallelToolCalls: openai.Bool(false),
						Temperature: openai.Float(temp), MaxOutputTokens: openai.Int(800)}
					seed := option.WithJSONSet("seed", 9)
					whole, err := s.client.Responses.New(ctx, params, seed)
					if err != nil {
						t.Fatal(err)
					}
					if whole.Status != "completed" || whole.Usage.TotalTokens != whole.Usage.InputTokens+whole.Usage.OutputTokens || whole.Usage.OutputTokens == 0 {
						t.Fatalf("%s: status %s usage %+v", what, whole.Status, whole.Usage)
					}
					call := onlyCall(t, whole.Output, tc.name == "named", what+" not streamed")
					streamed := streamResponse(t, s, params, seed)
					got := onlyCall(t, streamed.Output, tc.name == "named", what+" streamed")
					if got.name != call.name || got.arguments != call.arguments {
						t.Fatalf("%s: streamed %+v, not streamed %+v", what, got, call)
					}
					if streamed.Usage.InputTokens != whole.Usage.InputTokens || streamed.Usage.OutputTokens != whole.Usage.OutputTokens {
						t.Fatalf("%s: streamed usage %+v, not streamed %+v", what, streamed.Usage, whole.Usage)
					}
				}
			}
			t.Run("the call's output in the next turn", func(t *testing.T) { responsesAgentTurn(t, s) })
		})
	}
}

// responsesAgentTurn runs the turn after a forced call three ways: by
// previous_response_id, by sending the items back, and as a chat
// completion of the same conversation; all three are the same prompt.
func responsesAgentTurn(t *testing.T, s *toolsServer) {
	ctx := context.Background()
	const question = "Weather in Oslo?"
	first, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "rill-tiny",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(question)}, Tools: responseTools,
		ToolChoice:        responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
		ParallelToolCalls: openai.Bool(false), Temperature: openai.Float(0), MaxOutputTokens: openai.Int(800)})
	if err != nil {
		t.Fatal(err)
	}
	call := first.Output[0].AsFunctionCall()
	const result = `{"temperature": -3}`
	auto := responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}

	byID, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "rill-tiny", PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(result)}}}}},
		Tools: responseTools, ToolChoice: auto, Temperature: openai.Float(0), MaxOutputTokens: openai.Int(40)})
	if err != nil {
		t.Fatal(err)
	}
	callParam := call.ToParam()
	byItems, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "rill-tiny", Store: openai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(question, responses.EasyInputMessageRoleUser),
			{OfFunctionCall: &callParam},
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(result)}}}}},
		Tools: responseTools, ToolChoice: auto, Temperature: openai.Float(0), MaxOutputTokens: openai.Int(40)})
	if err != nil {
		t.Fatal(err)
	}
	chat, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "rill-tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage(question),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: call.CallID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: call.Name, Arguments: call.Arguments}}}}}},
			openai.ToolMessage(result, call.CallID),
		},
		Tools: testTools, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
		Temperature: openai.Float(0), MaxCompletionTokens: openai.Int(40)})
	if err != nil {
		t.Fatal(err)
	}
	if byID.Usage.InputTokens <= first.Usage.InputTokens {
		t.Errorf("the turn with the call and its output has %d input tokens, the first %d", byID.Usage.InputTokens, first.Usage.InputTokens)
	}
	if byItems.Usage.InputTokens != byID.Usage.InputTokens || chat.Usage.PromptTokens != byID.Usage.InputTokens {
		t.Errorf("one conversation, three prompts: %d input tokens by previous_response_id, %d by items, %d prompt tokens on chat",
			byID.Usage.InputTokens, byItems.Usage.InputTokens, chat.Usage.PromptTokens)
	}
	if byID.OutputText() != byItems.OutputText() || byID.Status != byItems.Status {
		t.Errorf("greedy turns differ: %q (%s) and %q (%s)", byID.OutputText(), byID.Status, byItems.OutputText(), byItems.Status)
	}
	if byID.PreviousResponseID != first.ID || byID.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("previous_response_id %q, cached %d: the continued conversation's prefix should be warm", byID.PreviousResponseID, byID.Usage.InputTokensDetails.CachedTokens)
	}
}

func TestResponsesStructuredOutputsWithOpenAIClient(t *testing.T) {
	t.Parallel()
	schema := schemaOf(t, eventSchema)
	object := schemaOf(t, map[string]any{"type": "object"})
	s := startToolsServer(t)
	ctx := context.Background()
	format := responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
		OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "event", Schema: eventSchema, Strict: openai.Bool(true)}}}
	for _, temp := range []float64{0, 1} {
		params := responses.ResponseNewParams{Model: "rill-tiny",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Plan a meeting about the river.")},
			Text:  format, Temperature: openai.Float(temp), MaxOutputTokens: openai.Int(2000)}
		seed := option.WithJSONSet("seed", 42)
		whole, err := s.client.Responses.New(ctx, params, seed)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("json_schema T=%v", temp)
		if whole.Status != "completed" || whole.Text.Format.Type != "json_schema" || whole.Text.Format.Name != "event" || !whole.Text.Format.Strict {
			t.Fatalf("%s: status %s, text.format %s", what, whole.Status, whole.Text.Format.RawJSON())
		}
		mustValidate(t, schema, whole.OutputText(), what)
		streamed := streamResponse(t, s, params, seed)
		if streamed.OutputText() != whole.OutputText() || streamed.Usage.OutputTokens != whole.Usage.OutputTokens {
			t.Fatalf("%s: streamed %q (%d tokens), not streamed %q (%d)", what, streamed.OutputText(), streamed.Usage.OutputTokens,
				whole.OutputText(), whole.Usage.OutputTokens)
		}
	}
	res, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "rill-tiny",
		Input:       responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe the fox as JSON.")},
		Text:        responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}},
		Temperature: openai.Float(1), MaxOutputTokens: openai.Int(1000)}, option.WithJSONSet("seed", 3))
	if err != nil {
		t.Fatal(err)
	}
	mustValidate(t, object, res.OutputText(), "json_object")
}

// TestResponsesToolsOverWebSocket: openai-go's WebSocket mode, with the
// SDK's ResponseAccumulator: a forced call, then its output as the next
// response on the connection.
func TestResponsesToolsOverWebSocket(t *testing.T) {
	t.Parallel()
	s := startToolsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := s.client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	create := responses.ResponsesClientEventResponseCreateParam{Model: "rill-tiny",
		Input:       responses.ResponsesClientEventResponseCreateInputUnionParam{OfString: openai.String("Weather in Bergen?")},
		Tools:       responseTools,
		ToolChoice:  responses.ResponsesClientEventResponseCreateToolChoiceUnionParam{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
		Temperature: openai.Float(0), MaxOutputTokens: openai.Int(800), ParallelToolCalls: openai.Bool(false)}
	turn := func() (*responses.Response, responses.ResponseAccumulatorSnapshot) {
		t.Helper()
		if err := conn.Create(ctx, create); err != nil {
			t.Fatal(err)
		}
		var acc responses.ResponseAccumulator
		for {
			ev, err := conn.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == "error" {
				t.Fatalf("error event %s", ev.RawJSON())
			}
			if err := acc.AddEvent(ev); err != nil {
				t.Fatalf("the SDK's accumulator refused %s: %v", ev.RawJSON(), err)
			}
			if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
				r, err := acc.ReconstructedResponse()
				if err != nil {
					t.Fatal(err)
				}
				return r, acc.Snapshot()
			}
		}
	}
	first, snap := turn()
	call := onlyCall(t, first.Output, true, "over WebSocket")
	if len(snap.Output) != 1 || snap.Output[0].Type != "function_call" || snap.Output[0].Arguments != call.arguments || snap.Output[0].CallID != call.callID {
		t.Fatalf("accumulated %+v, final %+v", snap.Output, call)
	}
	create.PreviousResponseID = openai.String(first.ID)
	create.ToolChoice = responses.ResponsesClientEventResponseCreateToolChoiceUnionParam{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}
	create.Input = responses.ResponsesClientEventResponseCreateInputUnionParam{OfResponse: &responses.ResponseInputParam{
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.callID),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("rain, 9 °C")}}}}}
	create.MaxOutputTokens = openai.Int(16)
	next, _ := turn()
	// The same tools, now with the call and its output: a longer prompt
	// whose first turn is in the prefix cache.
	if next.Usage.InputTokens <= first.Usage.InputTokens || next.Usage.InputTokensDetails.CachedTokens == 0 || len(next.Output) == 0 {
		t.Fatalf("next turn: %d input tokens (first %d), output %s", next.Usage.InputTokens, first.Usage.InputTokens, next.RawJSON())
	}
}
