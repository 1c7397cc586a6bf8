package toolcall

import (
	"crypto/rand"
	"strings"
)

// Format is how a model writes tool calls in its output.
type Format string

const (
	// Hermes: <tool_call>{"name": "f", "arguments": {...}}</tool_call>, once
	// per call, possibly after some content (Qwen 2/2.5/3, Hermes, QwQ).
	Hermes Format = "hermes"
	// Llama3: {"name": "f", "parameters": {...}} as the whole reply, or
	// after <|python_tag|>; several calls may follow each other, separated
	// by ";" or whitespace (Llama 3.1, 3.2, 3.3).
	Llama3 Format = "llama3"
	// Mistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
	// (Mistral 7B v0.3, Nemo).
	Mistral Format = "mistral"
	// MistralArgs: [TOOL_CALLS]f[ARGS]{...}, once per call, optionally
	// with [CALL_ID]id before [ARGS] (Mistral Small 3.2 and later).
	MistralArgs Format = "mistral-args"
	// QwenXML: <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
	// ...</function>\n</tool_call>, once per call, possibly after some
	// content (Qwen3-Coder, Qwen3.5, Nemotron Nano 3, StepFun 3.5). A
	// Hermes JSON call inside <tool_call> is read too.
	QwenXML Format = "qwen-xml"
	// GLM: <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n
	// ...</tool_call>, once per call (GLM 4.5, 4.6); GLM47 is the same
	// without the newlines (GLM 4.7).
	GLM   Format = "glm"
	GLM47 Format = "glm-4.7"
	// MiniMax: <minimax:tool_call>\n<invoke name="f">\n<parameter name="k">v
	// </parameter>\n...</invoke>\n...</minimax:tool_call>, several calls in
	// one block (MiniMax M2).
	MiniMax Format = "minimax"
	// SeedOSS: <seed:tool_call>\n<function=f>\n<parameter=k>v</parameter>\n
	// ...</function>\n</seed:tool_call>, once per call (ByteDance Seed-OSS).
	SeedOSS Format = "seed-oss"
	// DeepSeekDSML: <｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n
	// <｜DSML｜parameter name="k" string="true|false">v</｜DSML｜parameter>\n
	// ...</｜DSML｜invoke>\n...</｜DSML｜function_calls>, several calls in one
	// block, each value saying whether it is a string (DeepSeek V3.2).
	DeepSeekDSML Format = "deepseek-dsml"
	// KimiK2: <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
	// <|tool_call_argument_begin|>{...}<|tool_call_end|>...
	// <|tool_calls_section_end|>; the functions.f:N is the call's id
	// (Kimi K2 Instruct, Thinking).
	KimiK2 Format = "kimi-k2"
	// DeepSeekV31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
	// <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek V3.1).
	DeepSeekV31 Format = "deepseek-v3.1"
	// FunctionaryV31: <function=f>{...}</function>, once per call
	// (Functionary v3.1).
	FunctionaryV31 Format = "functionary-v3.1"
	// CommandR7B: <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f",
	// "parameters": {...}}, ...]<|END_ACTION|> (Command R7B, Command A).
	CommandR7B Format = "command-r7b"
	// Granite: <|tool_call|>[{"name": "f", "arguments": {...}}, ...]
	// (Granite 3.x; Granite 4 writes Hermes).
	Granite Format = "granite"
	// Firefunction:  functools[{"name": "f", "arguments": {...}}, ...]
	// (Firefunction v2).
	Firefunction Format = "firefunction-v2"
	// FunctionaryV32: the prompt ends with ">>>", and the model writes a
	// recipient and a newline: "all" then content, or a function's name
	// then its JSON arguments; further ">>>" open further recipients
	// (Functionary v3.2).
	FunctionaryV32 Format = "functionary-v3.2"
	// Generic is for models whose chat template has no tool syntax. The
	// whole reply is one JSON object, either
	//
	//	{"tool_calls": [{"name": "f", "arguments": {...}}, ...]}
	//
	// or, when the model answers in words,
	//
	//	{"content": "the answer"}
	//
	// The system prompt describes the tools and this format
	// (GenericInstructions), and the grammar (Grammar with AllowContent)
	// holds the model to it, so even a small model produces it reliably.
	Generic Format = "generic"
	// Harmony: gpt-oss's channels, <|channel|>analysis<|message|>... for
	// reasoning and <|channel|>commentary to=functions.f ...<|message|>{...}
	// per call (see harmony.go).
	Harmony Format = "harmony"
)

// Markers that open tool calls in the model's output. The parser reads the
// decoded text with these rendered; an engine that decodes control tokens
// as nothing must render them for the parser (Mistral's [TOOL_CALLS] is a
// control token; Qwen's <tool_call> and Llama's <|python_tag|> are text or
// special depending on the vocabulary).
const (
	hermesOpen      = "<tool_call>"
	hermesClose     = "</tool_call>"
	llamaPythonTag  = "<|python_tag|>"
	mistralCalls    = "[TOOL_CALLS]"
	mistralArgs     = "[ARGS]"
	mistralCallID   = "[CALL_ID]"
	mistralIDLength = 9 // Mistral's templates refuse other lengths
)

