package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/native/cpurun"
	"rill/engine/testmodel"
	"rill/internal/shared"
	"rill/service"
)

// End to end over loopback HTTP, with the official client, on a model with
// a real byte-level BPE vocabulary and real chat templates: Qwen 3's
// tokenizer (testmodel.Qwen3Vocabulary, from ../shared) on tiny random
// weights. The prompts are checked against llama.cpp's for the same
// requests (testdata/peer/llamacpp_chat_prompts.json, recorded by
// scripts/peer/chatprompt.mjs); the reasoning split and counts through the
// wire.

// serveQwen serves the real-vocabulary test model with the chat template of
// the named file of ../shared/refdata/chat-templates/llamacpp-node-bundle,
// and returns the server's base URL and the model id.
func serveQwen(t *testing.T, template string) (string, string) {
	t.Helper()
	src, err := os.ReadFile(shared.Path(t, "refdata", "chat-templates", "llamacpp-node-bundle", template))
	if err != nil {
		t.Fatal(err)
	}
	v, err := testmodel.Qwen3Vocabulary(shared.Path(t, "models", "vocab", "ggml-vocab-qwen2.gguf"), string(src))
	if err != nil {
		t.Fatal(err)
	}
	data, err := testmodel.BytesWithVocabulary(testmodel.QwenBPE(), v)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	compute := cpurun.New(cpu.Options{})
	e, err := native.New(m, compute, native.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		compute.Close()
		m.Close()
		t.Fatal(err)
	}
	go e.Run(context.Background())
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		ts.Close()
		e.Close()
	})
	return ts.URL, e.Models()[0].ID
}

// postDecode posts body to url and decodes a 200 answer into out.
func postDecode(t *testing.T, url string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, data)
	}
}

// peerCase is one recorded chat request with llama.cpp's prompt ids.
type peerCase struct {
	Name    string `json:"name"`
	Request struct {
		Messages           []json.RawMessage `json:"messages"`
		Tools              json.RawMessage   `json:"tools"`
		ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	} `json:"request"`
	Prompt       string `json:"prompt"`
	IDs          []int  `json:"ids"`
	IDsUserPlain []int  `json:"ids_user_plain"`
}

type tokenized struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// TestBPEChatPromptsMatchLlamaCpp: for every recorded request, rill's
// /tokenize gives llama.cpp's prompt ids (for user text that spells special
// tokens, the ids with that text as plain text: llama-server turns it into
// control tokens, rill does not), /detokenize reads them back to the
// rendered prompt, and a chat completion through openai-go reports that
// many prompt_tokens.
func TestBPEChatPromptsMatchLlamaCpp(t *testing.T) {
	t.Parallel()
	url, id := serveQwen(t, "Qwen-Qwen3-0.6B.jinja")
	// The recording is in the repository's testdata, where the script that
	// writes it, run from the repository root, puts it.
	raw, err := os.ReadFile("../testdata/peer/llamacpp_chat_prompts.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Cases []peerCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"))
	matched, plain := 0, 0
	for _, c := range rec.Cases {
		want := c.IDs
		if c.IDsUserPlain != nil {
			want = c.IDsUserPlain
			if slices.Equal(c.IDs, c.IDsUserPlain) {
				t.Errorf("%s: the recording's user text forges nothing; the case proves nothing", c.Name)
			}
		}
		body := map[string]any{"model": id, "messages": c.Request.Messages}
		if c.Request.Tools != nil {
			body["tools"] = c.Request.Tools
		}
		if c.Request.ChatTemplateKwargs != nil {
			body["chat_template_kwargs"] = c.Request.ChatTemplateKwargs
		}
		var got tokenized
		postDecode(t, url+"/tokenize", body, &got)
		if !slices.Equal(got.Tokens, want) || got.Count != len(want) {
			t.Errorf("%s: rill's prompt ids\n%v\nllama.cpp's\n%v", c.Name, got.Tokens, want)
			continue
		}
		matched++
		if c.IDsUserPlain != nil {
			plain++
		}
		var text struct {
			Prompt string `json:"prompt"`
		}
		postDecode(t, url+"/detokenize", map[string]any{"model": id, "tokens": got.Tokens}, &text)
		if text.Prompt != c.Prompt {
			t.Errorf("%s: detokenized %q, rendered %q", c.Name, text.Prompt, c.Prompt)
		}

		// The same request as a chat completion through openai-go.
		opts := []option.RequestOption{option.WithJSONSet("messages", c.Request.Messages)}
		if c.Request.Tools != nil {
			opts = append(opts, option.WithJSONSet("tools", c.Request.Tools))
		}
		if c.Request.ChatTemplateKwargs != nil {
			opts = append(opts, option.WithJSONSet("chat_template_kwargs", c.Request.ChatTemplateKwargs))
		}
		resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: id, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("overridden")},
			MaxCompletionTokens: openai.Int(2),
		}, opts...)
		if err != nil {
			t.Fatalf("%s: chat completion: %v", c.Name, err)
		}
		if resp.Usage.PromptTokens != int64(len(want)) {
			t.Errorf("%s: prompt_tokens %d, want %d", c.Name, resp.Usage.PromptTokens, len(want))
		}
	}
	if matched != len(rec.Cases) || plain == 0 {
		t.Errorf("%d of %d cases match llama.cpp (%d with plain user text)", matched, len(rec.Cases), plain)
	}
}

