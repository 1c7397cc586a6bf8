package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// What agents send, through the official openai-go client against a real
// loopback rill on the embedded random model: Codex's tools (a namespace,
// a custom tool with a grammar, a hosted web search), whose forced calls
// the grammar makes, and Qwen Code's max_tokens of 32000 on a small
// context.

var codexTools = []responses.ToolUnionParam{
	{OfNamespace: &responses.NamespaceToolParam{Name: "crm", Description: "The CRM.", Tools: []responses.NamespaceToolToolUnionParam{
		{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "find", Parameters: weatherParams, Strict: openai.Bool(true)}},
	}}},
	{OfCustom: &responses.CustomToolParam{Name: "apply_patch", Description: openai.String("Edits files."),
		Format: shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{Syntax: "lark", Definition: `start: /.+/`}}}},
	{OfWebSearch: &responses.WebSearchToolParam{Type: "web_search"}},
}

// TestCodexToolsWithOpenAIClient: a forced custom tool is a
// custom_tool_call with the input the model wrote, streamed or not; a
// forced namespaced function is a function_call of its own name with the
// namespace and arguments valid against its parameters; the web search is
// left out; sent back with their outputs and store false, the calls make
// a next turn.
func TestCodexToolsWithOpenAIClient(t *testing.T) {
	t.Parallel()
	s := startToolsServer(t)
	ctx := context.Background()
	params := func(choice responses.ResponseNewParamsToolChoiceUnion) responses.ResponseNewParams {
		return responses.ResponseNewParams{Model: "rill-tiny", Tools: codexTools, ToolChoice: choice, Store: openai.Bool(false),
			Input:             responses.ResponseNewParamsInputUnion{OfString: openai.String("Patch the weather in Paris.")},
			ParallelToolCalls: openai.Bool(false), Temperature: openai.Float(0), MaxOutputTokens: openai.Int(300)}
	}

	// The random model never ends a free string on its own: the grammar
	// keeps max_output_tokens as a budget and closes the call in time, so
	// the response completes with the input cut short.
	patch := params(responses.ResponseNewParamsToolChoiceUnion{OfCustomTool: &responses.ToolChoiceCustomParam{Name: "apply_patch"}})
	patch.MaxOutputTokens = openai.Int(120)
	whole, err := s.client.Responses.New(ctx, patch)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Output) != 1 || whole.Output[0].Type != "custom_tool_call" || whole.Status != "completed" {
		t.Fatalf("forced custom tool: status %s, output %s", whole.Status, whole.RawJSON())
	}
	ct := whole.Output[0].AsCustomToolCall()
	if ct.Name != "apply_patch" || ct.Namespace != "" || ct.CallID == "" || ct.Input == "" || strings.Contains(ct.Input, `"input"`) {
		t.Fatalf("custom tool call %s", ct.RawJSON())
	}
	streamed := streamResponse(t, s, patch)
	if len(streamed.Output) != 1 || streamed.Output[0].AsCustomToolCall().Input != ct.Input {
		t.Fatalf("streamed %s, not streamed input %q", streamed.RawJSON(), ct.Input)
	}

	find := params(responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "find"}})
	res, err := s.client.Responses.New(ctx, find)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 1 || res.Output[0].Type != "function_call" {
		t.Fatalf("forced namespaced function: %s", res.RawJSON())
	}
	fc := res.Output[0].AsFunctionCall()
	if fc.Name != "find" || fc.Namespace != "crm" {
		t.Fatalf("namespaced call %s", fc.RawJSON())
	}
	mustValidate(t, schemaOf(t, weatherParams), fc.Arguments, "crm.find's arguments")

	// The next turn, stateless: both calls and their outputs sent back.
	var items []any
	for _, raw := range []string{ct.RawJSON(), fc.RawJSON()} {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		items = append(items, m)
	}
	items = append([]any{map[string]any{"role": "user", "content": "Patch the weather in Paris."}}, items...)
	items = append(items, map[string]any{"type": "custom_tool_call_output", "call_id": ct.CallID, "output": "patched"},
		map[string]any{"type": "function_call_output", "call_id": fc.CallID, "output": "sunny"})
	next, err := s.client.Responses.New(ctx, params(responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}),
		option.WithJSONSet("input", items), option.WithJSONSet("max_output_tokens", 8))
	if err != nil {
		t.Fatal(err)
	}
	if next.Usage.InputTokens <= whole.Usage.InputTokens || next.Usage.OutputTokens == 0 {
		t.Errorf("next turn usage %+v after %+v", next.Usage, whole.Usage)
	}
}

// TestAgentBudgetWithOpenAIClient: Qwen Code's max_tokens of 32000 on a
// 256-token context generates until the context is full (finish length,
// prompt + completion = 256) by default, and is a 400
// context_length_exceeded with --max-tokens-policy error.
func TestAgentBudgetWithOpenAIClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("Tell me about the river."),
		MaxTokens: openai.Int(32000), Temperature: openai.Float(0)}
	ignoreEOS := option.WithJSONSet("ignore_eos", true)

	s := startToolsServer(t, "--ctx", "256")
	res, err := s.client.Chat.Completions.New(ctx, params, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].FinishReason != "length" || res.Usage.PromptTokens+res.Usage.CompletionTokens != 256 || res.Usage.TotalTokens != 256 {
		t.Errorf("finish %q, usage %+v; want length at 256 tokens", res.Choices[0].FinishReason, res.Usage)
	}
	r, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "rill-tiny", MaxOutputTokens: openai.Int(32000),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me about the river.")}}, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.Usage.TotalTokens != 256 {
		t.Errorf("Responses: status %s, usage %+v; want incomplete at 256 tokens", r.Status, r.Usage)
	}

	strict := startToolsServer(t, "--ctx", "256", "--max-tokens-policy", "error")
	_, err = strict.client.Chat.Completions.New(ctx, params, ignoreEOS)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" || apiErr.Param != "max_tokens" {
		t.Errorf("with --max-tokens-policy error: %v", err)
	}
}
