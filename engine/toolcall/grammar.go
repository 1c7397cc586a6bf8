package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"rill/engine/grammar"
)

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments; empty means any JSON
	// object.
	Parameters json.RawMessage
	// Strict asks for arguments that follow Parameters exactly, or an
	// error when the grammar cannot hold them to it (see AllowContent).
	Strict bool
}

// GrammarOptions tune Grammar. The zero value forces exactly one call.
type GrammarOptions struct {
	// Parallel allows one or more calls (parallel_tool_calls). Llama3
	// ignores it: its templates take one call per message.
	Parallel bool
	// AllowContent lets the model answer in words instead
	// (tool_choice "auto"); only the Generic format can express that in a
	// grammar, the others are left unconstrained in auto mode. The
	// parameters of a tool that is not Strict are then compiled with
	// grammar.JSONOptions.Loose: a schema beyond what a grammar can hold
	// narrows the arguments as far as it can instead of failing, as the
	// other formats, unconstrained, take any schema in auto mode. A forced
	// call (AllowContent false) or a strict tool keeps the error.
	AllowContent bool
	// JSON tunes the whitespace allowed between the arguments' JSON
	// tokens and before the calls; the zero value allows none.
	JSON grammar.JSONOptions
}

// ToolError says which tool's definition could not be compiled. It wraps
// the cause, a *grammar.SchemaError for a bad parameters schema; both are
// the client's error (HTTP 400, param tools[Index].function.parameters).
type ToolError struct {
	Index int
	Name  string
	Err   error
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("tool %d (%q): %v", e.Index, e.Name, e.Err)
}

func (e *ToolError) Unwrap() error { return e.Err }

// Grammar returns the grammar that holds output in format f to tool calls:
// the format's wrapper around a call of one of tools whose arguments are
// valid against that tool's parameters (any of them: an alternative per
// tool), or several calls with opts.Parallel. For tool_choice "required"
// pass every tool; for a named function, only that one. Leading whitespace
// is allowed as opts.JSON allows it between JSON tokens (by default none).
func Grammar(f Format, tools []Tool, opts GrammarOptions) (*grammar.Grammar, error) {
	if !f.Valid() {
		return nil, fmt.Errorf("toolcall: unknown format %q", f)
	}
	if len(tools) == 0 {
		return nil, errors.New("toolcall: a tool-call grammar needs at least one tool")
	}
	if opts.AllowContent && f != Generic {
		return nil, fmt.Errorf("toolcall: the %s format cannot express content in a grammar", f)
	}
	if f == Harmony {
		return harmonyGrammar(tools, opts)
	}
	b := grammar.NewBuilder()
	var calls []grammar.Node
	for i, t := range tools {
		if t.Name == "" {
			return nil, &ToolError{Index: i, Err: errors.New("the function has no name")}
		}
		if f == MistralArgs {
			for k := 0; k < len(t.Name); k++ {
				if !isNameByte(t.Name[k]) {
					return nil, &ToolError{Index: i, Name: t.Name, Err: errors.New("the name must be letters, digits, '_', '-' or '.' in this model's tool format")}
				}
			}
		}
		if _, xml := xmlSpecs[f]; xml {
			jo := opts.JSON
			jo.Loose = opts.AllowContent && !t.Strict
			n, err := xmlCallNode(b, f, t, jo)
			if err != nil {
				return nil, &ToolError{Index: i, Name: t.Name, Err: err}
			}
			calls = append(calls, n)
			continue
		}
		args := b.AnyJSON(true, opts.JSON)
		if len(t.Parameters) > 0 {
			jo := opts.JSON
			jo.Loose = opts.AllowContent && !t.Strict
			n, err := b.JSONSchema(t.Parameters, jo)
			if err != nil {
				return nil, &ToolError{Index: i, Name: t.Name, Err: err}
			}
			args = n
		}
		calls = append(calls, callNode(f, t.Name, args))
	}
	call := b.Define("call", grammar.Alt(calls...))
	var body grammar.Node
	parallel := opts.Parallel && f != Llama3
	switch f {
	case Hermes:
		body = repeatSep(call, "\n", parallel)
	case Llama3:
		body = call
	case Mistral:
		body = grammar.Seq(grammar.Lit(mistralCalls+"["), repeatSep(call, ", ", parallel), grammar.Lit("]"))
	case MistralArgs:
		body = repeatSep(call, "", parallel)
	case QwenXML, GLM, GLM47, MiniMax, SeedOSS, DeepSeekDSML:
		body = xmlRegionNode(f, call, parallel)
	case CommandR7B, Granite, Firefunction:
		spec := arraySpecs[f]
		open := spec.open
		if f == Firefunction {
			open = " " + open
		}
		body = grammar.Seq(grammar.Lit(open+"["), repeatSep(call, ", ", parallel), grammar.Lit("]"+spec.close))
	case FunctionaryV32:
		// The prompt wrote the first ">>>".
		body = call
		if parallel {
			body = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit(namedSpecs[f].callOpen), call), 0, -1))
		}
	case KimiK2, DeepSeekV31, FunctionaryV31:
		spec := namedSpecs[f]
		body = grammar.Seq(grammar.Lit(spec.open), repeatSep(call, "", parallel), grammar.Lit(spec.close))
	case Generic:
		body = grammar.Seq(grammar.Lit(`{"tool_calls": [`), repeatSep(call, ", ", parallel), grammar.Lit("]}"))
		if opts.AllowContent {
			content, err := b.JSONSchema([]byte(`{"type":"string"}`), opts.JSON)
			if err != nil {
				return nil, err
			}
			body = grammar.Alt(body, grammar.Seq(grammar.Lit(`{"content": `), content, grammar.Lit("}")))
		}
	}
	return b.Build(grammar.Seq(opts.JSON.Whitespace(), body))
}

