package service

import (
	"encoding/json"
	"fmt"
	"regexp"

	"rill/engine"
)

// Tools and thinking on the Messages API, read into the engine.Request
// fields chat fills (tools.go): custom tools, tool_choice with
// disable_parallel_tool_use, and thinking as the chat template's
// enable_thinking switch.

// anthropicTool is one element of "tools": a custom tool (type absent or
// "custom": name, description, input_schema), or one of Anthropic's own
// tools (web_search_20250305, code_execution_…, bash_…, text_editor_…,
// memory_…, …), which run on Anthropic's servers or have schemas only
// Anthropic's models know.
type anthropicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      *bool           `json:"strict"`
}

// anthropicToolChoice is "tool_choice".
type anthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

// anthropicThinking is "thinking".
type anthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

// anthropicToolName is what Anthropic allows as a tool name: longer than
// OpenAI's 64 characters, which MCP tools' names ("mcp__server__tool")
// need.
var anthropicToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// applyAnthropicTools converts tools and tool_choice into req. Custom
// tools are declared as chat's function tools; Anthropic's own tools are
// left out of the prompt (no engine rill drives can run them or knows
// their schemas) and returned in skipped, "name (type)", for the caller's
// warning, as are mcp_servers. A tool_choice that names a tool left out,
// or no tool, is a 400.
func applyAnthropicTools(r *messagesRequest, req *engine.Request) (skipped []string, e *apiError) {
	names := map[string]bool{}
	serverTools := map[string]bool{}
	for i, t := range r.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			skipped = append(skipped, fmt.Sprintf("%s (%s)", clip(t.Name, maxEchoBytes), clip(t.Type, maxEchoBytes)))
			serverTools[t.Name] = true
			continue
		}
		if !anthropicToolName.MatchString(t.Name) {
			return nil, invalid(at+".name", "invalid_value",
				"Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,128}$'.", at)
		}
		if names[t.Name] {
			return nil, invalid(at+".name", "invalid_value", "Invalid '%s.name': the tool '%s' is declared twice.", at, t.Name)
		}
		names[t.Name] = true
		if isNull(t.InputSchema) {
			return nil, invalid(at+".input_schema", "missing_required_parameter", "Missing required parameter: '%s.input_schema'.", at)
		}
		if firstByte(t.InputSchema) != '{' {
			return nil, invalid(at+".input_schema", "invalid_type", "Invalid type for '%s.input_schema': expected an object.", at)
		}
		req.Tools = append(req.Tools, engine.Tool{Name: t.Name, Description: t.Description,
			Parameters: t.InputSchema, Strict: t.Strict != nil && *t.Strict})
	}
	for _, m := range r.MCPServers {
		skipped = append(skipped, fmt.Sprintf("%s (mcp_servers)", clip(m.Name, maxEchoBytes)))
	}
	tc := r.ToolChoice
	if tc == nil {
		return skipped, nil
	}
	switch tc.Type {
	case "auto":
		req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceAuto}
	case "none":
		req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceNone}
	case "any":
		if len(names) == 0 {
			return nil, invalid("tool_choice.type", "invalid_value", "Invalid value for 'tool_choice.type': 'any' needs tools this server can call.")
		}
		req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceRequired}
	case "tool":
		switch {
		case tc.Name == "":
			return nil, invalid("tool_choice.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.name'.")
		case serverTools[tc.Name]:
			return nil, invalid("tool_choice.name", "unsupported_parameter",
				"Invalid value for 'tool_choice.name': '%s' is one of Anthropic's server tools, which this server cannot run.", clip(tc.Name, maxEchoBytes))
		case !names[tc.Name]:
			return nil, invalid("tool_choice.name", "invalid_value",
				"Invalid value for 'tool_choice.name': no tool named '%s' is among the tools.", clip(tc.Name, maxEchoBytes))
		}
		req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: tc.Name}
	default:
		return nil, invalid("tool_choice.type", "invalid_value",
			"Invalid value for 'tool_choice.type': '%s' (want auto, any, tool or none).", clip(tc.Type, maxEchoBytes))
	}
	if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
		parallel := false
		req.ParallelToolCalls = &parallel
	}
	return skipped, nil
}

// applyThinking maps thinking onto the chat template's reasoning switch,
// as the Responses API maps reasoning.effort: "disabled" is
// enable_thinking false (reasoning models' templates then close an empty
// block and the model answers at once); "enabled", "adaptive" and absence
// leave the template's default, which is thinking on for every model rill
// finds reasoning in. Setting enable_thinking true instead would make an
// engine behind HTTP that reads no template variables refuse every
// request that asks for thinking (Claude Code always does). budget_tokens
// is required, as Anthropic requires it, and has no effect: rill has no
// thinking budget. Unlike Anthropic, a budget that is not below max_tokens
// is accepted, since it changes nothing here and clients send one (Qwen
// Code: budget_tokens 32000 with max_tokens 32000).
func applyThinking(r *messagesRequest, req *engine.Request) *apiError {
	t := r.Thinking
	if t == nil {
		return nil
	}
	switch t.Type {
	case "enabled":
		if t.BudgetTokens == nil {
			return invalid("thinking.budget_tokens", "missing_required_parameter", "Missing required parameter: 'thinking.budget_tokens'.")
		}
	case "disabled":
		req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	}
	return nil
}
