package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/conformance"
)

// The official openai-go client must parse every stream, and what it adds
// up must be the usage the raw JSON says (no double counting).

// capture keeps a copy of every response body the client reads.
type capture struct {
	mu     sync.Mutex
	bodies []*bytes.Buffer
}

func (c *capture) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil || resp == nil {
		return resp, err
	}
	buf := &bytes.Buffer{}
	c.mu.Lock()
	c.bodies = append(c.bodies, buf)
	c.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, buf), resp.Body}
	return resp, nil
}

// last returns the last body read, whole once the client finished with it.
func (c *capture) last() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	Expect(c.bodies).NotTo(BeEmpty(), "the client sent no request")
	return c.bodies[len(c.bodies)-1].Bytes()
}

func newClient(t *target, c *capture) openai.Client {
	key := t.APIKey
	if key == "" {
		key = "none" // the client insists on one; rill without --api-key ignores it
	}
	return openai.NewClient(option.WithBaseURL(t.BaseURL+"/v1"), option.WithAPIKey(key),
		option.WithMiddleware(c.middleware), option.WithMaxRetries(0))
}

// expectSameUsage compares the client's usage with the raw one.
func expectSameUsage(got openai.CompletionUsage, raw *conformance.Usage, what string) {
	GinkgoHelper()
	deref := func(p *int) int64 {
		if p == nil {
			return 0
		}
		return int64(*p)
	}
	want := map[string]int64{
		"prompt_tokens": int64(raw.PromptTokens), "completion_tokens": int64(raw.CompletionTokens),
		"total_tokens": int64(raw.TotalTokens), "cached_tokens": deref(raw.CachedTokens),
		"accepted_prediction_tokens": deref(raw.AcceptedPredictionTokens),
		"rejected_prediction_tokens": deref(raw.RejectedPredictionTokens),
	}
	have := map[string]int64{
		"prompt_tokens": got.PromptTokens, "completion_tokens": got.CompletionTokens,
		"total_tokens": got.TotalTokens, "cached_tokens": got.PromptTokensDetails.CachedTokens,
		"accepted_prediction_tokens": got.CompletionTokensDetails.AcceptedPredictionTokens,
		"rejected_prediction_tokens": got.CompletionTokensDetails.RejectedPredictionTokens,
	}
	Expect(have).To(Equal(want), "%s: openai-go's usage (first) vs the raw JSON's (second)", what)
}

// accumulate feeds chunk documents to a ChatCompletionAccumulator, each of
// which must decode as openai.ChatCompletionChunk and be accepted.
func accumulate(chunks []json.RawMessage) *openai.ChatCompletionAccumulator {
	GinkgoHelper()
	acc := &openai.ChatCompletionAccumulator{}
	for i, raw := range chunks {
		var c openai.ChatCompletionChunk
		Expect(json.Unmarshal(raw, &c)).To(Succeed(), "openai-go cannot decode chunk %d: %s", i, raw)
		Expect(acc.AddChunk(c)).To(BeTrue(), "ChatCompletionAccumulator rejected chunk %d: %s", i, raw)
	}
	return acc
}

