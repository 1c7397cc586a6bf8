package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/engine/tokenizer"
	"rill/service"
)

// The acceptance checks, with the official openai-go client against
// a real loopback rill on the embedded random test model, which cannot
// "want" a tool call or JSON: only the grammar makes these pass. Each runs
// three times: without drafting, with n-gram drafting and with the
// embedded draft model.

// eventSchema is the structured output the checks ask for.
var eventSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"title":   map[string]any{"type": "string", "maxLength": 40},
		"kind":    map[string]any{"type": "string", "enum": []any{"meeting", "travel", "other"}},
		"minutes": map[string]any{"type": "integer", "minimum": 1, "maximum": 600},
		"online":  map[string]any{"type": "boolean"},
		"people":  map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 12}, "maxItems": 3},
	},
	"required":             []any{"title", "kind", "minutes", "online", "people"},
	"additionalProperties": false,
}

var weatherParams = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 20},
		"unit": map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
	},
	"required":             []any{"city", "unit"},
	"additionalProperties": false,
}

var testTools = []openai.ChatCompletionToolUnionParam{
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Current weather in a city."),
		Parameters: weatherParams, Strict: openai.Bool(true),
	}),
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "add", Description: openai.String("Adds two integers."),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{
			"a": map[string]any{"type": "integer"}, "b": map[string]any{"type": "integer"}},
			"required": []any{"a", "b"}, "additionalProperties": false},
	}),
}

// schemaOf compiles a JSON Schema given as Go values.
func schemaOf(t *testing.T, schema map[string]any) *jsonschema.Schema {
	t.Helper()
	raw, _ := json.Marshal(schema)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustValidate checks that text is one JSON document valid against s.
func mustValidate(t *testing.T, s *jsonschema.Schema, text, what string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: not JSON (%v): %q", what, err, text)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%s: not valid against the schema (%v): %q", what, err, text)
	}
}

// toolsServer is a loopback rill on the embedded model with serve's flags
// args, and an openai-go client for it.
type toolsServer struct {
	url    string
	client openai.Client
	tok    *tokenizer.Tokenizer
}

func startToolsServer(t *testing.T, args ...string) *toolsServer {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	e := startFlags(t, log, args...)
	ts := httptest.NewServer(service.New(service.Options{Engine: e, Logger: log}))
	t.Cleanup(ts.Close)
	return &toolsServer{
		url:    ts.URL,
		client: openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0)),
		tok:    e.Natives()[0].Tokenizer(),
	}
}

// drafting are the three ways the checks run.
var drafting = []struct {
	name string
	args []string
}{
	{"plain", nil},
	{"ngram", []string{"--spec", "ngram"}},
	{"draft model", []string{"--draft-model", "embedded"}},
}

func userMessage(s string) []openai.ChatCompletionMessageParamUnion {
	return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)}
}

func TestStructuredOutputsWithOpenAIClient(t *testing.T) {
	t.Parallel()
	schema := schemaOf(t, eventSchema)
	object := schemaOf(t, map[string]any{"type": "object"})
	for _, d := range drafting {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			s := startToolsServer(t, d.args...)
			ctx := context.Background()
			rf := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "event", Schema: eventSchema, Strict: openai.Bool(true)}}}

			// Strict json_schema at T=0 and T=1, three choices with a seed:
			// valid every time, and the same seed gives the same choices.
			for _, temp := range []float64{0, 1} {
				p := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("Plan a meeting about the river."),
					ResponseFormat: rf, Temperature: openai.Float(temp), Seed: openai.Int(42), N: openai.Int(3), MaxTokens: openai.Int(2000)}
				res, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				again, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				for i, c := range res.Choices {
					what := fmt.Sprintf("json_schema T=%v choice %d", temp, i)
					if c.FinishReason != "stop" {
						t.Fatalf("%s: finish %q: %q", what, c.FinishReason, c.Message.Content)
					}
					mustValidate(t, schema, c.Message.Content, what)
					if again.Choices[i].Message.Content != c.Message.Content {
						t.Fatalf("%s: the same seed gave %q, then %q", what, c.Message.Content, again.Choices[i].Message.Content)
					}
				}
				if res.Usage.CompletionTokens == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
					t.Fatalf("usage %+v", res.Usage)
				}
			}

			// json_object.
			res, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "rill-tiny",
				Messages:       userMessage("Describe the fox as JSON."),
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
				Temperature:    openai.Float(1), Seed: openai.Int(3), MaxTokens: openai.Int(1000)})
			if err != nil {
				t.Fatal(err)
			}
			mustValidate(t, object, res.Choices[0].Message.Content, "json_object")

			// response_format on the legacy completions endpoint (vLLM's
			// extension, which openai-go has no field for).
			comp, err := s.client.Completions.New(ctx, openai.CompletionNewParams{
				Model:     openai.CompletionNewParamsModel("rill-tiny"),
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("An event as JSON:")},
				MaxTokens: openai.Int(2000), Seed: openai.Int(5),
			}, option.WithJSONSet("response_format", map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "event", "schema": eventSchema}}))
			if err != nil {
				t.Fatal(err)
			}
			mustValidate(t, schema, comp.Choices[0].Text, "completions json_schema")

			// A streamed schema with usage: the accumulated content is valid
			// and the usage chunk matches the non-streamed request's.
			p := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("Plan a trip."), ResponseFormat: rf,
				Temperature: openai.Float(0), MaxTokens: openai.Int(2000),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
			stream := s.client.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				if !acc.AddChunk(stream.Current()) {
					t.Fatalf("the accumulator refused %s", stream.Current().RawJSON())
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			mustValidate(t, schema, acc.Choices[0].Message.Content, "streamed json_schema")
			whole, err := s.client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if whole.Choices[0].Message.Content != acc.Choices[0].Message.Content ||
				whole.Usage.CompletionTokens != acc.Usage.CompletionTokens || whole.Usage.PromptTokens != acc.Usage.PromptTokens {
				t.Fatalf("streamed %q with usage %+v; not streamed %q with %+v", acc.Choices[0].Message.Content, acc.Usage,
					whole.Choices[0].Message.Content, whole.Usage)
			}
			details := acc.Usage.CompletionTokensDetails
			t.Logf("%s: streamed schema of %d tokens, %d draft tokens accepted, %d rejected", d.name,
				acc.Usage.CompletionTokens, details.AcceptedPredictionTokens, details.RejectedPredictionTokens)
			if d.name == "draft model" && details.AcceptedPredictionTokens+details.RejectedPredictionTokens == 0 {
				t.Fatal("the draft model drafted nothing under the grammar")
			}
		})
	}
}

