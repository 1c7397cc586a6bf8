package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/native/cpurun"
	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/internal/shared"
	"rill/service"
)

// The Messages API driven by Anthropic's official Go SDK, black-box, against
// rill on loopback with the native engine on the embedded test model (and,
// where ../shared has Qwen 3's vocabulary, a model that reasons): what
// Claude Code and the SDKs see.

const sdkKey = "sk-rill-test"

// nativeServer serves rill over a native engine on the model data (a GGUF),
// with API key sdkKey. It returns the server and the model's id.
func nativeServer(t *testing.T, data []byte) (*httptest.Server, string) {
	t.Helper()
	gf, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(gf)
	if err != nil {
		t.Fatal(err)
	}
	e, err := native.New(m, cpurun.New(cpu.Options{Threads: 1}), native.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	go e.Run(context.Background())
	ts := httptest.NewServer(service.New(service.Options{Engine: e, APIKey: sdkKey, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		ts.Close()
		_ = e.Close()
	})
	return ts, e.Models()[0].ID
}

// testModelServer serves the embedded test model.
func testModelServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	data, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	return nativeServer(t, data)
}

// reasoningServer serves the test model with Qwen 3's vocabulary and QwQ's
// template, whose generation prompt opens the thinking block, so that even
// random weights reason. It skips without ../shared.
func reasoningServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	dir, ok := shared.Find()
	if !ok {
		t.Skipf("no reasoning model: the reference folder %s (Qwen 3's vocabulary) is absent", dir)
	}
	src, err := os.ReadFile(filepath.Join(dir, "refdata/chat-templates/llamacpp-node-bundle/Qwen-QwQ-32B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := testmodel.Qwen3Vocabulary(filepath.Join(dir, "models/vocab/ggml-vocab-qwen2.gguf"), string(src))
	if err != nil {
		t.Fatal(err)
	}
	data, err := testmodel.BytesWithVocabulary(testmodel.QwenBPE(), v)
	if err != nil {
		t.Fatal(err)
	}
	return nativeServer(t, data)
}

// sdkClient is Anthropic's client for ts, with the key as x-api-key (the
// SDK's WithAPIKey) and no retries, so that an error is seen as it came.
func sdkClient(ts *httptest.Server, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(ts.URL), option.WithAPIKey(sdkKey),
		option.WithMaxRetries(0)}, opts...)...)
}

// longPrompt is a user message of well over two 16-token blocks, so that a
// repeat has blocks to read from the cache.
const longPrompt = "Tell me a story about a river that runs through a quiet valley, past mills and bridges, " +
	"under old trees and new towers, until it reaches the wide and patient sea at last."

func userText(text string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
}

// inputTotal is the whole prompt of a usage: Anthropic's three input counts.
func inputTotal(u anthropic.Usage) int64 {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// TestMessagesSDK: Messages.New and NewStreaming answer the same greedy
// request alike (the stream accumulates to the message), usage splits the
// prompt as Anthropic does (cold: written; repeated: read), count_tokens
// counts the same prompt, and the key is taken as x-api-key.
func TestMessagesSDK(t *testing.T) {
	t.Parallel()
	ts, id := testModelServer(t)
	// Greedy, so that the plain and the streamed answer are the same (this
	// SDK has no temperature field; Claude Code sends none either).
	client := sdkClient(ts, option.WithJSONSet("temperature", 0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(id),
		MaxTokens: 12,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  userText(longPrompt),
	}

	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: anthropic.Model(id), Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}})
	if err != nil {
		t.Fatalf("count_tokens: %v", err)
	}

	cold, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if cold.Type != "message" || cold.Role != "assistant" || !strings.HasPrefix(cold.ID, "msg_") || string(cold.Model) != id {
		t.Errorf("message header: %s", cold.RawJSON())
	}
	if len(cold.Content) == 0 || cold.Content[0].Type != "text" {
		t.Fatalf("content: %s", cold.RawJSON())
	}
	if cold.StopReason != anthropic.StopReasonEndTurn && cold.StopReason != anthropic.StopReasonMaxTokens {
		t.Errorf("stop_reason %q", cold.StopReason)
	}
	u := cold.Usage
	if inputTotal(u) != count.InputTokens {
		t.Errorf("usage input %d + read %d + created %d = %d, count_tokens says %d", u.InputTokens, u.CacheReadInputTokens,
			u.CacheCreationInputTokens, inputTotal(u), count.InputTokens)
	}
	// A cold prompt of P tokens leaves floor((P-1)/16) whole blocks for a
	// repeat to read (docs/design.md §3 rules 11 and 13); the test model's
	// prompts start fresh (its template has no preamble a cache keeps).
	reread := (count.InputTokens - 1) / 16 * 16
	if reread == 0 {
		t.Fatalf("prompt of %d tokens: too short for the cache checks", count.InputTokens)
	}
	if u.CacheReadInputTokens+u.CacheCreationInputTokens != reread {
		t.Errorf("cold: read %d + created %d, want the %d tokens of the prompt's whole blocks", u.CacheReadInputTokens, u.CacheCreationInputTokens, reread)
	}
	if u.OutputTokens < 1 || u.OutputTokens > 12 {
		t.Errorf("output_tokens %d, want 1..12", u.OutputTokens)
	}

	stream := client.Messages.NewStreaming(ctx, params)
	var warm anthropic.Message
	var types []string
	var start anthropic.Usage
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "message_start" {
			start = ev.Message.Usage
		}
		if err := warm.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(types) < 5 || types[0] != "message_start" || types[len(types)-2] != "message_delta" || types[len(types)-1] != "message_stop" {
		t.Errorf("event order %v", types)
	}
	if got, want := warm.Content[0].Text, cold.Content[0].Text; got != want {
		t.Errorf("streamed text %q, not the same greedy request's %q", got, want)
	}
	if warm.StopReason != cold.StopReason || warm.Usage.OutputTokens != cold.Usage.OutputTokens {
		t.Errorf("streamed stop_reason %q output %d, plain %q %d", warm.StopReason, warm.Usage.OutputTokens, cold.StopReason, cold.Usage.OutputTokens)
	}
	w := warm.Usage
	if inputTotal(w) != count.InputTokens || w.CacheReadInputTokens != reread || w.CacheCreationInputTokens != 0 {
		t.Errorf("repeat: input %d read %d created %d; want read %d, created 0, %d in all", w.InputTokens,
			w.CacheReadInputTokens, w.CacheCreationInputTokens, reread, count.InputTokens)
	}
	if start.InputTokens != w.InputTokens || start.CacheReadInputTokens != w.CacheReadInputTokens ||
		start.CacheCreationInputTokens != w.CacheCreationInputTokens || start.OutputTokens > w.OutputTokens {
		t.Errorf("message_start usage %s is not the final %s so far", start.RawJSON(), w.RawJSON())
	}
}