// Markers returns the texts of every format's call syntax that a
// vocabulary may hold as single control tokens. An engine that decodes
// control tokens as nothing must decode these as their text for the parser
// (and give them their text in the grammar's vocabulary).
func Markers() []string {
	out := []string{hermesOpen, hermesClose, llamaPythonTag, mistralCalls, mistralArgs, mistralCallID,
		"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}
	for _, f := range []Format{MiniMax, SeedOSS, DeepSeekDSML} {
		out = append(out, xmlSpecs[f].open, xmlSpecs[f].close)
	}
	out = append(out, arraySpecs[CommandR7B].open, arraySpecs[CommandR7B].close, arraySpecs[Granite].open)
	for _, f := range []Format{KimiK2, DeepSeekV31} {
		s := namedSpecs[f]
		out = append(out, s.open, s.close, s.callOpen, s.nameEnd, s.callClose)
	}
	return out
}

// Detect tells the tool-call format from a chat template's source: the
// syntax the template renders past tool calls in is the syntax the model was
// trained to write.
//
//   - "<|channel|>" with "<|message|>": Harmony;
//   - "<|tool_calls_section_begin|>": KimiK2;
//   - "<｜tool▁calls▁begin｜>" with the name right before "<｜tool▁sep｜>":
//     DeepSeekV31 (R1's "function<｜tool▁sep｜>name" with a ```json block
//     stays Generic);
//   - "｜DSML｜" with "function_calls": DeepSeekDSML;
//   - "<minimax:tool_call>": MiniMax; "<seed:tool_call>": SeedOSS;
//   - "<arg_key>": GLM47 where keys and values are written together
//     ("</arg_key><arg_value>"), else GLM;
//   - ">>>all": FunctionaryV32;
//   - "<|START_ACTION|>": CommandR7B; "<|tool_call|>": Granite;
//     " functools[": Firefunction;
//   - "<tool_call>" with "<function=" and "<parameter=": QwenXML;
//   - "<function=" and "</function>" without "<parameter=": FunctionaryV31;
//   - "[TOOL_CALLS]" with "[ARGS]": MistralArgs; "[TOOL_CALLS]": Mistral;
//   - "<tool_call>": Hermes;
//   - "<|python_tag|>" or the "ipython" role: Llama3;
//   - anything else: Generic.
func Detect(chatTemplate string) Format {
	has := func(s string) bool { return strings.Contains(chatTemplate, s) }
	switch {
	case strings.Contains(chatTemplate, harmonyChannel) && strings.Contains(chatTemplate, harmonyMessage):
		return Harmony
	case has("<|tool_calls_section_begin|>"):
		return KimiK2
	case has("<｜tool▁calls▁begin｜>") && has("<｜tool▁sep｜>' + tool['function']['arguments']"):
		return DeepSeekV31
	case has("｜DSML｜") && has("function_calls"):
		return DeepSeekDSML
	case has("<minimax:tool_call>"):
		return MiniMax
	case has("<seed:tool_call>"):
		return SeedOSS
	case has("<arg_key>") && has("</arg_key><arg_value>"):
		return GLM47
	case has("<arg_key>"):
		return GLM
	case has(">>>all"):
		return FunctionaryV32
	case has("<|START_ACTION|>"):
		return CommandR7B
	case has("<|tool_call|>"):
		return Granite
	case has(" functools["):
		return Firefunction
	case has(hermesOpen) && has("<function=") && has("<parameter="):
		return QwenXML
	case has("<function=") && has("</function>") && !has("<parameter="):
		return FunctionaryV31
	case strings.Contains(chatTemplate, mistralCalls) && strings.Contains(chatTemplate, mistralArgs):
		return MistralArgs
	case strings.Contains(chatTemplate, mistralCalls):
		return Mistral
	case strings.Contains(chatTemplate, hermesOpen):
		return Hermes
	case strings.Contains(chatTemplate, llamaPythonTag) || strings.Contains(chatTemplate, "ipython"):
		return Llama3
	}
	return Generic
}

// Valid reports whether f is one of the formats above.
func (f Format) Valid() bool {
	switch f {
	case Hermes, Llama3, Mistral, MistralArgs, Generic, Harmony:
		return true
	}
	_, xml := xmlSpecs[f]
	_, named := namedSpecs[f]
	_, array := arraySpecs[f]
	return xml || named || array
}

// argKeys are the member names that hold a call's arguments, preferred
// first.
func (f Format) argKeys() []string {
	if f == Llama3 {
		return []string{"parameters", "arguments"}
	}
	return []string{"arguments", "parameters"}
}

// marker is the text that opens a call region ("" when calls are bare JSON
// at the start of the reply).
func (f Format) marker() string {
	switch f {
	case Hermes:
		return hermesOpen
	case Llama3:
		return llamaPythonTag
	case Mistral, MistralArgs:
		return mistralCalls
	}
	if spec, ok := xmlSpecs[f]; ok {
		return spec.open
	}
	if spec, ok := arraySpecs[f]; ok {
		return spec.open
	}
	if spec, ok := namedSpecs[f]; ok {
		if spec.open != "" {
			return spec.open
		}
		return spec.callOpen
	}
	return ""
}

// markers are the texts that open a call region: marker(), and for
// QwenXML also a bare <function=, which Qwen3-Coder sometimes writes
// without the <tool_call> before it.
func (f Format) markers() []string {
	m := f.marker()
	switch {
	case m == "":
		return nil
	case f == QwenXML:
		return []string{m, xmlSpecs[QwenXML].callOpen}
	case namedSpecs[f] != nil && namedSpecs[f].open != "":
		return []string{m, namedSpecs[f].callOpen}
	}
	return []string{m}
}

// bareStart reports whether a call region may also open with '{' as the
// first non-space character of the reply.
func (f Format) bareStart() bool { return f == Llama3 || f == Generic }

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomID returns n random alphanumeric characters.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// defaultID is the id generator for f: OpenAI-style "call_" + 24
// characters, or 9 characters for Mistral, whose chat templates reject a
// conversation whose tool-call ids have another length.
func (f Format) defaultID() func() string {
	if f == Mistral || f == MistralArgs {
		return func() string { return randomID(mistralIDLength) }
	}
	return func() string { return "call_" + randomID(24) }
}
