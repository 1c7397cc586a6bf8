package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// Reasoning on the Responses API, end to end: the official openai-go
// client against a real loopback rill serving the tiny model with Qwen 3's
// vocabulary (serveQwen, from ../shared): its thinking block is a reasoning
// item with the text chat sends as reasoning_content, its answer the text
// chat sends as content, its counts chat's; reasoning.effort minimal turns
// it off; reasoning items sent back reach the template as chat's
// reasoning_content does.

// reasoningAnswer is what a response said: its reasoning items' text, its
// output text, its reasoning_tokens (-1: absent) and output_tokens.
type reasoningAnswer struct {
	reasoning, text            string
	reasoningTokens, outTokens int64
	inTokens                   int64
}

// answerOf reads res, checking that its reasoning items come before its
// answer and have rill's shape.
func answerOf(t *testing.T, res *responses.Response) reasoningAnswer {
	t.Helper()
	var a reasoningAnswer
	for i, it := range res.Output {
		if it.Type != "reasoning" {
			continue
		}
		r := it.AsReasoning()
		if i != 0 || !strings.HasPrefix(r.ID, "rs_") || len(r.Summary) != 0 || len(r.Content) != 1 || r.Content[0].Type != "reasoning_text" {
			t.Fatalf("reasoning item %d: %s", i, it.RawJSON())
		}
		a.reasoning += r.Content[0].Text
	}
	a.text, a.inTokens, a.outTokens = res.OutputText(), res.Usage.InputTokens, res.Usage.OutputTokens
	a.reasoningTokens = -1
	if res.Usage.OutputTokensDetails.JSON.ReasoningTokens.Valid() {
		a.reasoningTokens = res.Usage.OutputTokensDetails.ReasoningTokens
	}
	return a
}

// chatAnswer is the same request through chat completions.
func chatAnswer(t *testing.T, client openai.Client, params openai.ChatCompletionNewParams, opts ...option.RequestOption) reasoningAnswer {
	t.Helper()
	resp, err := client.Chat.Completions.New(context.Background(), params, opts...)
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]interface{ Raw() string }{}
	for k, v := range resp.Choices[0].Message.JSON.ExtraFields {
		extra[k] = v
	}
	a := reasoningAnswer{reasoning: reasoningOf(extra), text: resp.Choices[0].Message.Content,
		inTokens: resp.Usage.PromptTokens, outTokens: resp.Usage.CompletionTokens, reasoningTokens: -1}
	if resp.Usage.CompletionTokensDetails.JSON.ReasoningTokens.Valid() {
		a.reasoningTokens = resp.Usage.CompletionTokensDetails.ReasoningTokens
	}
	return a
}