// weatherTool is a custom tool with a strict schema.
var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("The weather in a city."),
	InputSchema: anthropic.ToolInputSchemaParam{
		Properties:  map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
		Required:    []string{"city"},
		ExtraFields: map[string]any{"additionalProperties": false},
	},
}}

// TestMessagesSDKTools: a forced tool_use round trip. The call's input
// follows the schema, stop_reason is tool_use, and the reply sent back
// with a tool_result (is_error too) is a conversation rill continues,
// whose count_tokens matches its usage.
func TestMessagesSDKTools(t *testing.T) {
	t.Parallel()
	ts, id := testModelServer(t)
	client := sdkClient(ts)
	ctx := context.Background()
	msgs := userText("What is the weather in Oslo?")
	params := anthropic.MessageNewParams{
		Model: anthropic.Model(id), MaxTokens: 200, Messages: msgs,
		Tools:      []anthropic.ToolUnionParam{weatherTool},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "get_weather", DisableParallelToolUse: anthropic.Bool(true)}},
	}
	for _, streamed := range []bool{false, true} {
		var msg *anthropic.Message
		if streamed {
			s := client.Messages.NewStreaming(ctx, params)
			msg = &anthropic.Message{}
			for s.Next() {
				if err := msg.Accumulate(s.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
		} else {
			var err error
			if msg, err = client.Messages.New(ctx, params); err != nil {
				t.Fatalf("Messages.New: %v", err)
			}
		}
		if msg.StopReason != anthropic.StopReasonToolUse {
			t.Errorf("streamed %v: stop_reason %q, want tool_use", streamed, msg.StopReason)
		}
		var call *anthropic.ContentBlockUnion
		for i := range msg.Content {
			if msg.Content[i].Type == "tool_use" {
				call = &msg.Content[i]
			}
		}
		if call == nil {
			t.Fatalf("streamed %v: no tool_use block: %s", streamed, msg.RawJSON())
		}
		var input map[string]any
		if err := json.Unmarshal(call.Input, &input); err != nil || len(input) != 1 {
			t.Fatalf("streamed %v: input %s is not {\"city\": …}: %v", streamed, call.Input, err)
		}
		if city, ok := input["city"].(string); !ok || len([]rune(city)) > 12 || call.Name != "get_weather" || call.ID == "" {
			t.Errorf("streamed %v: call %s %s %s", streamed, call.ID, call.Name, call.Input)
		}

		turn := append(append([]anthropic.MessageParam{}, msgs...), msg.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "Sunny, 21 °C", false),
				anthropic.NewToolResultBlock(call.ID, "station offline", true)))
		// Without tools this time: the test model's template has no tool
		// syntax, and the native engine's tokenizer leaves out the tool
		// instructions it adds to such prompts, so count_tokens would miss
		// them (an engine matter, not this API's).
		next := anthropic.MessageNewParams{Model: anthropic.Model(id), MaxTokens: 8, Messages: turn}
		reply, err := client.Messages.New(ctx, next)
		if err != nil {
			t.Fatalf("streamed %v: the tool_result turn: %v", streamed, err)
		}
		count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(id), Messages: turn})
		if err != nil {
			t.Fatalf("count_tokens: %v", err)
		}
		if got := inputTotal(reply.Usage); got != count.InputTokens {
			t.Errorf("streamed %v: the tool_result turn's usage counts %d prompt tokens, count_tokens %d", streamed, got, count.InputTokens)
		}
	}
}

