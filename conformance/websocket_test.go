package conformance_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// docs/design.md §4: the WebSocket protocol itself — many requests on one
// connection, cancel, and error messages for bad client messages.

// answerWithin bounds the wait for a reply the protocol promises.
const answerWithin = 10 * time.Second

// expectUsable checks that s still serves a valid request to its end.
func expectUsable(ctx context.Context, s *conformance.Session, ep conformance.Endpoint, t *target) {
	GinkgoHelper()
	id := "ok-" + conformance.Nonce()
	Expect(s.Create(ctx, id, ep.Body(t.Model, shortPrompt(), merge(map[string]any{"max_tokens": 3}, withUsage())))).
		To(Succeed(), "the connection must stay open")
	trs, connErrs, _, err := s.Collect(ctx, id)
	Expect(err).NotTo(HaveOccurred(), "the connection must keep serving requests")
	Expect(connErrs).To(BeEmpty())
	expectNone(conformance.CheckStream(trs[id], conformance.StreamWant{IncludeUsage: true, Choices: 1}), "a valid request after it")
}

// long returns a request that keeps the engine busy for a while: a long
// prompt and many tokens (past the end-of-sequence token on rill, where
// the suite knows the extension).
func long(ep conformance.Endpoint) map[string]any {
	extra := map[string]any{"max_tokens": 200}
	if env.inProcess {
		extra["ignore_eos"] = true
	}
	return ep.Body(env.main.Model, prompt(), extra)
}

