package conformance_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// Bad input gets a 4xx in OpenAI's error shape, never a 5xx and never a
// 200 (docs/design.md §7), on every transport.

// badBody is a request body that must be refused; model stands for the
// model under test, and with is merged over a valid body (nil values delete).
type badBody struct {
	with    map[string]any
	without []string
}

func (b badBody) build(ep conformance.Endpoint, model string) map[string]any {
	body := ep.Body(model, shortPrompt(), map[string]any{"max_tokens": 4})
	for _, k := range b.without {
		delete(body, k)
	}
	for k, v := range b.with {
		body[k] = v
	}
	return body
}

// badBodies are the refusals both endpoints share, by description.
func badBodies(ep conformance.Endpoint) []TableEntry {
	entries := []TableEntry{
		Entry("a model of the wrong type", badBody{with: map[string]any{"model": 5}}),
		Entry("a missing model", badBody{without: []string{"model"}}),
		Entry("an unknown model", badBody{with: map[string]any{"model": "no-such-model-" + conformance.Nonce()}}),
		Entry("n = 0", badBody{with: map[string]any{"n": 0}}),
		Entry("n = -1", badBody{with: map[string]any{"n": -1}}),
		Entry("max_tokens = -1", badBody{with: map[string]any{"max_tokens": -1}}),
		Entry("max_tokens of the wrong type", badBody{with: map[string]any{"max_tokens": "eight"}}),
		Entry("temperature of the wrong type", badBody{with: map[string]any{"temperature": "hot"}}),
		Entry("stream_options of the wrong type", badBody{with: map[string]any{"stream_options": "usage"}}),
	}
	if ep.Path == conformance.Chat.Path {
		return append(entries,
			Entry("messages of the wrong type", badBody{with: map[string]any{"messages": "hi"}}),
			Entry("missing messages", badBody{without: []string{"messages"}}),
			Entry("empty messages", badBody{with: map[string]any{"messages": []any{}}}),
			Entry("a message without role", badBody{with: map[string]any{"messages": []any{map[string]any{"content": "hi"}}}}),
			Entry("a message with an unknown role", badBody{with: map[string]any{"messages": []any{map[string]any{"role": "wizard", "content": "hi"}}}}),
		)
	}
	return append(entries,
		Entry("missing prompt", badBody{without: []string{"prompt"}}),
		Entry("a prompt of the wrong type", badBody{with: map[string]any{"prompt": map[string]any{"text": "hi"}}}),
	)
}

// rawBodies are bodies that are not a JSON object at all.
var rawBodies = []TableEntry{
	Entry("broken JSON", `{"model": "m", "messages": [`),
	Entry("text that is not JSON", `tell me about the river`),
	Entry("an empty body", ``),
	Entry("a JSON array", `[]`),
	Entry("JSON null", `null`),
}

var _ = Describe("bad input", Label("errors"), func() {
	for _, ep := range endpoints {
		Describe("POST "+ep.Path, func() {
			Context("without stream", func() {
				DescribeTable("is refused with a 4xx in the OpenAI error shape",
					func(ctx SpecContext, b badBody) {
						r, err := env.main.Post(ctx, ep.Path, b.build(ep, env.main.Model))
						Expect(err).NotTo(HaveOccurred())
						expectNone(conformance.CheckError(r.Status, r.Body), "POST %s", ep.Path)
					},
					badBodies(ep))

				DescribeTable("refuses a body that is not a JSON object with a 4xx in the OpenAI error shape",
					func(ctx SpecContext, raw string) {
						r, err := env.main.Send(ctx, http.MethodPost, ep.Path, []byte(raw))
						Expect(err).NotTo(HaveOccurred())
						expectNone(conformance.CheckError(r.Status, r.Body), "POST %s with body %q", ep.Path, raw)
					},
					rawBodies)

				It("refuses an oversized body (17 MiB) with a 4xx in the OpenAI error shape", func(ctx SpecContext) {
					b := ep.Body(env.main.Model, shortPrompt(), map[string]any{"max_tokens": 1, "user": strings.Repeat("x", 17<<20)})
					data, err := json.Marshal(b)
					Expect(err).NotTo(HaveOccurred())
					r, err := env.main.Send(ctx, http.MethodPost, ep.Path, data)
					Expect(err).NotTo(HaveOccurred(), "the server must answer an oversized body, not drop the connection")
					expectNone(conformance.CheckError(r.Status, r.Body), "POST %s with a %d-byte body", ep.Path, len(data))
				})
			})

			Context("streamed over SSE", Label("sse"), func() {
				DescribeTable("is refused before the stream begins, with a 4xx in the OpenAI error shape",
					func(ctx SpecContext, b badBody) {
						tr, err := env.main.Stream(ctx, ep.Path, b.build(ep, env.main.Model))
						Expect(err).NotTo(HaveOccurred())
						Expect(tr.Chunks).To(BeEmpty(), "a refused request must not stream chunks")
						expectNone(conformance.CheckError(tr.Status, tr.Error), "POST %s with stream true", ep.Path)
					},
					badBodies(ep))
			})

			Context("streamed over WebSocket", Label("websocket"), func() {
				DescribeTable("is refused with an error message with a 4xx status, for that request_id",
					func(ctx SpecContext, b badBody) {
						if !env.main.caps.WebSocket {
							Skip(env.main.caps.WebSocketReason)
						}
						wsRefusal(ctx, env.main, ep, b.build(ep, env.main.Model))
					},
					badBodies(ep))
			})
		})
	}
})

// wsRefusal creates one request with body on a fresh connection and expects
// it refused with an error message carrying its request_id, after which the
// connection still serves a valid request.
func wsRefusal(ctx context.Context, t *target, ep conformance.Endpoint, body map[string]any) {
	GinkgoHelper()
	s, err := conformance.DialWebSocket(ctx, t.Target, ep.Path)
	Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	Expect(s.Create(ctx, "bad", body)).To(Succeed())
	trs, connErrs, stray, err := s.Collect(ctx, "bad")
	Expect(err).NotTo(HaveOccurred(), "the connection must stay open after a refused request")
	Expect(connErrs).To(BeEmpty(), "the refusal must name its request_id, not be a connection-level error")
	Expect(stray).To(BeEmpty(), "messages for no request of this connection")
	tr := trs["bad"]
	Expect(tr.Error).NotTo(BeNil(), "the request was not refused: done %v after %d chunks", tr.Done, len(tr.Chunks))
	Expect(tr.Chunks).To(BeEmpty(), "a refused request must not stream chunks")
	expectNone(conformance.CheckError(tr.Status, tr.Error), "WebSocket error message")
	expectUsable(ctx, s, ep, t)
}