// TestMessagesSDKErrors: refusals reach the SDK as *anthropic.Error with
// Anthropic's status and error type.
func TestMessagesSDKErrors(t *testing.T) {
	t.Parallel()
	ts, id := testModelServer(t)
	ctx := context.Background()
	ok := anthropic.MessageNewParams{Model: anthropic.Model(id), MaxTokens: 4, Messages: userText("hi")}
	image := anthropic.MessageNewParams{Model: anthropic.Model(id), MaxTokens: 4, Messages: []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))}}
	unknown := ok
	unknown.Model = "no-such-model"
	tests := []struct {
		name   string
		client anthropic.Client
		params anthropic.MessageNewParams
		status int
		typ    string
	}{
		{"wrong key", sdkClient(ts, option.WithAPIKey("wrong")), ok, 401, "authentication_error"},
		{"unknown model", sdkClient(ts), unknown, 404, "not_found_error"},
		{"image", sdkClient(ts), image, 400, "invalid_request_error"},
		{"max_tokens 0", sdkClient(ts, option.WithJSONSet("max_tokens", 0)), ok, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		_, err := tt.client.Messages.New(ctx, tt.params)
		var ae *anthropic.Error
		if !errors.As(err, &ae) {
			t.Errorf("%s: error %v, want an *anthropic.Error", tt.name, err)
			continue
		}
		if ae.StatusCode != tt.status || string(ae.Type()) != tt.typ || ae.Message == "" {
			t.Errorf("%s: %d %q %q, want %d %s", tt.name, ae.StatusCode, ae.Type(), ae.Message, tt.status, tt.typ)
		}
		if ae.RequestID == "" {
			t.Errorf("%s: no request id on the error", tt.name)
		}
	}
	// The Bearer token works as well as x-api-key.
	bearer := anthropic.NewClient(option.WithBaseURL(ts.URL), option.WithAuthToken(sdkKey), option.WithMaxRetries(0))
	if _, err := bearer.Messages.New(ctx, ok); err != nil {
		t.Errorf("Bearer token: %v", err)
	}
	// A request without a key is refused before its body is read, in
	// Anthropic's shape all the same.
	resp, err := http.Post(ts.URL+"/v1/messages?beta=true", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no key: %d", resp.StatusCode)
	}
}

// TestMessagesSDKThinking: a model that reasons streams its thinking block
// before the text, with a signature, and counts its tokens in
// output_tokens_details.thinking_tokens; thinking disabled leaves none.
func TestMessagesSDKThinking(t *testing.T) {
	t.Parallel()
	ts, id := reasoningServer(t)
	client := sdkClient(ts, option.WithJSONSet("temperature", 0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: anthropic.Model(id), MaxTokens: 48, Messages: userText("Why is the sky blue?"),
		Thinking: anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}}
	s := client.Messages.NewStreaming(ctx, params)
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking == "" || msg.Content[0].Signature == "" {
		t.Fatalf("the message does not open with a signed thinking block: %s", msg.RawJSON())
	}
	thinking := msg.Usage.OutputTokensDetails.ThinkingTokens
	if thinking < 1 || thinking > msg.Usage.OutputTokens {
		t.Errorf("thinking_tokens %d of output_tokens %d", thinking, msg.Usage.OutputTokens)
	}

	params.Thinking = anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}}
	off, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range off.Content {
		if b.Type == "thinking" {
			t.Errorf("thinking disabled, yet a thinking block: %s", off.RawJSON())
		}
	}
	if off.Usage.OutputTokensDetails.ThinkingTokens != 0 {
		t.Errorf("thinking disabled: thinking_tokens %d", off.Usage.OutputTokensDetails.ThinkingTokens)
	}
}

// TestMessagesSDKStopSequence: a stop sequence that ends the message is
// named: stop_reason stop_sequence and the string in stop_sequence, plain
// and streamed, and the text ends before it.
func TestMessagesSDKStopSequence(t *testing.T) {
	t.Parallel()
	ts, id := testModelServer(t)
	client := sdkClient(ts)
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: anthropic.Model(id), MaxTokens: 200, Messages: userText(longPrompt),
		StopSequences: []string{"e"}}
	// Greedy, so that the text is the same every run: the random model's
	// answer holds an "e" well before its end token.
	greedy := option.WithJSONSet("temperature", 0)
	msg, err := client.Messages.New(ctx, params, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonStopSequence || msg.StopSequence != "e" {
		t.Fatalf("stop_reason %q, stop_sequence %q; want stop_sequence, \"e\"", msg.StopReason, msg.StopSequence)
	}
	for _, b := range msg.Content {
		if strings.Contains(b.Text, "e") {
			t.Errorf("the text holds the stop sequence: %q", b.Text)
		}
	}
	stream := client.Messages.NewStreaming(ctx, params, greedy)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != anthropic.StopReasonStopSequence || acc.StopSequence != "e" {
		t.Errorf("streamed: stop_reason %q, stop_sequence %q", acc.StopReason, acc.StopSequence)
	}
}