var _ = Describe("the official openai-go client", Label("usage"), func() {
	chatParams := func(n int64) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:         env.main.Model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(shortPrompt())},
			MaxTokens:     openai.Int(8),
			N:             openai.Int(n),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}
	}

	Describe("POST /v1/chat/completions", func() {
		Context("streamed over SSE with include_usage", Label("sse"), func() {
			for _, n := range []int64{1, 2} {
				It(fmt.Sprintf("parses every chunk and its ChatCompletionAccumulator yields the raw usage (n = %d)", n), func(ctx SpecContext) {
					c := &capture{}
					client := newClient(env.main, c)
					s := client.Chat.Completions.NewStreaming(ctx, chatParams(n))
					acc := openai.ChatCompletionAccumulator{}
					seen := 0
					for s.Next() {
						chunk := s.Current()
						Expect(acc.AddChunk(chunk)).To(BeTrue(), "ChatCompletionAccumulator rejected chunk %d: %s", seen, chunk.RawJSON())
						seen++
					}
					Expect(s.Err()).NotTo(HaveOccurred(), "openai-go stream error after %d chunks", seen)
					Expect(s.Close()).To(Succeed())

					tr := &conformance.Transcript{Transport: "SSE", Status: 200}
					Expect(conformance.ReadSSE(bytes.NewReader(c.last()), tr)).To(Succeed())
					Expect(seen).To(Equal(len(tr.Chunks)), "chunks openai-go yielded vs data events on the wire")
					// The usage of the last chunk that has one is what the server
					// meant; compare first, so a server that repeats usage shows as
					// the double counting it causes.
					raw, err := tr.FinalUsage()
					Expect(err).NotTo(HaveOccurred())
					expectSameUsage(acc.Usage, raw, "accumulated over the stream")
					Expect(acc.Choices).To(HaveLen(int(n)), "choices the accumulator assembled")
					expectNone(conformance.ValidateTranscript(tr, conformance.Chat), "chunks against openapi.yaml")
					finalUsage(tr, int(n))
				})
			}
		})

		Context("streamed over WebSocket with include_usage", Label("websocket"), func() {
			It("decodes every chunk as openai.ChatCompletionChunk and accumulates the raw usage", func(ctx SpecContext) {
				b := conformance.Chat.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 8, "n": 2}, withUsage()))
				tr := stream(ctx, transports[1], env.main, conformance.Chat, b)
				raw, err := tr.FinalUsage()
				Expect(err).NotTo(HaveOccurred())
				acc := accumulate(tr.Chunks)
				expectSameUsage(acc.Usage, raw, "accumulated over the WebSocket chunks")
				finalUsage(tr, 2)
			})
		})

		Context("without stream", func() {
			It("parses the response and its usage equals the raw usage", func(ctx SpecContext) {
				c := &capture{}
				client := newClient(env.main, c)
				p := chatParams(2)
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
				res, err := client.Chat.Completions.New(ctx, p)
				Expect(err).NotTo(HaveOccurred())
				Expect(res.Choices).To(HaveLen(2))
				_, raw, err := conformance.ResponseUsage(c.last())
				Expect(err).NotTo(HaveOccurred())
				Expect(raw).NotTo(BeNil(), "the response has no usage")
				expectSameUsage(res.Usage, raw, "response")
			})
		})
	})

	Describe("POST /v1/completions", func() {
		Context("streamed over SSE with include_usage", Label("sse"), func() {
			It("parses every chunk, and their usage summed is the raw usage once", func(ctx SpecContext) {
				c := &capture{}
				client := newClient(env.main, c)
				s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
					Model:         openai.CompletionNewParamsModel(env.main.Model),
					Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(shortPrompt())},
					MaxTokens:     openai.Int(8),
					N:             openai.Int(2),
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
				})
				var sum openai.CompletionUsage
				seen := 0
				for s.Next() {
					u := s.Current().Usage
					sum.PromptTokens += u.PromptTokens
					sum.CompletionTokens += u.CompletionTokens
					sum.TotalTokens += u.TotalTokens
					sum.PromptTokensDetails.CachedTokens += u.PromptTokensDetails.CachedTokens
					sum.CompletionTokensDetails.AcceptedPredictionTokens += u.CompletionTokensDetails.AcceptedPredictionTokens
					sum.CompletionTokensDetails.RejectedPredictionTokens += u.CompletionTokensDetails.RejectedPredictionTokens
					seen++
				}
				Expect(s.Err()).NotTo(HaveOccurred(), "openai-go stream error after %d chunks", seen)
				Expect(s.Close()).To(Succeed())

				tr := &conformance.Transcript{Transport: "SSE", Status: 200}
				Expect(conformance.ReadSSE(bytes.NewReader(c.last()), tr)).To(Succeed())
				Expect(seen).To(Equal(len(tr.Chunks)), "chunks openai-go yielded vs data events on the wire")
				raw, err := tr.FinalUsage()
				Expect(err).NotTo(HaveOccurred())
				expectSameUsage(sum, raw, "summed over the stream's chunks")
				finalUsage(tr, 2)
			})
		})
	})
})
