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
// tools, custom tools, namespaces of both, hosted tools, tool_choice,
// parallel_tool_calls and text.format, read into the same engine.Request
// fields chat fills (tools.go), and echoed in the response object as OpenAI
// echoes them.
//
// The engine knows functions only. A custom tool (free-form text input) is
// offered as a function of one string, {"input": ...}, and its calls are
// custom_tool_call items with that input; a namespace's tools are offered
// as functions named namespace + "__" + name, and their calls carry the
// namespace and the tool's own name, as OpenAI returns them. Hosted tools
// (web search, file search, code interpreter, ...) are OpenAI's to run:
// rill leaves them out of the prompt, with a warning, rather than refuse a
// client that always sends them (Codex sends web_search).

// responseTool is one element of the Responses API's "tools". Unlike
// chat's, a function's members are on the tool itself.
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
	// Format is a custom tool's input format (text, or a grammar).
	Format *customToolFormat `json:"format"`
	// Tools are a namespace's function and custom tools.
	Tools []responseTool `json:"tools"`

	raw json.RawMessage // the tool as the client wrote it, for the echo
}

// UnmarshalJSON decodes a tool and keeps its JSON for the echo.
func (t *responseTool) UnmarshalJSON(b []byte) error {
	type plain responseTool // without this method
	if err := json.Unmarshal(b, (*plain)(t)); err != nil {
		return err
	}
	t.raw = append(json.RawMessage(nil), b...)
	return nil
}

// customToolFormat is a custom tool's format: {"type":"text"}, or
// {"type":"grammar","syntax":"lark"|"regex","definition":...}.
type customToolFormat struct {
	Type       string `json:"type"`
	Syntax     string `json:"syntax"`
	Definition string `json:"definition"`
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

// hostedTools are the tool types OpenAI runs itself (or that stand for
// actions only OpenAI's models emit, local_shell, shell, apply_patch).
// rill leaves them out with a warning.
var hostedTools = map[string]bool{
	"web_search": true, "web_search_2025_08_26": true, "web_search_preview": true, "web_search_preview_2025_03_11": true,
	"file_search": true, "code_interpreter": true, "image_generation": true, "computer": true, "computer_use_preview": true,
	"mcp": true, "local_shell": true, "shell": true, "apply_patch": true, "tool_search": true, "programmatic_tool_calling": true,
}

// clientTool is how the client declared a tool that the model sees as a
// function of another name or shape: a custom tool, or a tool of a
// namespace.
type clientTool struct {
	name      string // the tool's own name
	namespace string // "" outside a namespace
	custom    bool
}

// namespaceSep joins a namespace and a tool's name into the function name
// the model sees. Both parts match OpenAI's name pattern, so the joined
// name is one a chat client could have declared.
const namespaceSep = "__"

// modelToolName is the function name the model sees for tool name of
// namespace ns ("": none).
func modelToolName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + namespaceSep + name
}

// customToolParameters is the arguments schema of a custom tool's function.
var customToolParameters = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"],"additionalProperties":false}`)

// Defaults of the Responses API that differ from chat's: a function tool
// is strict unless it says otherwise; a json_schema format is not.
const (
	defaultToolStrict   = true
	defaultFormatStrict = false
)

// responseTools declares a request's tools, as the engine sees them and
// as the job maps their calls back.
type responseTools struct {
	p     *responseJob
	req   *engine.Request
	names map[string]bool // function names the model sees
}

