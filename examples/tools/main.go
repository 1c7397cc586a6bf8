// Command tools is docs/tools.md's example of structured outputs and tool
// calling with openai-go: a reply that must follow a JSON Schema, parsed
// into a Go struct, then a streamed, forced tool call that the SDK's
// accumulator assembles.
//
//	go run ./examples/tools -url http://127.0.0.1:8080/v1 -model rill-tiny
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Event is the structured output the first request asks for.
type Event struct {
	Title   string `json:"title"`
	Kind    string `json:"kind"`
	Minutes int    `json:"minutes"`
}

var eventSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"title":   map[string]any{"type": "string", "maxLength": 40},
		"kind":    map[string]any{"type": "string", "enum": []string{"meeting", "travel", "other"}},
		"minutes": map[string]any{"type": "integer", "minimum": 1, "maximum": 600},
	},
	"required":             []string{"title", "kind", "minutes"},
	"additionalProperties": false,
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/v1", "rill's /v1 base URL")
	model := flag.String("model", "rill-tiny", "model id (see GET /v1/models)")
	key := flag.String("api-key", "none", "API key, if the server was started with --api-key")
	flag.Parse()
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(*url), option.WithAPIKey(*key))

	// 1. Structured output: the reply is a JSON document valid against the
	// schema, whatever the model would rather say.
	res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    *model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Plan a meeting about the river.")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "event", Schema: eventSchema, Strict: openai.Bool(true)},
		}},
		Seed:      openai.Int(1),
		MaxTokens: openai.Int(1000),
	})
	if err != nil {
		log.Fatal(err)
	}
	var ev Event
	if err := json.Unmarshal([]byte(res.Choices[0].Message.Content), &ev); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("event: %+v (finish_reason %s, %d tokens)\n", ev, res.Choices[0].FinishReason, res.Usage.CompletionTokens)

	// 2. A forced tool call, streamed: the accumulator joins the fragments.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    *model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Oslo?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Current weather in a city."),
			Parameters: shared.FunctionParameters{
				"type":                 "object",
				"properties":           map[string]any{"city": map[string]any{"type": "string", "maxLength": 20}},
				"required":             []string{"city"},
				"additionalProperties": false,
			},
		})},
		ToolChoice:        openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		ParallelToolCalls: openai.Bool(false),
		Seed:              openai.Int(1),
		MaxTokens:         openai.Int(400),
		StreamOptions:     openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if call, ok := acc.JustFinishedToolCall(); ok {
			var args bytes.Buffer // compacted for printing: models may pretty-print
			_ = json.Compact(&args, []byte(call.Arguments))
			fmt.Printf("tool call %d: %s(%s) id %s\n", call.Index, call.Name, args.String(), call.ID)
		}
	}
	if err := stream.Err(); err != nil {
		log.Fatal(err)
	}
	msg := acc.Choices[0].Message
	fmt.Printf("finish_reason %s, %d call(s), usage: prompt %d, completion %d\n",
		acc.Choices[0].FinishReason, len(msg.ToolCalls), acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
}