// TestBPEToolHistoryWithClient: openai-go's own types for an agent loop's
// history (an assistant turn with tool calls and no content, tool results)
// reach the template: the prompt is the one /tokenize gives for the same
// messages in wire JSON.
func TestBPEToolHistoryWithClient(t *testing.T) {
	t.Parallel()
	url, id := serveQwen(t, "Qwen-Qwen3-0.6B.jinja")
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"))
	call := openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
		ID: "call_1", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	asst := openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{call}}
	asst.SetExtraFields(map[string]any{"reasoning_content": "I should look it up."})
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are helpful."),
		openai.UserMessage("What is the weather in Paris?"),
		{OfAssistant: &asst},
		openai.ToolMessage("sunny, 21 C", "call_1"),
	}
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: id, Messages: msgs, MaxCompletionTokens: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	wire := []map[string]any{
		{"role": "system", "content": "You are helpful."},
		{"role": "user", "content": "What is the weather in Paris?"},
		{"role": "assistant", "content": nil, "reasoning_content": "I should look it up.", "tool_calls": []any{
			map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
	}
	var tok tokenized
	postDecode(t, url+"/tokenize", map[string]any{"model": id, "messages": wire}, &tok)
	var text struct {
		Prompt string `json:"prompt"`
	}
	postDecode(t, url+"/detokenize", map[string]any{"model": id, "tokens": tok.Tokens}, &text)
	for _, part := range []string{"<think>\nI should look it up.\n</think>", `{"name": "get_weather", "arguments": {"city": "Paris"}}`, "<tool_response>\nsunny, 21 C\n</tool_response>"} {
		if !strings.Contains(text.Prompt, part) {
			t.Errorf("prompt lacks %q:\n%s", part, text.Prompt)
		}
	}
	if resp.Usage.PromptTokens != int64(tok.Count) {
		t.Errorf("prompt_tokens %d through openai-go, %d through /tokenize", resp.Usage.PromptTokens, tok.Count)
	}
}

// reasoningOf reads a delta's or message's reasoning_content, which
// openai-go keeps among its extra fields.
func reasoningOf(extra map[string]interface{ Raw() string }) string {
	f, ok := extra["reasoning_content"]
	if !ok {
		return ""
	}
	var s string
	_ = json.Unmarshal([]byte(f.Raw()), &s)
	return s
}

// TestBPEReasoningOverHTTP: on a template that opens the thinking block
// (QwQ's), a streamed chat of two sampled choices sends reasoning_content
// apart from content; reasoning and answer add up to the raw text of the
// same tokens as a completion (a random model may never close the block);
// reasoning_tokens is part of completion_tokens and summed over choices;
// non-streamed responses carry message.reasoning_content; thinking off
// counts 0; legacy completions have no details.
func TestBPEReasoningOverHTTP(t *testing.T) {
	t.Parallel()
	url, id := serveQwen(t, "Qwen-QwQ-32B.jinja")
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: id, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Why is the sky blue?")},
		MaxCompletionTokens: openai.Int(20), N: openai.Int(2), Seed: openai.Int(5), Temperature: openai.Float(1),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	reasoning, content := make([]strings.Builder, 2), make([]strings.Builder, 2)
	var usage openai.CompletionUsage
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			extra := map[string]interface{ Raw() string }{}
			for k, v := range ch.Delta.JSON.ExtraFields {
				extra[k] = v
			}
			reasoning[ch.Index].WriteString(reasoningOf(extra))
			content[ch.Index].WriteString(ch.Delta.Content)
		}
		if len(chunk.Choices) == 0 {
			usage = chunk.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}

	// The same prompt tokens as a legacy completion: the raw text.
	var tok tokenized
	postDecode(t, url+"/tokenize", map[string]any{"model": id, "messages": []map[string]any{{"role": "user", "content": "Why is the sky blue?"}}}, &tok)
	prompt := make([]int64, len(tok.Tokens))
	for i, x := range tok.Tokens {
		prompt[i] = int64(x)
	}
	raw, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(id), Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: prompt},
		MaxTokens: openai.Int(20), N: openai.Int(2), Seed: openai.Int(5), Temperature: openai.Float(1)})
	if err != nil {
		t.Fatal(err)
	}
	if raw.Usage.CompletionTokensDetails.JSON.ReasoningTokens.Valid() {
		t.Errorf("a legacy completion reports reasoning_tokens: %s", raw.Usage.RawJSON())
	}
	anyClosed := false
	for _, ch := range raw.Choices {
		i := ch.Index
		r, a := reasoning[i].String(), content[i].String()
		want := r + a
		if closed := strings.Contains(ch.Text, "</think>"); closed {
			want, anyClosed = r+"</think>"+a, true
		} else if a != "" {
			t.Errorf("choice %d never closed its block but answered %q", i, a)
		}
		if ch.Text != want || r == "" {
			t.Errorf("choice %d: raw %q; reasoning %q, content %q", i, ch.Text, r, a)
		}
	}
	d := usage.CompletionTokensDetails
	if !d.JSON.ReasoningTokens.Valid() || d.ReasoningTokens > usage.CompletionTokens || usage.CompletionTokens != raw.Usage.CompletionTokens {
		t.Fatalf("usage %s; the completion's %s", usage.RawJSON(), raw.Usage.RawJSON())
	}
	if !anyClosed && d.ReasoningTokens != usage.CompletionTokens {
		t.Errorf("no choice closed its block, yet %d of %d tokens count as reasoning", d.ReasoningTokens, usage.CompletionTokens)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range resp.Choices {
		extra := map[string]interface{ Raw() string }{}
		for k, v := range ch.Message.JSON.ExtraFields {
			extra[k] = v
		}
		if got := reasoningOf(extra); got != reasoning[ch.Index].String() {
			t.Errorf("choice %d: message.reasoning_content %q, streamed %q", ch.Index, got, reasoning[ch.Index].String())
		}
	}
	if resp.Usage.CompletionTokensDetails.ReasoningTokens != d.ReasoningTokens {
		t.Errorf("non-streamed reasoning_tokens %d, streamed %d", resp.Usage.CompletionTokensDetails.ReasoningTokens, d.ReasoningTokens)
	}

	off, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
	if err != nil {
		t.Fatal(err)
	}
	od := off.Usage.CompletionTokensDetails
	if !od.JSON.ReasoningTokens.Valid() || od.ReasoningTokens != 0 {
		t.Errorf("thinking off: usage %s, want reasoning_tokens 0", off.Usage.RawJSON())
	}
	for _, ch := range off.Choices {
		if _, ok := ch.Message.JSON.ExtraFields["reasoning_content"]; ok || ch.Message.Content == "" {
			t.Errorf("thinking off, choice %d: %s", ch.Index, ch.Message.RawJSON())
		}
	}
}