func TestToolCallsWithOpenAIClient(t *testing.T) {
	t.Parallel()
	weather := schemaOf(t, weatherParams)
	for _, d := range drafting {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			s := startToolsServer(t, d.args...)
			ctx := context.Background()
			for _, tc := range []struct {
				name   string
				choice openai.ChatCompletionToolChoiceOptionUnionParam
			}{
				{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}},
				{"named", openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
					Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}}}},
			} {
				for _, temp := range []float64{0, 1} {
					what := fmt.Sprintf("%s T=%v", tc.name, temp)
					p := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("What is the weather in Paris?"),
						Tools: testTools, ToolChoice: tc.choice, ParallelToolCalls: openai.Bool(false),
						Temperature: openai.Float(temp), Seed: openai.Int(9), MaxTokens: openai.Int(800),
						StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
					stream := s.client.Chat.Completions.NewStreaming(ctx, p)
					var acc openai.ChatCompletionAccumulator
					finished := 0
					for stream.Next() {
						if !acc.AddChunk(stream.Current()) {
							t.Fatalf("%s: the accumulator refused %s", what, stream.Current().RawJSON())
						}
						if _, ok := acc.JustFinishedToolCall(); ok {
							finished++
						}
					}
					if err := stream.Err(); err != nil {
						t.Fatal(err)
					}
					whole, err := s.client.Chat.Completions.New(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					for name, c := range map[string]openai.ChatCompletionChoice{"streamed": acc.Choices[0], "not streamed": whole.Choices[0]} {
						calls := c.Message.ToolCalls
						if c.FinishReason != "tool_calls" || len(calls) != 1 || c.Message.Content != "" {
							t.Fatalf("%s %s: finish %q, %d calls, content %q", what, name, c.FinishReason, len(calls), c.Message.Content)
						}
						call := calls[0]
						if call.Function.Name != "get_weather" && (tc.name == "named" || call.Function.Name != "add") {
							t.Fatalf("%s %s: call of %q", what, name, call.Function.Name)
						}
						if call.Function.Name == "get_weather" {
							mustValidate(t, weather, call.Function.Arguments, what+" "+name)
						}
						if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
							t.Fatalf("%s %s: id %q type %q", what, name, call.ID, call.Type)
						}
					}
					sc, wc := acc.Choices[0].Message.ToolCalls[0], whole.Choices[0].Message.ToolCalls[0]
					if sc.Function.Name != wc.Function.Name || sc.Function.Arguments != wc.Function.Arguments {
						t.Fatalf("%s: streamed call %+v, not streamed %+v", what, sc.Function, wc.Function)
					}
					// One call: the accumulator must see it finish exactly once,
					// at either temperature.
					if finished != 1 {
						t.Errorf("%s: JustFinishedToolCall fired %d times", what, finished)
					}
					if acc.Usage.CompletionTokens != whole.Usage.CompletionTokens || acc.Usage.PromptTokens != whole.Usage.PromptTokens {
						t.Fatalf("%s: streamed usage %+v, not streamed %+v", what, acc.Usage, whole.Usage)
					}
				}
			}

			// An agent loop: the call, its result, and the next turn.
			t.Run("tool result in history", func(t *testing.T) { agentTurn(t, s) })
		})
	}
}

