package engine

import "encoding/json"

// Tool is a function the model may call, as the client declared it.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the call's arguments object; nil
	// means any object.
	Parameters json.RawMessage
	// Strict asks for arguments that follow Parameters exactly (OpenAI's
	// strict mode). An engine that constrains decoding refuses a strict
	// tool's schema it cannot hold output to; one that is not strict, in
	// auto mode, it may hold only as far as it can, as OpenAI enforces
	// nothing of it.
	Strict bool
}

// ToolChoiceMode says whether the model must call a tool.
type ToolChoiceMode string

const (
	// ToolChoiceAuto lets the model answer or call tools; the zero value.
	ToolChoiceAuto ToolChoiceMode = ""
	// ToolChoiceNone forbids tool calls (the tools are still shown).
	ToolChoiceNone ToolChoiceMode = "none"
	// ToolChoiceRequired forces at least one call of any tool.
	ToolChoiceRequired ToolChoiceMode = "required"
	// ToolChoiceFunction forces a call of the tool named in ToolChoice.Name.
	ToolChoiceFunction ToolChoiceMode = "function"
)

// ToolChoice is the request's tool_choice.
type ToolChoice struct {
	Mode ToolChoiceMode
	Name string // the forced function, with ToolChoiceFunction
}

// ToolCall is one complete call, as an assistant message in a
// conversation carries it.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the arguments object as JSON text, as OpenAI sends it.
	Arguments string
}

// ToolCallDelta is one streamed fragment of a tool call, in OpenAI's
// delta.tool_calls shape: the first fragment of call Index carries its ID
// and Name, later ones pieces of Arguments (JSON text) to be appended.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// ResponseFormatType is the kind of output a request asks for.
type ResponseFormatType string

const (
	FormatText       ResponseFormatType = "text"
	FormatJSONObject ResponseFormatType = "json_object"
	FormatJSONSchema ResponseFormatType = "json_schema"
)

// ResponseFormat is the request's response_format (or the Responses API's
// text.format).
type ResponseFormat struct {
	Type ResponseFormatType
	// Name, Schema and Strict are json_schema's; Schema is the JSON Schema
	// the output must follow.
	Name   string
	Schema json.RawMessage
	Strict bool
}