// callNode is one call of the named function in format f.
func callNode(f Format, name string, args grammar.Node) grammar.Node {
	q := quoteJSON(name)
	switch f {
	case Hermes:
		return grammar.Seq(grammar.Lit(hermesOpen+"\n{\"name\": "+q+", \"arguments\": "), args, grammar.Lit("}\n"+hermesClose))
	case Llama3:
		return grammar.Seq(grammar.Lit("{\"name\": "+q+", \"parameters\": "), args, grammar.Lit("}"))
	case MistralArgs:
		return grammar.Seq(grammar.Lit(mistralCalls+name+mistralArgs), args)
	case KimiK2:
		s := namedSpecs[f]
		return grammar.Seq(grammar.Lit(s.callOpen+"functions."+name+":"), grammar.Repeat(grammar.ByteRange('0', '9'), 1, 3),
			grammar.Lit(s.nameEnd), args, grammar.Lit(s.callClose))
	case CommandR7B:
		return grammar.Seq(grammar.Lit(`{"tool_call_id": "`), grammar.Repeat(grammar.ByteRange('0', '9'), 1, 2),
			grammar.Lit(`", "tool_name": `+q+`, "parameters": `), args, grammar.Lit("}"))
	case FunctionaryV32:
		return grammar.Seq(grammar.Lit(name+"\n"), args)
	case DeepSeekV31, FunctionaryV31:
		s := namedSpecs[f]
		return grammar.Seq(grammar.Lit(s.callOpen+name+s.nameEnd), args, grammar.Lit(s.callClose))
	}
	return grammar.Seq(grammar.Lit("{\"name\": "+q+", \"arguments\": "), args, grammar.Lit("}"))
}

// repeatSep is n once, or with parallel one or more times separated by sep.
func repeatSep(n grammar.Node, sep string, parallel bool) grammar.Node {
	if !parallel {
		return n
	}
	return grammar.Seq(n, grammar.Repeat(grammar.Seq(grammar.Lit(sep), n), 0, -1))
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// GenericInstructions is the system-prompt text that teaches a model
// without tool syntax in its template the Generic format: the tools, with
// their descriptions and parameter schemas, and the two reply shapes.
func GenericInstructions(tools []Tool, allowContent bool) string {
	var sb strings.Builder
	sb.WriteString("You can call these functions:\n")
	for _, t := range tools {
		params := string(t.Parameters)
		if params == "" {
			params = `{"type": "object"}`
		}
		fmt.Fprintf(&sb, "- %s: %s\n  parameters (JSON Schema): %s\n", t.Name, strings.TrimSpace(t.Description), params)
	}
	sb.WriteString("\nTo call functions, reply with only this JSON object:\n")
	sb.WriteString(`{"tool_calls": [{"name": "<function name>", "arguments": {<arguments>}}]}` + "\n")
	if allowContent {
		sb.WriteString("To answer without calling a function, reply with only this JSON object:\n")
		sb.WriteString(`{"content": "<your answer>"}` + "\n")
	}
	return sb.String()
}