// agentTurn runs one turn of an agent loop: a forced call, its result
// appended to the history as the SDK writes it, and the next reply.
func agentTurn(t *testing.T, s *toolsServer) {
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("Weather in Oslo?"), Tools: testTools,
		ToolChoice:        openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		ParallelToolCalls: openai.Bool(false), Temperature: openai.Float(0), MaxTokens: openai.Int(800)}
	first, err := s.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	msg := first.Choices[0].Message
	p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage(`{"temperature": -3}`, msg.ToolCalls[0].ID))
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	next, err := s.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fr := next.Choices[0].FinishReason; fr != "stop" && fr != "tool_calls" && fr != "length" {
		t.Fatalf("the turn after a tool result finished with %q", fr)
	}
	if next.Usage.PromptTokens <= first.Usage.PromptTokens {
		t.Fatalf("the history with the call and its result has %d prompt tokens, the first turn %d", next.Usage.PromptTokens, first.Usage.PromptTokens)
	}
}

// tokenIDs returns the token ids of text as it continues a reply (no
// space prefix, no BOS), from the model's tokenizer.
func (s *toolsServer) tokenIDs(text string) []int {
	return s.tok.Encode(text, tokenizer.EncodeOptions{Continuation: true})
}

// tokenizeIDs returns what the server's /tokenize says of text, or ok false
// when it has no such endpoint (404).
func (s *toolsServer) tokenizeIDs(t *testing.T, text string) (ids []int, ok bool) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "rill-tiny", "prompt": text, "add_special_tokens": false})
	resp, err := http.Post(s.url+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, false
	}
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/tokenize answered %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("/tokenize: %v", err)
	}
	return out.Tokens, true
}

func TestLogitBiasWithOpenAIClient(t *testing.T) {
	t.Parallel()
	for _, d := range drafting {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			s := startToolsServer(t, d.args...)
			ctx := context.Background()
			base := openai.ChatCompletionNewParams{Model: "rill-tiny", Messages: userMessage("Tell me about the river."),
				Temperature: openai.Float(0), MaxTokens: openai.Int(24), Logprobs: openai.Bool(true)}
			free, err := s.client.Chat.Completions.New(ctx, base)
			if err != nil {
				t.Fatal(err)
			}
			// Ban the first word greedy decoding says; force one it never
			// says. Both are single tokens with pieces of several letters.
			first := free.Choices[0].Logprobs.Content[0].Token
			banned := s.tokenIDs(first)
			river := s.tokenIDs(" river")
			if len(banned) != 1 || len(river) != 1 {
				t.Fatalf("%q is %v and \" river\" %v: want one token each", first, banned, river)
			}
			for _, temp := range []float64{0, 1} {
				p := base
				p.Temperature, p.Seed = openai.Float(temp), openai.Int(4)
				p.LogitBias = map[string]int64{fmt.Sprint(banned[0]): -100}
				res, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				for _, lp := range res.Choices[0].Logprobs.Content {
					if lp.Token == first {
						t.Fatalf("T=%v: the banned token %q was generated: %q", temp, first, res.Choices[0].Message.Content)
					}
				}
				p.LogitBias = map[string]int64{fmt.Sprint(river[0]): 100}
				res, err = s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if want := strings.Repeat(" river", 24); res.Choices[0].Message.Content != want {
					t.Fatalf("T=%v: forced %q, got %q", temp, " river", res.Choices[0].Message.Content)
				}
			}
			// What a client does: ids from the server's /tokenize. Forcing
			// the last token of a word makes every token that one.
			t.Run("ids from /tokenize", func(t *testing.T) {
				ids, ok := s.tokenizeIDs(t, "river")
				if !ok {
					t.Fatal("the server has no /tokenize")
				}
				if len(ids) == 0 {
					t.Fatal("/tokenize gave no ids for \"river\"")
				}
				p := base
				p.LogitBias = map[string]int64{fmt.Sprint(ids[len(ids)-1]): 100}
				res, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				lps := res.Choices[0].Logprobs.Content
				for _, lp := range lps {
					if lp.Token != lps[0].Token || lp.Token == "" {
						t.Fatalf("forcing id %d from /tokenize gave %q", ids[len(ids)-1], res.Choices[0].Message.Content)
					}
				}
			})

			p := base
			p.LogitBias = map[string]int64{"600": 1}
			_, err = s.client.Chat.Completions.New(ctx, p)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "logit_bias" || !strings.Contains(apiErr.Message, "512") {
				t.Fatalf("an id past the vocabulary: %v", err)
			}
		})
	}
}
