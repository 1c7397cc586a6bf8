// Command stream is the README's openai-go example: it streams a chat
// completion from rill with include_usage and prints the text, then the
// usage the server reported.
//
//	go run ./examples/stream -url http://127.0.0.1:8080/v1 -model rill-tiny
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/v1", "rill's /v1 base URL")
	model := flag.String("model", "rill-tiny", "model id (see GET /v1/models)")
	key := flag.String("api-key", "none", "API key, if the server was started with --api-key")
	flag.Parse()

	client := openai.NewClient(option.WithBaseURL(*url), option.WithAPIKey(*key))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         *model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the river.")},
		MaxTokens:     openai.Int(48),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 {
			fmt.Print(chunk.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		log.Fatal(err)
	}
	u := acc.Usage
	fmt.Printf("\n\nprompt %d (cached %d), completion %d, total %d tokens\n",
		u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens, u.TotalTokens)
}
