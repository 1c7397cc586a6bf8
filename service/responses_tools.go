package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"rill/engine"
)

// Tools and structured outputs on the Responses API: its flat function
// tools, tool_choice, parallel_tool_calls and text.format, read into the
// same engine.Request fields chat fills (tools.go), and echoed in the
// response object as OpenAI echoes them.

// responseTool is one element of the Responses API's "tools". Unlike
// chat's, a function's members are on the tool itself.
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// responseTextFormat is "text.format": text, json_object, or json_schema
// with its members flat.
type responseTextFormat struct {
	Type        string          `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// Defaults of the Responses API that differ from chat's: a function tool
// is strict unless it says otherwise; a json_schema format is not.
const (
	defaultToolStrict   = true
	defaultFormatStrict = false
)

// applyResponseTools converts tools, tool_choice, parallel_tool_calls and
// text.format into req, and records in p what the response object echoes.
// Only function tools are supported; a hosted tool (web_search,
// file_search, computer_use_preview, mcp, code_interpreter, custom, …) is a
// 400 naming tools[i].type.
func applyResponseTools(r *responseRequest, req *engine.Request, p *responsePlan) *apiError {
	names := map[string]bool{}
	echo := []byte{'['}
	for i, t := range r.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return invalid(at+".type", "unsupported_parameter",
				"Tools of type '%s' are not supported by this server; only function tools are.", clip(t.Type, maxEchoBytes))
		}
		strict := defaultToolStrict
		if t.Strict != nil {
			strict = *t.Strict
		}
		description := ""
		if t.Description != nil {
			description = *t.Description
		}
		tool, e := declareFunction(t.Name, description, t.Parameters, strict, names, at)
		if e != nil {
			return e
		}
		req.Tools = append(req.Tools, tool)
		if i > 0 {
			echo = append(echo, ',')
		}
		echo = appendFunctionTool(echo, &tool, t.Description != nil)
	}
	p.tools = append(echo, ']')

	choice, e := responseToolChoice(r.ToolChoice, names)
	if e != nil {
		return e
	}
	req.ToolChoice = choice
	p.toolChoice = []byte(`"auto"`)
	if !isNull(r.ToolChoice) {
		p.toolChoice = compactJSON(r.ToolChoice)
	}
	p.parallelToolCalls = true
	if r.ParallelToolCalls != nil {
		parallel := *r.ParallelToolCalls
		req.ParallelToolCalls = &parallel
		p.parallelToolCalls = parallel
	}

	p.textFormat = []byte(`{"type":"text"}`)
	if r.Text == nil || r.Text.Format == nil {
		return nil
	}
	return applyTextFormat(r.Text.Format, req, p)
}

// responseToolChoice reads tool_choice: "none", "auto", "required", or
// {"type": "function", "name": ...} naming a declared function. Forcing a
// hosted tool, or allowed_tools, is a 400 naming tool_choice.type.
func responseToolChoice(raw json.RawMessage, names map[string]bool) (engine.ToolChoice, *apiError) {
	if isNull(raw) {
		return engine.ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return toolChoiceMode(s, len(names) > 0)
	}
	var obj struct {
		Type string  `json:"type"`
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return engine.ToolChoice{}, invalid("tool_choice", "invalid_type", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	if obj.Type != "function" {
		return engine.ToolChoice{}, invalid("tool_choice.type", "unsupported_parameter",
			"tool_choice of type '%s' is not supported by this server; use none, auto, required or {\"type\": \"function\", \"name\": ...}.", clip(obj.Type, maxEchoBytes))
	}
	if obj.Name == nil || *obj.Name == "" {
		return engine.ToolChoice{}, invalid("tool_choice.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.name'.")
	}
	return namedToolChoice(*obj.Name, names)
}

// applyTextFormat converts text.format: text is free text, json_object any
// JSON object, json_schema (name and schema required, as OpenAI requires
// them) one document valid against the schema, strict or not.
func applyTextFormat(f *responseTextFormat, req *engine.Request, p *responsePlan) *apiError {
	switch f.Type {
	case "text":
		return nil
	case "json_object":
		req.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject}
		p.textFormat = []byte(`{"type":"json_object"}`)
		return nil
	case "json_schema":
	default:
		return invalid("text.format.type", "invalid_value", "Invalid value for 'text.format.type': '%s' (want text, json_object or json_schema).", clip(f.Type, maxEchoBytes))
	}
	if f.Name == nil {
		return invalid("text.format.name", "missing_required_parameter", "Missing required parameter: 'text.format.name'.")
	}
	if isNull(f.Schema) {
		return invalid("text.format.schema", "missing_required_parameter", "Missing required parameter: 'text.format.schema'.")
	}
	strict := defaultFormatStrict
	if f.Strict != nil {
		strict = *f.Strict
	}
	rf, e := jsonSchemaFormat(*f.Name, f.Schema, strict, "text.format")
	if e != nil {
		return e
	}
	req.ResponseFormat = rf
	b := []byte(`{"type":"json_schema","description":`)
	if f.Description != nil {
		b = appendString(b, *f.Description)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"name":`...)
	b = appendString(b, rf.Name)
	b = append(b, `,"schema":`...)
	b = append(b, compactJSON(rf.Schema)...)
	b = append(b, `,"strict":`...)
	b = strconv.AppendBool(b, rf.Strict)
	p.textFormat = append(b, '}')
	return nil
}

// appendFunctionTool appends the echo of a function tool:
// {"type":"function","name","description","parameters","strict"}, with
// description and parameters null when the request had none.
func appendFunctionTool(b []byte, t *engine.Tool, hasDescription bool) []byte {
	b = append(b, `{"type":"function","name":`...)
	b = appendString(b, t.Name)
	b = append(b, `,"description":`...)
	if hasDescription {
		b = appendString(b, t.Description)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"parameters":`...)
	if t.Parameters != nil {
		b = append(b, compactJSON(t.Parameters)...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"strict":`...)
	b = strconv.AppendBool(b, t.Strict)
	return append(b, '}')
}

// compactJSON returns the validated JSON raw without insignificant space,
// so that an echo of it never puts a line break into an SSE data line.
func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		// Unreachable for a body that was decoded; never echo it raw.
		return []byte("null")
	}
	return b.Bytes()
}

// responsesFieldNames restates the chat field names an engine's refusal
// quotes (in its param and its message) in the Responses API's names. The
// only chat_template_kwargs a Responses request sets come from
// reasoning.effort (an upstream that reads none refuses them).
var responsesFieldNames = strings.NewReplacer(
	"response_format.type", "text.format.type",
	"response_format", "text.format",
	"chat_template_kwargs", "reasoning.effort",
	".function.parameters", ".parameters",
	".function.name", ".name",
)

// responsesParams maps the params an engine names as a whole: its chat
// request's messages are the input, its max_tokens max_output_tokens.
var responsesParams = map[string]string{"messages": "input", "max_tokens": "max_output_tokens"}

// responsesError is e with its param (and the field names its message
// quotes) in the Responses API's names.
func responsesError(e *apiError) *apiError {
	if e == nil || e.Param == "" {
		return e
	}
	out := *e
	if p, ok := responsesParams[e.Param]; ok {
		out.Param = p
	} else {
		out.Param = responsesFieldNames.Replace(e.Param)
	}
	out.Message = responsesFieldNames.Replace(e.Message)
	return &out
}