// TestServeTokenize: `rill serve`'s engine answers /tokenize and
// /detokenize (the embedded model, as served), with the count a chat
// completion reports as prompt_tokens.
func TestServeTokenize(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log)
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	defer ts.Close()
	msgs := []map[string]any{{"role": "user", "content": "Tell me about the river."}}
	var tok tokenized
	postDecode(t, ts.URL+"/tokenize", map[string]any{"model": "rill-tiny", "messages": msgs}, &tok)
	var chat struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	postDecode(t, ts.URL+"/v1/chat/completions", map[string]any{"model": "rill-tiny", "messages": msgs, "max_tokens": 1}, &chat)
	if tok.Count == 0 || tok.Count != len(tok.Tokens) || tok.Count != chat.Usage.PromptTokens || tok.MaxModelLen != 2048 {
		t.Errorf("tokenize %+v; the chat's prompt_tokens %d", tok, chat.Usage.PromptTokens)
	}
	var text struct {
		Prompt string `json:"prompt"`
	}
	postDecode(t, ts.URL+"/detokenize", map[string]any{"model": "rill-tiny", "tokens": tok.Tokens}, &text)
	if !strings.Contains(text.Prompt, "<|im_start|>") || !strings.Contains(text.Prompt, "Tell me about the river.") {
		t.Errorf("detokenized %q", text.Prompt)
	}
}
