package service

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"rill/engine"
)

// Wire types and conversions of tool calling, structured outputs and
// logit_bias: the request fields (tools, tool_choice, parallel_tool_calls,
// response_format, logit_bias) and the tool calls in responses and chunks.

// toolParam is one element of "tools".
type toolParam struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// responseFormat is "response_format".
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// functionName is what OpenAI allows as a function name.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// applyTools converts tools, tool_choice and parallel_tool_calls into req.
func applyTools(r *chatRequest, req *engine.Request) *apiError {
	names := map[string]bool{}
	for i, t := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return unsupported(param+".type", fmt.Sprintf("Tools of type '%s' are", t.Type))
		}
		if t.Function == nil {
			return invalid(param+".function", "missing_required_parameter", "Missing required parameter: '%s.function'.", param)
		}
		f := t.Function
		if !functionName.MatchString(f.Name) {
			return invalid(param+".function.name", "invalid_value",
				"Invalid '%s.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", param)
		}
		if names[f.Name] {
			return invalid(param+".function.name", "invalid_value", "Invalid '%s.function.name': the function '%s' is declared twice.", param, f.Name)
		}
		names[f.Name] = true
		tool := engine.Tool{Name: f.Name, Description: f.Description, Strict: f.Strict != nil && *f.Strict}
		if !isNull(f.Parameters) {
			if firstByte(f.Parameters) != '{' {
				return invalid(param+".function.parameters", "invalid_type", "Invalid type for '%s.function.parameters': expected an object.", param)
			}
			tool.Parameters = f.Parameters
		}
		req.Tools = append(req.Tools, tool)
	}
	choice, e := toolChoice(r.ToolChoice, names)
	if e != nil {
		return e
	}
	req.ToolChoice = choice
	if r.ParallelToolCalls != nil {
		p := *r.ParallelToolCalls
		req.ParallelToolCalls = &p
	}
	return nil
}

// toolChoice reads tool_choice: null, "none", "auto", "required", or
// {"type": "function", "function": {"name": ...}} naming a declared tool.
func toolChoice(raw json.RawMessage, names map[string]bool) (engine.ToolChoice, *apiError) {
	var none engine.ToolChoice
	if isNull(raw) {
		return none, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return engine.ToolChoice{Mode: engine.ToolChoiceAuto}, nil
		case "none":
			return engine.ToolChoice{Mode: engine.ToolChoiceNone}, nil
		case "required":
			if len(names) == 0 {
				return none, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
			}
			return engine.ToolChoice{Mode: engine.ToolChoiceRequired}, nil
		}
		return none, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice': '%s' (want none, auto, required or a function).", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return none, invalid("tool_choice", "invalid_type", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	if obj.Type != "function" {
		return none, unsupported("tool_choice.type", fmt.Sprintf("tool_choice of type '%s'", obj.Type))
	}
	if obj.Function == nil || obj.Function.Name == "" {
		return none, invalid("tool_choice.function.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.function.name'.")
	}
	if !names[obj.Function.Name] {
		return none, invalid("tool_choice", "invalid_value", "Invalid value for 'tool_choice': no function named '%s' is among the tools.", obj.Function.Name)
	}
	return engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: obj.Function.Name}, nil
}

// applyResponseFormat converts response_format into req: text (or none)
// is free text, json_object any JSON object, json_schema a document valid
// against its schema (strict or not: rill's grammar enforces either).
func applyResponseFormat(rf *responseFormat, req *engine.Request) *apiError {
	if rf == nil {
		return nil
	}
	switch rf.Type {
	case "", "text":
		return nil
	case "json_object":
		req.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject}
		return nil
	case "json_schema":
		js := rf.JSONSchema
		if js == nil {
			return invalid("response_format.json_schema", "missing_required_parameter", "Missing required parameter: 'response_format.json_schema'.")
		}
		if !isNull(js.Schema) && firstByte(js.Schema) != '{' {
			return invalid("response_format.json_schema.schema", "invalid_type", "Invalid type for 'response_format.json_schema.schema': expected an object.")
		}
		out := &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: js.Name, Strict: js.Strict != nil && *js.Strict}
		if !isNull(js.Schema) {
			out.Schema = js.Schema
		}
		req.ResponseFormat = out
		return nil
	}
	return invalid("response_format.type", "invalid_value", "Invalid value for 'response_format.type': '%s'.", rf.Type)
}

// logitBias reads logit_bias: token ids (as decimal strings) to biases
// between -100 and 100. Whether an id is in the model's vocabulary is the
// engine's to say.
func logitBias(m map[string]float64) (map[int]float64, *apiError) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[int]float64, len(m))
	for k, v := range m {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 || strconv.Itoa(id) != k {
			return nil, invalid("logit_bias", "invalid_value", "Invalid key in 'logit_bias': '%s' is not a token id.", k)
		}
		if math.IsNaN(v) || v < -100 || v > 100 {
			return nil, invalid("logit_bias", "invalid_value", "Invalid value for 'logit_bias' of token %s: %v; biases must be between -100 and 100.", k, v)
		}
		out[id] = v
	}
	return out, nil
}

// callOutput is one tool call of a non-streamed choice, assembled from its
// deltas.
type callOutput struct {
	id, name  string
	arguments []byte
}

// addCalls assembles streamed tool-call deltas into calls, by index.
func addCalls(calls []callOutput, deltas []engine.ToolCallDelta) []callOutput {
	for _, d := range deltas {
		if d.Index < 0 {
			continue // an engine never sends one; nothing to attach it to
		}
		for len(calls) <= d.Index {
			calls = append(calls, callOutput{})
		}
		c := &calls[d.Index]
		if d.ID != "" {
			c.id = d.ID
		}
		if d.Name != "" {
			c.name = d.Name
		}
		c.arguments = append(c.arguments, d.Arguments...)
	}
	return calls
}

// appendToolCalls appends the message's "tool_calls" array.
func appendToolCalls(b []byte, calls []callOutput) []byte {
	b = append(b, `"tool_calls":[`...)
	for i, c := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, c.id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, c.name)
		b = append(b, `,"arguments":`...)
		b = appendString(b, string(c.arguments))
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// appendToolCallDeltas appends a chunk delta's "tool_calls" array: the
// first fragment of a call carries its id, type and name, the others only
// pieces of arguments, each with the call's index.
func appendToolCallDeltas(b []byte, deltas []engine.ToolCallDelta) []byte {
	b = append(b, `"tool_calls":[`...)
	for i, d := range deltas {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, d.Index)
		if d.ID != "" {
			b = append(b, `,"id":`...)
			b = appendString(b, d.ID)
			b = append(b, `,"type":"function"`...)
		}
		b = append(b, `,"function":{`...)
		if d.Name != "" {
			b = append(b, `"name":`...)
			b = appendString(b, d.Name)
			b = append(b, ',')
		}
		b = append(b, `"arguments":`...)
		b = appendString(b, d.Arguments)
		b = append(b, "}}"...)
	}
	return append(b, ']')
}
