package toolcall

import (
	"errors"

	"rill/engine/grammar"
)

// harmonyGrammar is Grammar for Harmony: any analysis or preamble
// (commentary without recipient) messages, then one call of one of tools,
// as llama.cpp's gpt-oss grammar allows for tool_choice "required":
//
//	(<|channel|>analysis<|message|>TEXT<|end|><|start|>assistant
//	 | <|channel|>commentary<|message|>TEXT<|end|><|start|>assistant)*
//	( to=functions.NAME<|channel|>CH[ [<|constrain|>]json]<|message|>ARGS
//	 | <|channel|>CH to=functions.NAME[ [<|constrain|>]json]<|message|>ARGS)
//
// where CH is commentary or analysis. The output starts right after the
// generation prompt's <|start|>assistant, and <|call|> (an end of
// generation) follows the arguments. TEXT is any text without "<|" (so
// that it cannot hold <|end|>; a run of '<' is followed by another byte),
// a little narrower than llama.cpp's, which excludes only <|end|>. One
// generation makes one call (<|call|> ends it), so opts.Parallel changes
// nothing; opts.JSON's whitespace applies inside the arguments only.
func harmonyGrammar(tools []Tool, opts GrammarOptions) (*grammar.Grammar, error) {
	b := grammar.NewBuilder()
	message := harmonyMessages(b)
	before := grammar.Repeat(grammar.Alt(message("analysis"), message("commentary")), 0, -1)
	channel := grammar.Seq(grammar.Lit(harmonyChannel), grammar.Alt(grammar.Lit("commentary"), grammar.Lit("analysis")))
	constraint := harmonyConstraint()
	var calls []grammar.Node
	for i, t := range tools {
		if t.Name == "" {
			return nil, &ToolError{Index: i, Err: errors.New("the function has no name")}
		}
		for k := 0; k < len(t.Name); k++ {
			if c := t.Name[k]; c == ' ' || c == '<' || c == '\t' || c == '\r' || c == '\n' {
				return nil, &ToolError{Index: i, Name: t.Name, Err: errors.New("the name must not hold spaces or '<' in this model's tool format")}
			}
		}
		args := b.AnyJSON(true, opts.JSON)
		if len(t.Parameters) > 0 {
			n, err := b.JSONSchema(t.Parameters, opts.JSON)
			if err != nil {
				return nil, &ToolError{Index: i, Name: t.Name, Err: err}
			}
			args = n
		}
		to := grammar.Lit(" to=functions." + t.Name)
		calls = append(calls,
			grammar.Seq(to, channel, constraint, grammar.Lit(harmonyMessage), args),
			grammar.Seq(channel, to, constraint, grammar.Lit(harmonyMessage), args))
	}
	return b.Build(grammar.Seq(before, grammar.Alt(calls...)))
}

// harmonyMessages returns, for a channel, the node of one whole message in
// it that another message follows: <|channel|>CH<|message|>TEXT<|end|>
// <|start|>assistant, TEXT any text without "<|".
func harmonyMessages(b *grammar.Builder) func(channel string) grammar.Node {
	var notLt, notLtBar []byte
	for c := 0; c < 256; c++ {
		if c != '<' {
			notLt = append(notLt, byte(c))
			if c != '|' {
				notLtBar = append(notLtBar, byte(c))
			}
		}
	}
	text := b.Define("harmony-text", grammar.Repeat(grammar.Alt(
		grammar.Bytes(string(notLt)),
		grammar.Seq(grammar.Repeat(grammar.Lit("<"), 1, -1), grammar.Bytes(string(notLtBar))),
	), 0, -1))
	return func(channel string) grammar.Node {
		return grammar.Seq(grammar.Lit(harmonyChannel+channel+harmonyMessage), text, grammar.Lit(harmonyEnd+harmonyStart+"assistant"))
	}
}

// harmonyConstraint is the optional content type of a harmony header,
// " json" or " <|constrain|>json".
func harmonyConstraint() grammar.Node {
	return grammar.Opt(grammar.Seq(grammar.Lit(" "), grammar.Opt(grammar.Lit(harmonyConstrain)), grammar.Lit("json")))
}

// HarmonyResponseGrammar is the grammar of a structured reply
// (response_format) on a Harmony model: any analysis messages, then the
// final channel holding one JSON value of schema (any object when schema
// is empty), as llama.cpp's gpt-oss grammar has it:
//
//	(<|channel|>analysis<|message|>TEXT<|end|><|start|>assistant)*
//	<|channel|>final[ [<|constrain|>]json]<|message|>JSON
//
// The model keeps the channels it was trained to write, so its reasoning
// still streams as reasoning and the JSON arrives as the content; a bare
// JSON grammar would force the first token away from <|channel|>. An
// invalid schema is a *grammar.SchemaError, as FromJSONSchema's.
func HarmonyResponseGrammar(schema []byte, opts grammar.JSONOptions) (*grammar.Grammar, error) {
	b := grammar.NewBuilder()
	message := harmonyMessages(b)
	reply := b.AnyJSON(true, opts)
	if len(schema) > 0 {
		n, err := b.JSONSchema(schema, opts)
		if err != nil {
			return nil, err
		}
		reply = n
	}
	final := grammar.Seq(grammar.Lit(harmonyChannel+"final"), harmonyConstraint(), grammar.Lit(harmonyMessage), reply)
	return b.Build(grammar.Seq(grammar.Repeat(message("analysis"), 0, -1), final))
}