// streamAnswer runs params streamed and reads the answer from the events:
// the reasoning_text and output_text deltas, which must add up to the
// final response's items, numbered 0, 1, 2, …
func streamAnswer(t *testing.T, client openai.Client, params responses.ResponseNewParams) reasoningAnswer {
	t.Helper()
	stream := client.Responses.NewStreaming(context.Background(), params)
	var reasoning, text strings.Builder
	var final *responses.Response
	for seq := int64(0); stream.Next(); seq++ {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("event %d (%s) has sequence_number %d", seq, ev.Type, ev.SequenceNumber)
		}
		switch ev.Type {
		case "response.reasoning_text.delta":
			reasoning.WriteString(ev.Delta)
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil {
		t.Fatal("the stream did not end in response.completed or response.incomplete")
	}
	a := answerOf(t, final)
	if a.reasoning != reasoning.String() || a.text != text.String() {
		t.Fatalf("deltas: reasoning %q text %q; final response: reasoning %q text %q", reasoning.String(), text.String(), a.reasoning, a.text)
	}
	return a
}

// TestResponsesReasoningWithClient: on QwQ's template (which opens the
// thinking block, so that even random weights reason), Responses.New and
// NewStreaming, sampled with one seed, show the block as a reasoning item whose
// text is chat's reasoning_content for the same request, the answer as
// chat's content, and chat's counts (reasoning_tokens > 0; these random
// weights never close the block, so the answer is empty); with
// reasoning.effort minimal there is no reasoning item and reasoning_tokens
// is 0, as chat's enable_thinking false gives; continued by
// previous_response_id, the conversation costs what chat's with the
// reasoning on its assistant message costs.
func TestResponsesReasoningWithClient(t *testing.T) {
	t.Parallel()
	url, id := serveQwen(t, "Qwen-QwQ-32B.jinja")
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	// Sampled with a seed (rill's extension on both APIs; the same seed
	// draws the same tokens), one whose draws leave the random model's
	// favourite newline for words halfway.
	const question, maxTokens, seed = "Why is the sky blue?", 24, 20
	params := responses.ResponseNewParams{
		Model: id, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(question)},
		MaxOutputTokens: openai.Int(maxTokens), Temperature: openai.Float(1),
	}
	params.SetExtraFields(map[string]any{"seed": seed})
	chatParams := openai.ChatCompletionNewParams{
		Model: id, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		MaxCompletionTokens: openai.Int(maxTokens), Temperature: openai.Float(1), Seed: openai.Int(seed),
	}

	res, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	on := answerOf(t, res)
	chat := chatAnswer(t, client, chatParams)
	if on != chat || on.reasoning == "" || on.reasoningTokens <= 0 {
		t.Fatalf("reasoning on: responses %+v, chat %+v", on, chat)
	}
	if streamed := streamAnswer(t, client, params); streamed != on {
		t.Errorf("streamed %+v, not streamed %+v", streamed, on)
	}

	offParams := params
	offParams.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffortMinimal}
	res, err = client.Responses.New(ctx, offParams)
	if err != nil {
		t.Fatal(err)
	}
	off := answerOf(t, res)
	chatOff := chatAnswer(t, client, chatParams, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
	if off != chatOff || off.reasoning != "" || off.reasoningTokens != 0 || off.text == "" {
		t.Fatalf("reasoning off: responses %+v, chat %+v", off, chatOff)
	}
	if res.Reasoning.Effort != shared.ReasoningEffortMinimal {
		t.Errorf("reasoning echo %s", res.Reasoning.RawJSON())
	}
	if streamed := streamAnswer(t, client, offParams); streamed != off {
		t.Errorf("reasoning off, streamed %+v, not streamed %+v", streamed, off)
	}

	// The next turn by previous_response_id: the stored reply carries its
	// reasoning, as chat's assistant message would.
	first, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	nextParams := responses.ResponseNewParams{
		Model: id, PreviousResponseID: openai.String(first.ID), MaxOutputTokens: openai.Int(maxTokens), Temperature: openai.Float(1),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And at sunset?")},
	}
	nextParams.SetExtraFields(map[string]any{"seed": seed})
	next, err := client.Responses.New(ctx, nextParams)
	if err != nil {
		t.Fatal(err)
	}
	prev := answerOf(t, first)
	asst := openai.ChatCompletionAssistantMessageParam{Content: openai.ChatCompletionAssistantMessageParamContentUnion{OfString: openai.String(prev.text)}}
	asst.SetExtraFields(map[string]any{"reasoning_content": prev.reasoning})
	chatNext := chatParams
	chatNext.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question), {OfAssistant: &asst}, openai.UserMessage("And at sunset?")}
	if got, want := answerOf(t, next), chatAnswer(t, client, chatNext); got != want {
		t.Errorf("second turn: responses %+v, chat %+v", got, want)
	}
}

// TestResponsesReasoningItemsReachTemplate: on Qwen 3's template, which
// renders the reasoning of the assistant turns after the last user query, a
// reasoning item sent back before a function call costs the input tokens
// chat's reasoning_content on that assistant message costs, and more than
// the same input without it: the template saw the reasoning.
func TestResponsesReasoningItemsReachTemplate(t *testing.T) {
	t.Parallel()
	url, id := serveQwen(t, "Qwen-Qwen3-0.6B.jinja")
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	const thought = "I should look it up."
	items := func(reasoning bool) responses.ResponseInputParam {
		in := responses.ResponseInputParam{
			{OfMessage: &responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleUser,
				Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String("What is the weather in Paris?")}}},
		}
		if reasoning {
			in = append(in, responses.ResponseInputItemUnionParam{OfReasoning: &responses.ResponseReasoningItemParam{
				ID: "rs_1", Summary: []responses.ResponseReasoningItemSummaryParam{},
				Content: []responses.ResponseReasoningItemContentParam{{Text: thought}}}})
		}
		return append(in,
			responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
				CallID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String("call_1"), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny, 21 C")}}})
	}
	inputTokens := func(reasoning bool) int64 {
		t.Helper()
		res, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: id, MaxOutputTokens: openai.Int(2),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items(reasoning)}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Usage.InputTokens
	}
	with, without := inputTokens(true), inputTokens(false)

	call := openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
		ID: "call_1", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	asst := openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{call}}
	asst.SetExtraFields(map[string]any{"reasoning_content": thought})
	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: id, MaxCompletionTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?"), {OfAssistant: &asst},
			openai.ToolMessage("sunny, 21 C", "call_1")}})
	if err != nil {
		t.Fatal(err)
	}
	if with != chat.Usage.PromptTokens || with <= without {
		t.Errorf("input_tokens with the reasoning item %d, without %d; chat with reasoning_content %d", with, without, chat.Usage.PromptTokens)
	}
}
