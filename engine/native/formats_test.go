package native

import (
	"fmt"
	"os"
	"testing"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/engine/toolcall"
	"rill/internal/shared"
)

// withTemplate returns the embedded test model with another chat template.
func withTemplate(t testing.TB, template string) *model.Model {
	return rewriteTestModel(t, template, nil)
}

// rewriteTestModel returns the embedded test model with another chat
// template and, for each id in controls, that token renamed to the text
// given and made a control token (the tensors stay as they are).
func rewriteTestModel(t testing.TB, template string, controls map[int]string) *model.Model {
	t.Helper()
	data, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, k := range f.Metadata.Keys() {
		var v any
		v, _ = f.Metadata.Value(k)
		switch k {
		case "tokenizer.chat_template":
			v = template
		case "tokenizer.ggml.tokens":
			toks, _ := f.Metadata.Strings(k)
			for id, text := range controls {
				toks[id] = text
			}
			v = toks
		case "tokenizer.ggml.token_type":
			types, _ := f.Metadata.Int32s(k)
			for id := range controls {
				types[id] = 3 // control
			}
			v = types
		}
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		tt, _ := f.Tensor(ti.Name)
		if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, tt.Data); err != nil {
			t.Fatal(err)
		}
	}
	var buf writerBuffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	mf, err := gguf.Parse(buf.b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mf)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type writerBuffer struct{ b []byte }

func (w *writerBuffer) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// TestForcedToolCallsInTemplateFormats: with the real chat templates of
// Qwen 2.5 (Hermes), Llama 3.1, Mistral Nemo and Mistral Small 3.2, the
// engine detects each model's tool-call format, forces a call in it by
// grammar, and parses it back into a call with valid arguments; with
// tool_choice auto the random model writes no call and its text comes out
// as content, the same text tool_choice none gives.
func TestForcedToolCallsInTemplateFormats(t *testing.T) {
	t.Parallel()
	weather := compileSchema(t, weatherParams)
	dir := shared.Path(t, "refdata", "chat-templates", "llamacpp-node-bundle")
	for _, tc := range []struct {
		file   string
		format toolcall.Format
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", toolcall.Hermes},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", toolcall.Llama3},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", toolcall.Mistral},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", toolcall.MistralArgs},
		{"Qwen3-Coder.jinja", toolcall.QwenXML},
		{"GLM-4.6.jinja", toolcall.GLM},
		{"GLM-4.7-Flash.jinja", toolcall.GLM47},
		{"MiniMax-M2.jinja", toolcall.MiniMax},
		{"ByteDance-Seed-OSS.jinja", toolcall.SeedOSS},
		{"deepseek-ai-DeepSeek-V3.2.jinja", toolcall.DeepSeekDSML},
		{"Kimi-K2-Instruct.jinja", toolcall.KimiK2},
		{"deepseek-ai-DeepSeek-V3.1.jinja", toolcall.DeepSeekV31},
		{"meetkai-functionary-medium-v3.1.jinja", toolcall.FunctionaryV31},
		{"meetkai-functionary-medium-v3.2.jinja", toolcall.FunctionaryV32},
		{"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", toolcall.CommandR7B},
		{"ibm-granite-granite-3.3-2B-Instruct.jinja", toolcall.Granite},
		{"fireworks-ai-llama-3-firefunction-v2.jinja", toolcall.Firefunction},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(dir + "/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			m := withTemplate(t, string(src))
			// Mistral Small's and Command R7B's templates bring long
			// system prompts.
			e, err := New(m, testCompute(t), Options{Logger: discard, ContextLength: 8192})
			if err != nil {
				m.Close()
				t.Fatal(err)
			}
			start(t, e)
			if e.toolFormat != tc.format {
				t.Fatalf("%s: detected %q, want %q", tc.file, e.toolFormat, tc.format)
			}
			id := e.Models()[0].ID
			for _, temp := range []float64{0, 1} {
				parallel := temp == 1
				req := &engine.Request{Model: id, Messages: userTurn("What is the weather in Paris?"), MaxTokens: 600, N: 2,
					Tools: testTools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"},
					ParallelToolCalls: &parallel, Sampling: engine.Sampling{Temperature: temp, Seed: seed(31)}}
				for c, r := range collectTools(t, e, req) {
					what := fmt.Sprintf("%s T=%v choice %d", tc.format, temp, c)
					complete := r.calls
					if r.final.FinishReason == engine.FinishLength && parallel && len(r.calls) > 1 {
						complete = r.calls[:len(r.calls)-1]
					} else if r.final.FinishReason != engine.FinishToolCalls || len(r.calls) == 0 {
						t.Fatalf("%s: finish %q, %d calls, content %q", what, r.final.FinishReason, len(r.calls), r.content)
					}
					if r.content != "" {
						t.Fatalf("%s: content %q", what, r.content)
					}
					for _, call := range complete {
						if call.Name != "get_weather" {
							t.Fatalf("%s: call of %q", what, call.Name)
						}
						validate(t, weather, call.Arguments)
					}
					t.Logf("%s: %d calls, first %s", what, len(r.calls), call0(r.calls))
				}
			}
			free := engine.Request{Model: id, Messages: userTurn("Hello."), MaxTokens: 40, Tools: testTools,
				Sampling: engine.Sampling{Temperature: 0}}
			auto := collectTools(t, e, &free)[0]
			free.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceNone}
			none := collectTools(t, e, &free)[0]
			if len(auto.calls) != 0 || auto.content != none.content || auto.content == "" {
				t.Fatalf("auto: %d calls, content %q; none: content %q", len(auto.calls), auto.content, none.content)
			}
		})
	}
}

func call0(calls []toolcall.Call) string {
	if len(calls) == 0 {
		return ""
	}
	return calls[0].Name + " " + calls[0].Arguments
}

// TestToolMarkerControlTokens: where the vocabulary makes <tool_call> and
// </tool_call> control tokens (which decode as nothing), a choice that
// reads tool calls sees them as their text, and the grammar may use them as
// single tokens: biased towards them, the random model opens its forced
// call with the control token, and the call still parses.
func TestToolMarkerControlTokens(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(shared.Path(t, "refdata", "chat-templates", "llamacpp-node-bundle", "Qwen-Qwen2.5-7B-Instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	const open, closing = 510, 511
	m := rewriteTestModel(t, string(src), map[int]string{open: "<tool_call>", closing: "</tool_call>"})
	e, err := New(m, testCompute(t), Options{Logger: discard})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	start(t, e)
	if e.markers[open] != "<tool_call>" || e.markers[closing] != "</tool_call>" || len(e.tok.Piece(open)) != 0 {
		t.Fatalf("markers %v", e.markers)
	}
	id := e.Models()[0].ID
	parallel := false
	req := &engine.Request{Model: id, Messages: userTurn("Weather in Rome?"), MaxTokens: 600, Logprobs: true,
		Tools: testTools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}, ParallelToolCalls: &parallel,
		LogitBias: map[int]float64{open: 100, closing: 100}}
	r := collectTools(t, e, req)[0]
	if r.final.FinishReason != engine.FinishToolCalls || len(r.calls) != 1 || r.content != "" {
		t.Fatalf("finish %q, calls %+v, content %q", r.final.FinishReason, r.calls, r.content)
	}
	pieces := collectPieces(t, e, req)
	if pieces[0] != "" {
		t.Fatalf("the first token is %q, not the <tool_call> control token (whose piece is empty)", pieces[0])
	}
}