var _ = Describe("the WebSocket protocol", Label("websocket"), func() {
	var s *conformance.Session
	ep := conformance.Chat

	BeforeEach(func(ctx SpecContext) {
		if !env.main.caps.WebSocket {
			Skip(env.main.caps.WebSocketReason)
		}
		var err error
		s, err = conformance.DialWebSocket(ctx, env.main.Target, ep.Path)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = s.Close() })
	})

	Describe("GET "+ep.Path+" with Upgrade: websocket", func() {
		Context("with three requests in flight on one connection", func() {
			It("streams each to its own done, each under its own include_usage", func(ctx SpecContext) {
				wants := map[string]conformance.StreamWant{
					"a": {IncludeUsage: true, Choices: 1},
					"b": {IncludeUsage: false, Choices: 1},
					"c": {IncludeUsage: true, Choices: 2},
				}
				Expect(s.Create(ctx, "a", ep.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 12}, withUsage())))).To(Succeed())
				Expect(s.Create(ctx, "b", ep.Body(env.main.Model, shortPrompt(), map[string]any{"max_tokens": 12}))).To(Succeed())
				Expect(s.Create(ctx, "c", ep.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 12, "n": 2}, withUsage())))).To(Succeed())
				trs, connErrs, stray, err := s.Collect(ctx, "a", "b", "c")
				Expect(err).NotTo(HaveOccurred())
				Expect(connErrs).To(BeEmpty(), "connection-level errors")
				Expect(stray).To(BeEmpty(), "messages for no request of this connection")
				for id, want := range wants {
					expectNone(conformance.CheckStream(trs[id], want), "request %q", id)
					expectNone(conformance.ValidateTranscript(trs[id], ep), "request %q against openapi.yaml", id)
				}
			})
		})

		Context("compared with SSE", func() {
			It("sends byte-identical chunks for the same greedy request (id and created aside)", func(ctx SpecContext) {
				if !env.inProcess {
					Skip("another server's greedy output need not be reproducible across requests; the byte comparison runs against rill in-process")
				}
				for _, e := range endpoints {
					b := e.Body(env.main.Model, shortPrompt(), map[string]any{"max_tokens": 8, "temperature": 0, "n": 2})
					// Warm the prefix cache first, so that both streams find the
					// same cached prefix and report the same usage.
					post(ctx, env.main, e, b)
					sse := normalize(stream(ctx, transports[0], env.main, e, merge(b, withUsage())).Chunks)
					ws := normalize(stream(ctx, transports[1], env.main, e, merge(b, withUsage())).Chunks)
					for _, choice := range []int{-1, 0, 1} {
						s, w := sse[choice], ws[choice]
						for i := range max(len(s), len(w)) {
							Expect(at(w, i)).To(Equal(at(s, i)),
								"%s, choice %d (-1: the usage chunk), chunk %d: WebSocket (first) vs SSE (second)", e.Path, choice, i)
						}
					}
				}
			})
		})

		Context("with a cancel", func() {
			It("stops that request and leaves the others on the connection running", func(ctx SpecContext) {
				Expect(s.Create(ctx, "long", long(ep))).To(Succeed())
				Expect(s.Create(ctx, "short", ep.Body(env.main.Model, shortPrompt(), merge(map[string]any{"max_tokens": 4}, withUsage())))).To(Succeed())
				Expect(s.Cancel(ctx, "long")).To(Succeed())
				trs, connErrs, stray, err := s.Collect(ctx, "short")
				Expect(err).NotTo(HaveOccurred())
				Expect(connErrs).To(BeEmpty(), "connection-level errors")
				expectNone(conformance.CheckStream(trs["short"], conformance.StreamWant{IncludeUsage: true, Choices: 1}), "the request that was not cancelled")
				chunks := 0
				for _, m := range stray {
					Expect(m.RequestID).NotTo(BeNil(), "unexpected message %s", m.Raw)
					Expect(*m.RequestID).To(Equal("long"), "message for no request of this connection: %s", m.Raw)
					Expect(m.Type).To(BeElementOf("chunk", "done", "error"), "message %s", m.Raw)
					if m.Type == "chunk" {
						chunks++
					}
				}
				Expect(chunks).To(BeNumerically("<", 200), "the cancelled request streamed all its tokens")
			})
		})

		Context("with a duplicate request_id of a request in flight", Label("errors"), func() {
			It("refuses the duplicate with an error message with a 4xx status and lets the first run on", func(ctx SpecContext) {
				Expect(s.Create(ctx, "dup", long(ep))).To(Succeed())
				Expect(s.Create(ctx, "dup", ep.Body(env.main.Model, shortPrompt(), map[string]any{"max_tokens": 2}))).To(Succeed())
				var refusals []*conformance.ServerMessage
				done := 0
				rctx, cancel := context.WithTimeout(ctx, answerWithin)
				defer cancel()
				for done == 0 && len(refusals) < 2 {
					m, err := s.Next(rctx)
					Expect(err).NotTo(HaveOccurred(), "waiting for the refusal and the first request's end (refusals so far: %d)", len(refusals))
					if m.RequestID != nil {
						Expect(*m.RequestID).To(Equal("dup"), "message for no request of this connection: %s", m.Raw)
					}
					// The refusal may name "dup" or, so as not to be read as the
					// end of the request in flight, no request at all.
					switch m.Type {
					case "error":
						refusals = append(refusals, m)
					case "done":
						done++
					}
				}
				Expect(refusals).To(HaveLen(1), "exactly one error message, the refusal of the duplicate (done messages: %d)", done)
				m := refusals[0]
				expectNone(conformance.CheckError(m.Status, wrap(m.Error)), "the refusal")
				Expect(done).To(Equal(1), "the first request must run on to its done")
			})
		})

		Context("with bad client messages", Label("errors"), func() {
			DescribeTable("answers with an error message with a 4xx status and keeps the connection open",
				// mayName: the answer may carry the message's request_id; when
				// false there is no usable id and the error must be connection-level.
				func(ctx SpecContext, raw string, mayName bool) {
					model, _ := json.Marshal(env.main.Model)
					Expect(s.SendRaw(ctx, []byte(strings.ReplaceAll(raw, "MODEL", string(model))))).To(Succeed())
					rctx, cancel := context.WithTimeout(ctx, answerWithin)
					defer cancel()
					m, err := s.Next(rctx)
					Expect(err).NotTo(HaveOccurred(), "no answer to the bad message within %s (was it ignored, or the connection dropped?)", answerWithin)
					Expect(m.Type).To(Equal("error"), "the answer to a bad message: %s", m.Raw)
					if !mayName {
						Expect(m.RequestID).To(BeNil(), "a message without a usable request_id gets a connection-level error (request_id absent or null): %s", m.Raw)
					}
					expectNone(conformance.CheckError(m.Status, wrap(m.Error)), "the error message %s", m.Raw)
					expectUsable(ctx, s, ep, env.main)
				},
				Entry("malformed JSON", `{"type":"create","request_id":"m1","body":{`, false),
				Entry("a JSON array", `[{"type":"create"}]`, false),
				Entry("a missing type", `{"request_id":"m2","body":{"model":MODEL,"messages":[{"role":"user","content":"hi"}]}}`, true),
				Entry("an unknown type", `{"type":"explode","request_id":"m3"}`, true),
				Entry("create without request_id", `{"type":"create","body":{"model":MODEL,"messages":[{"role":"user","content":"hi"}]}}`, false),
				Entry("create with an empty request_id", `{"type":"create","request_id":"","body":{"model":MODEL,"messages":[{"role":"user","content":"hi"}]}}`, true),
				Entry("create without body", `{"type":"create","request_id":"m4"}`, true),
				Entry("create with a body that is not an object", `{"type":"create","request_id":"m5","body":"hi"}`, true),
				Entry("cancel of an unknown request_id", `{"type":"cancel","request_id":"never-created"}`, true),
			)
		})
	})
})

var (
	idMember      = regexp.MustCompile(`"id":"[^"]*"`)
	createdMember = regexp.MustCompile(`"created":[0-9]+`)
)

// normalize blanks the members that differ between two requests, keeping
// every other byte as sent, and groups the chunks by choice (the choices of
// one request interleave as they happen to be computed); the usage chunk,
// which has no choice, is under -1.
func normalize(chunks []json.RawMessage) map[int][]string {
	GinkgoHelper()
	out := map[int][]string{}
	for i, c := range chunks {
		parsed, err := conformance.ParseChunk(c)
		Expect(err).NotTo(HaveOccurred(), "chunk %d", i)
		choice := -1
		if len(parsed.Choices) > 0 {
			choice = parsed.Choices[0].Index
		}
		s := idMember.ReplaceAllString(string(c), `"id":"_"`)
		out[choice] = append(out[choice], createdMember.ReplaceAllString(s, `"created":0`))
	}
	return out
}

// at returns list[i], or "(none)" past its end.
func at(list []string, i int) string {
	if i < len(list) {
		return list[i]
	}
	return "(none)"
}

// wrap turns an error message's "error" member into an ErrorResponse.
func wrap(e json.RawMessage) []byte {
	if len(e) == 0 {
		e = json.RawMessage("null")
	}
	return append(append([]byte(`{"error":`), e...), '}')
}
