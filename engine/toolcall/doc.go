// Package toolcall reads and constrains the tool calls models write: the
// output formats of the common chat templates, a streaming parser that
// turns generated text into OpenAI-shaped content and tool-call deltas, and
// the grammars that force a call for tool_choice "required" or a named
// function.
//
// # Formats
//
// Detect picks the format from the chat template's source:
//
//   - Hermes (Qwen, Hermes, QwQ): <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//     one block per call, possibly after some content;
//   - Llama3 (Llama 3.1-3.3): {"name": ..., "parameters": {...}} as the
//     whole reply or after <|python_tag|>; calls may be separated by ";";
//   - Mistral (7B v0.3, Nemo): [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...];
//   - MistralArgs (Small 3.2 and later): [TOOL_CALLS]name[ARGS]{...}, with an
//     optional [CALL_ID]id, repeated per call;
//   - Harmony (gpt-oss): messages on channels, <|channel|>analysis<|message|>...
//     as reasoning (Delta.Reasoning), <|channel|>commentary to=functions.NAME
//     <|constrain|>json<|message|>{...} as a call, the rest as content (see
//     harmony.go); its parser also runs without tools (Options.NoCalls);
//   - QwenXML (Qwen3-Coder, Qwen3.5, Nemotron Nano 3, StepFun 3.5):
//     <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
//     ...</function>\n</tool_call>, one block per call, possibly after some
//     content; a Hermes JSON call in the block is read too;
//   - GLM (4.5, 4.6): <tool_call>NAME\n<arg_key>KEY</arg_key>\n
//     <arg_value>VALUE</arg_value>\n...</tool_call>; GLM47 (4.7) the same
//     without the newlines; one block per call;
//   - MiniMax (M2): <minimax:tool_call>\n<invoke name="NAME">\n
//     <parameter name="KEY">VALUE</parameter>\n...</invoke>\n...
//     </minimax:tool_call>, several calls in one block;
//   - SeedOSS (ByteDance Seed-OSS): <seed:tool_call>\n<function=NAME>\n
//     <parameter=KEY>VALUE</parameter>\n...</function>\n</seed:tool_call>,
//     one block per call;
//   - DeepSeekDSML (DeepSeek V3.2): <｜DSML｜function_calls>\n
//     <｜DSML｜invoke name="NAME">\n<｜DSML｜parameter name="KEY"
//     string="true|false">VALUE</｜DSML｜parameter>\n...</｜DSML｜invoke>\n...
//     </｜DSML｜function_calls>, several calls in one block, each value
//     saying itself whether it is a string;
//   - KimiK2 (Kimi K2 Instruct, Thinking): <|tool_calls_section_begin|>
//     <|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...}
//     <|tool_call_end|>...<|tool_calls_section_end|>; functions.NAME:N is
//     kept as the call's id (the templates number calls across the
//     conversation); a call without the section is read too;
//   - DeepSeekV31 (DeepSeek V3.1): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>
//     NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>;
//   - FunctionaryV31 (Functionary v3.1): <function=NAME>{...}</function>,
//     calls one after another;
//   - FunctionaryV32 (Functionary v3.2): the prompt ends with ">>>"; the
//     model writes a recipient and a newline, "all" then content (the
//     recipient is dropped) or a function's name then its JSON arguments,
//     and ">>>" before each further recipient;
//   - CommandR7B (Command R7B, Command A): <|START_ACTION|>[{"tool_call_id":
//     "0", "tool_name": NAME, "parameters": {...}}, ...]<|END_ACTION|>; the
//     model's tool_call_id is not kept (it restarts at 0 every turn);
//   - Granite (3.x): <|tool_call|>[{"name": ..., "arguments": {...}}, ...]
//     (Granite 4 writes Hermes);
//   - Firefunction (v2):  functools[{"name": ..., "arguments": {...}}, ...];
//   - Generic, for templates without tool syntax: the whole reply is one
//     JSON object, {"tool_calls": [{"name": ..., "arguments": {...}}]} to
//     call, or {"content": "..."} to answer in words. The engine puts
//     GenericInstructions in the system prompt and constrains the reply with
//     Grammar (AllowContent for tool_choice "auto"), which even a small
//     model then follows.
//
// The parser reads the decoded text with the markers rendered: an engine
// that drops control tokens when decoding must render Markers() (such as
// [TOOL_CALLS], <tool_call>, <arg_key>) as text for it. For the
// grammars these markers must be tokens of the grammar.Vocab with their
// text as bytes (they are then one token each where the vocabulary has
// them).
//
// # Contract for the engine
//
// Per choice: NewParser(format, Options{Tools: declared names,
// Parameters: their schemas}); Feed each decoded text delta and forward
// the returned deltas (content as content, CallDelta as tool_calls[index]
// with id, type "function" and name on the first delta of a call,
// arguments pieces after); Flush at the end (stop,
// length or cancel). Non-streaming responses use Parse (or Assemble of the
// deltas), which gives the same result as any streaming of the same text.
// finish_reason is "tool_calls" when a call was made and generation
// stopped on its own; "length" when max_tokens cut it (the last call's
// arguments may then be incomplete JSON, as with OpenAI; in an XML format
// also when its syntax breaks after the call began). A Parser belongs
// to one goroutine; Grammar's result is an immutable *grammar.Grammar.
//
// The XML formats (QwenXML, GLM, GLM47, MiniMax, SeedOSS, DeepSeekDSML)
// write each argument as raw text, and the parser rebuilds the JSON
// object. Options.Parameters (the tools' schemas) says how to read a
// value: a property whose schema is "string" (or a string enum or const)
// becomes a JSON string, as does a property the schema does not declare
// (DeepSeekDSML's string="true|false" says it itself); any other value is
// kept when it is JSON, converted when it is a Python literal (the
// templates render values with Python's str: True, None, ['a'],
// {'k': 1}), else made a string. QwenXML drops the newline after the
// opening tag and before the closing one. A string argument streams as
// it is generated (holding back only what may be its closing tag); any
// other argument is sent when its closing tag arrives, and the object's
// closing brace with the call's. Their grammars write the schema's
// properties in order (the optional ones may be left out) and hold a
// string value to its enum, and to its minLength and maxLength by leaving
// out '<'; other string keywords (pattern, format) are not held there.
//
// Text that looks like a call but is not one (malformed JSON, an
// undeclared function, no arguments in the Llama format) is content. Only
// the minimum is held back: a possible marker prefix, whitespace before
// it, and a call until its name and the start of its arguments are seen;
// after that the arguments stream as they are generated.
//
// Reasoning is not split out here: text before the calls (<think>...
// </think>, Command R7B's <|START_THINKING|>...) is content to this
// package.
//
// Not supported: Llama's built-in tool syntax (<|python_tag|>f.call(...))
// and Functionary v3.1's <|python_tag|> code; DeepSeek R1's
// "function<｜tool▁sep｜>NAME" with a ```json block, Command R+'s
// "Action: ```json", MiniMax M1's <tool_calls> and M3's namespaced tags,
// Kimi K3, DeepSeek V4 (all detected as Generic or as the closest format
// above, as the table in detect_test.go records).
package toolcall
