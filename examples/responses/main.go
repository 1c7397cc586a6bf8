// Command responses is docs/responses.md's example of tools and structured
// outputs on the Responses API with openai-go: a forced function call,
// its output sent back by previous_response_id, then a reply held to a
// JSON Schema by text.format.
//
//	go run ./examples/responses -url http://127.0.0.1:8080/v1 -model rill-tiny
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
	"github.com/openai/openai-go/v3/responses"
)

var weatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:        "get_weather",
	Description: openai.String("Current weather in a city."),
	Parameters: map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"city": map[string]any{"type": "string", "maxLength": 20}},
		"required":             []string{"city"},
		"additionalProperties": false,
	},
	Strict: openai.Bool(true),
}}

var taskSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"title":    map[string]any{"type": "string", "maxLength": 30},
		"priority": map[string]any{"type": "integer", "minimum": 1, "maximum": 5},
	},
	"required":             []string{"title", "priority"},
	"additionalProperties": false,
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/v1", "rill's /v1 base URL")
	model := flag.String("model", "rill-tiny", "model id (see GET /v1/models)")
	key := flag.String("api-key", "none", "API key, if the server was started with --api-key")
	flag.Parse()
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(*url), option.WithAPIKey(*key))

	// 1. A forced call: the output is one function_call item.
	res, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:      *model,
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Oslo?")},
		Tools:      []responses.ToolUnionParam{weatherTool},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
	})
	if err != nil {
		log.Fatal(err)
	}
	call := res.Output[0].AsFunctionCall()
	fmt.Printf("%s: %s(%s) call_id %s, status %s, usage: input %d, output %d\n",
		call.Type, call.Name, compact(call.Arguments), call.CallID, res.Status, res.Usage.InputTokens, res.Usage.OutputTokens)

	// 2. Its output, continuing the stored conversation.
	next, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              *model,
		PreviousResponseID: openai.String(res.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(`{"celsius": -3}`)},
			}},
		}},
		Tools:           []responses.ToolUnionParam{weatherTool},
		MaxOutputTokens: openai.Int(60),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("next turn: %d output item(s), the first a %s, status %s, usage: input %d (cached %d)\n",
		len(next.Output), next.Output[0].Type, next.Status, next.Usage.InputTokens, next.Usage.InputTokensDetails.CachedTokens)

	// 3. Structured output: the text is a document valid against the schema.
	task, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: *model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Make a task about the river.")},
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "task", Schema: taskSchema, Strict: openai.Bool(true)},
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("task: %s (status %s)\n", compact(task.OutputText()), task.Status)
}

// compact drops the space between JSON tokens, for printing: models may
// pretty-print, and the random test model spreads whitespace around.
func compact(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