// applyResponseTools converts tools, tool_choice, parallel_tool_calls and
// text.format into req, and records in p what the response object echoes
// and how calls map back to custom and namespaced tools. A tool type that
// OpenAI does not define is a 400 naming tools[i].type; a hosted one is
// left out with a warning.
func applyResponseTools(r *responseRequest, req *engine.Request, p *responseJob) *apiError {
	ts := &responseTools{p: p, req: req, names: map[string]bool{}}
	echo := []byte{'['}
	for i := range r.Tools {
		t := &r.Tools[i]
		at := fmt.Sprintf("tools[%d]", i)
		if i > 0 {
			echo = append(echo, ',')
		}
		switch {
		case t.Type == "function":
			tool, e := ts.function(t, "", at)
			if e != nil {
				return e
			}
			echo = appendFunctionTool(echo, &tool, t.Description != nil)
			continue
		case t.Type == "custom":
			if e := ts.custom(t, "", at); e != nil {
				return e
			}
		case t.Type == "namespace":
			if e := ts.namespace(t, at); e != nil {
				return e
			}
		case hostedTools[t.Type]:
			p.warnings.add("%s (type %s) is left out: it is a tool OpenAI runs, and this server cannot.", at, t.Type)
		default:
			return invalid(at+".type", "unsupported_parameter",
				"Tools of type '%s' are not supported by this server; function, custom and namespace tools are (hosted tools are left out).", clip(t.Type, maxEchoBytes))
		}
		echo = append(echo, compactJSON(t.raw)...)
	}
	p.tools = append(echo, ']')

	choice, e := ts.choice(r.ToolChoice, len(r.Tools) > 0)
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

// declare adds a function the model sees under name, refusing a name
// declared before.
func (ts *responseTools) declare(tool engine.Tool, at string) *apiError {
	if ts.names[tool.Name] {
		return invalid(at+".name", "invalid_value", "Invalid '%s.name': the function '%s' is declared twice.", at, tool.Name)
	}
	ts.names[tool.Name] = true
	ts.req.Tools = append(ts.req.Tools, tool)
	return nil
}

// checkName refuses a tool or namespace name outside OpenAI's pattern.
func checkName(name, at string) *apiError {
	if !functionName.MatchString(name) {
		return invalid(at+".name", "invalid_value",
			"Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", at)
	}
	return nil
}

// function declares a function tool of namespace ns ("": none).
func (ts *responseTools) function(t *responseTool, ns, at string) (engine.Tool, *apiError) {
	if e := checkName(t.Name, at); e != nil {
		return engine.Tool{}, e
	}
	strict := defaultToolStrict
	if t.Strict != nil {
		strict = *t.Strict
	}
	tool := engine.Tool{Name: modelToolName(ns, t.Name), Strict: strict}
	if t.Description != nil {
		tool.Description = *t.Description
	}
	if !isNull(t.Parameters) {
		if firstByte(t.Parameters) != '{' {
			return engine.Tool{}, invalid(at+".parameters", "invalid_type", "Invalid type for '%s.parameters': expected an object.", at)
		}
		tool.Parameters = t.Parameters
	}
	if e := ts.declare(tool, at); e != nil {
		return engine.Tool{}, e
	}
	if ns != "" {
		ts.p.addClientTool(tool.Name, clientTool{name: t.Name, namespace: ns})
	}
	return tool, nil
}

// custom declares a custom tool of namespace ns ("": none) as a function
// of one string. A grammar format cannot be held to (the engine's grammars
// are JSON's); its definition is shown to the model in the description.
func (ts *responseTools) custom(t *responseTool, ns, at string) *apiError {
	if e := checkName(t.Name, at); e != nil {
		return e
	}
	description := ""
	if t.Description != nil {
		description = *t.Description
	}
	if f := t.Format; f != nil {
		switch f.Type {
		case "text":
		case "grammar":
			if f.Definition != "" {
				description = strings.TrimSpace(description + "\n\nThe input follows this " + f.Syntax + " grammar:\n" + f.Definition)
			}
		default:
			return invalid(at+".format.type", "invalid_value", "Invalid value for '%s.format.type': '%s' (want text or grammar).", at, clip(f.Type, maxEchoBytes))
		}
	}
	tool := engine.Tool{Name: modelToolName(ns, t.Name), Description: description, Parameters: customToolParameters, Strict: true}
	if e := ts.declare(tool, at); e != nil {
		return e
	}
	ts.p.addClientTool(tool.Name, clientTool{name: t.Name, namespace: ns, custom: true})
	return nil
}

// namespace declares the function and custom tools of a namespace tool.
func (ts *responseTools) namespace(t *responseTool, at string) *apiError {
	if e := checkName(t.Name, at); e != nil {
		return e
	}
	for j := range t.Tools {
		sub := &t.Tools[j]
		subAt := fmt.Sprintf("%s.tools[%d]", at, j)
		var e *apiError
		switch sub.Type {
		case "function":
			_, e = ts.function(sub, t.Name, subAt)
		case "custom":
			e = ts.custom(sub, t.Name, subAt)
		default:
			e = invalid(subAt+".type", "invalid_value", "Invalid value for '%s.type': a namespace holds function and custom tools, not '%s'.", subAt, clip(sub.Type, maxEchoBytes))
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// choice reads tool_choice: "none", "auto", "required", or an object
// naming a declared tool: {"type": "function", "name": ...} a function
// (a namespace's by its joined name, or by its own where that is
// unambiguous), {"type": "custom", "name": ...} a custom tool. A choice
// of a hosted tool, left out, is auto with a warning, and so is
// "required" when hosted tools are all there were. allowed_tools is a 400
// naming tool_choice.type.
func (ts *responseTools) choice(raw json.RawMessage, hadTools bool) (engine.ToolChoice, *apiError) {
	if isNull(raw) {
		return engine.ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "required" && len(ts.names) == 0 && hadTools {
			ts.p.warnings.add("tool_choice required is auto: the tools it could require are all left out.")
			return engine.ToolChoice{}, nil
		}
		return toolChoiceMode(s, len(ts.names) > 0)
	}
	var obj struct {
		Type string  `json:"type"`
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return engine.ToolChoice{}, invalid("tool_choice", "invalid_type", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	switch {
	case obj.Type == "function" || obj.Type == "custom":
	case hostedTools[obj.Type]:
		ts.p.warnings.add("tool_choice of type %s is auto: that tool is left out.", obj.Type)
		return engine.ToolChoice{}, nil
	default:
		return engine.ToolChoice{}, invalid("tool_choice.type", "unsupported_parameter",
			"tool_choice of type '%s' is not supported by this server; use none, auto, required or {\"type\": \"function\" or \"custom\", \"name\": ...}.", clip(obj.Type, maxEchoBytes))
	}
	if obj.Name == nil || *obj.Name == "" {
		return engine.ToolChoice{}, invalid("tool_choice.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.name'.")
	}
	custom := obj.Type == "custom"
	name := *obj.Name
	if !ts.declared(name, custom) {
		name = ts.ownName(name, custom)
	}
	if !ts.declared(name, custom) {
		return engine.ToolChoice{}, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice': no %s tool named '%s' is among the tools.", obj.Type, clip(*obj.Name, maxEchoBytes))
	}
	return engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: name}, nil
}

// declared reports whether the model sees a function name that stands
// for a custom tool (custom) or a function tool (not custom).
func (ts *responseTools) declared(name string, custom bool) bool {
	return ts.names[name] && ts.p.clientTools[name].custom == custom
}

// ownName returns the function name of the one namespaced tool (custom
// or not, as custom says) whose own name is name, or name itself when
// there is not exactly one.
func (ts *responseTools) ownName(name string, custom bool) string {
	found := ""
	for model, ct := range ts.p.clientTools {
		if ct.name == name && ct.custom == custom {
			if found != "" {
				return name
			}
			found = model
		}
	}
	if found == "" {
		return name
	}
	return found
}

// applyTextFormat converts text.format: text is free text, json_object any
// JSON object, json_schema (name and schema required, as OpenAI requires
// them) one document valid against the schema, strict or not.
func applyTextFormat(f *responseTextFormat, req *engine.Request, p *responseJob) *apiError {
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
