package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"rill/conformance"
)

// The Responses API (POST /v1/responses, its SSE events and its WebSocket
// mode): docs/design.md §3 rule 12, the usage contract under the Responses API's
// names, on the final response object only.

// responsesCaps is what a target does of the Responses API.
type responsesCaps struct {
	ok, ws           bool
	reason, wsReason string
	// shared is how many tokens fresh inputs share with earlier prompts
	// (conformance.ProbeResponsesShared), learned when sharedReason is "".
	shared       int
	sharedReason string
}

// probeResponses probes t's Responses API and, when t measures a prefix
// cache, what fresh inputs share there.
func probeResponses(ctx context.Context, t *conformance.Target, cacheMeasured bool) responsesCaps {
	ok, reason, ws, wsReason := conformance.ProbeResponses(ctx, t)
	c := responsesCaps{ok: ok, ws: ws, reason: reason, wsReason: wsReason}
	switch {
	case !ok:
		c.sharedReason = reason
	case !cacheMeasured:
		c.sharedReason = "the target measures no prefix cache"
	default:
		c.shared, c.sharedReason = conformance.ProbeResponsesShared(ctx, t)
	}
	return c
}

// responsesColdBound is what the probe learned of fresh inputs on the main
// target's Responses API (docs/design.md §3 rule 11, as for chat's coldBound).
func responsesColdBound() conformance.ColdBound {
	GinkgoHelper()
	if r := env.main.responses.sharedReason; r != "" {
		Fail(fmt.Sprintf("the probe could not learn how many tokens fresh inputs share on POST %s: %s", conformance.ResponsesPath, r))
	}
	return conformance.ColdBound{Shared: env.main.responses.shared, BlockSize: env.cfg.BlockSize}
}

// count is a count CheckResponsesUsage found present; 0 if it was not
// (the spec has failed on that already).
func count(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// needResponses skips a spec on a target without the Responses API (or
// without its WebSocket mode, with ws); the in-process rill has both.
func needResponses(ws bool) {
	GinkgoHelper()
	needResponsesOn(env.main, ws)
}

// needResponsesOn is needResponses for target t.
func needResponsesOn(t *target, ws bool) {
	GinkgoHelper()
	c := t.responses
	switch {
	case !c.ok && env.inProcess:
		Fail("rill serves /v1/responses, but " + c.reason)
	case !c.ok:
		Skip(c.reason)
	case ws && !c.ws && env.inProcess:
		Fail("rill serves /v1/responses over WebSocket, but " + c.wsReason)
	case ws && !c.ws:
		Skip(c.wsReason)
	}
}

// maxOut is the output cap of the specs' requests: OpenAI's smallest.
const maxOut = 16

// respVia is one way to run a response and read its final object: a plain
// POST, or a stream over SSE or WebSocket.
type respVia struct {
	name  string
	label []string
	runOn func(ctx context.Context, t *target, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage)
}

// run runs body on the main target.
func (v respVia) run(ctx context.Context, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
	GinkgoHelper()
	return v.runOn(ctx, env.main, body)
}

var respVias = []respVia{
	{name: "without stream", runOn: postResponseOn},
	{name: "streamed over SSE", label: []string{"sse"}, runOn: func(ctx context.Context, t *target, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
		GinkgoHelper()
		tr, err := t.StreamResponse(ctx, body)
		Expect(err).NotTo(HaveOccurred())
		return finalResponse(tr)
	}},
	{name: "streamed over WebSocket", label: []string{"websocket"}, runOn: func(ctx context.Context, t *target, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
		GinkgoHelper()
		needResponsesOn(t, true)
		tr, err := t.StreamResponseWS(ctx, body)
		Expect(err).NotTo(HaveOccurred())
		return finalResponse(tr)
	}},
}

// postResponse sends a plain request that must succeed and validate, and
// returns its response object, usage and raw body.
func postResponse(ctx context.Context, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
	GinkgoHelper()
	return postResponseOn(ctx, env.main, body)
}

// postResponseOn is postResponse on target t.
func postResponseOn(ctx context.Context, t *target, body map[string]any) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
	GinkgoHelper()
	r, err := t.Post(ctx, conformance.ResponsesPath, body)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Status).To(Equal(200), "POST %s answered %d: %s", conformance.ResponsesPath, r.Status, r.Body)
	expectNone(conformance.ValidateResponse("Response", r.Body), "POST %s against openapi.yaml", conformance.ResponsesPath)
	obj, u, err := conformance.ParseResponseObject(r.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(u).NotTo(BeNil(), "a non-streamed response must carry usage: %s", r.Body)
	expectNone(conformance.CheckResponsesUsage(u), "usage")
	return obj, u, r.Body
}

// finalResponse checks a streamed response and returns its final object.
func finalResponse(tr *conformance.ResponseTranscript) (*conformance.ResponseObject, *conformance.ResponsesUsage, json.RawMessage) {
	GinkgoHelper()
	expectNone(conformance.CheckResponseStream(tr), "%s stream of /v1/responses", tr.Transport)
	obj, u, err := tr.Final()
	Expect(err).NotTo(HaveOccurred())
	return obj, u, tr.Events[len(tr.Events)-1].Raw
}

// asChatUsage restates u in chat's names, for the checks the endpoints share.
func asChatUsage(u *conformance.ResponsesUsage) *conformance.Usage {
	return &conformance.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens}
}

var _ = Describe("POST /v1/responses", Label("responses"), func() {
	BeforeEach(func() { needResponses(false) })
	body := func(extra ...map[string]any) map[string]any {
		return conformance.ResponsesBody(env.main.Model, shortPrompt(), merge(append([]map[string]any{{"max_output_tokens": maxOut}}, extra...)...))
	}

	Context("without stream", func() {
		It("answers a Response with an output message and usage whose total is input + output", Label("usage"), func(ctx SpecContext) {
			obj, u, raw := postResponse(ctx, body())
			Expect(obj.Object).To(Equal("response"))
			Expect(obj.Status).To(BeElementOf("completed", "incomplete"), "status of %s", raw)
			Expect(u.InputTokens).To(BeNumerically(">", 0), "input_tokens")
		})

		It("is incomplete with reason max_output_tokens exactly when the cap cut the output", func(ctx SpecContext) {
			obj, u, raw := postResponse(ctx, body(map[string]any{"max_output_tokens": maxOut, "ignore_eos": true}))
			if obj.Status == "incomplete" {
				Expect(obj.IncompleteDetails).NotTo(BeNil(), "an incomplete response says why: %s", raw)
				Expect(obj.IncompleteDetails.Reason).To(Equal("max_output_tokens"))
				Expect(u.OutputTokens).To(Equal(maxOut), "an output cut by max_output_tokens has max_output_tokens tokens")
				return
			}
			Expect(env.inProcess).To(BeFalse(), "rill honours ignore_eos, so %d tokens must hit the cap: %s", maxOut, raw)
			Expect(obj.Status).To(Equal("completed"))
			Expect(u.OutputTokens).To(BeNumerically("<", maxOut), "a completed response stopped before the cap")
		})

		It("keeps a stored response for GET /v1/responses/{id} until DELETE", func(ctx SpecContext) {
			obj, _, raw := postResponse(ctx, body())
			r, err := env.main.Send(ctx, http.MethodGet, conformance.ResponsesPath+"/"+obj.ID, nil)
			Expect(err).NotTo(HaveOccurred())
			if r.Status == http.StatusNotFound && !env.inProcess {
				Skip("target does not store responses (GET answered 404)")
			}
			Expect(r.Status).To(Equal(200), "GET %s: %s", obj.ID, r.Body)
			Expect(bytes.TrimSpace(r.Body)).To(MatchJSON(raw), "GET answers with the response as it was created")
			r, err = env.main.Send(ctx, http.MethodDelete, conformance.ResponsesPath+"/"+obj.ID, nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Status).To(Equal(200), "DELETE: %s", r.Body)
			expectNone(conformance.ValidateResponse("ResponseDeleted", r.Body), "DELETE")
			r, err = env.main.Send(ctx, http.MethodGet, conformance.ResponsesPath+"/"+obj.ID, nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Status).To(Equal(404), "GET after DELETE: %s", r.Body)
			expectNone(conformance.CheckError(r.Status, r.Body), "GET after DELETE")
		})
	})

	for _, tc := range transports {
		Context("streamed over "+tc.tr.Name(), Label(tc.label), func() {
			stream := func(ctx context.Context, b map[string]any) *conformance.ResponseTranscript {
				GinkgoHelper()
				var tr *conformance.ResponseTranscript
				var err error
				if tc.tr == conformance.WebSocket {
					needResponses(true)
					tr, err = env.main.StreamResponseWS(ctx, b)
				} else {
					tr, err = env.main.StreamResponse(ctx, b)
				}
				Expect(err).NotTo(HaveOccurred())
				return tr
			}

			It("sends the typed events in order, numbered 0, 1, 2, …, with usage on the last event only", Label("usage"), func(ctx SpecContext) {
				tr := stream(ctx, body())
				expectNone(conformance.CheckResponseStream(tr), "%s stream", tr.Transport)
				var types []string
				for _, e := range tr.Events {
					types = append(types, e.Type)
				}
				Expect(types).To(ContainElements("response.output_item.added", "response.content_part.added",
					"response.output_text.done", "response.content_part.done", "response.output_item.done"),
					"a response with a text output announces and closes its message and text part")
			})

			It("reports the usage of the same request without stream", Label("usage"), func(ctx SpecContext) {
				b := body(map[string]any{"temperature": 0})
				_, plain, _ := postResponse(ctx, b)
				_, streamed, _ := finalResponse(stream(ctx, b))
				Expect(streamed.InputTokens).To(Equal(plain.InputTokens), "input_tokens streamed vs not")
				Expect(streamed.OutputTokens).To(Equal(plain.OutputTokens), "output_tokens of the same greedy request, streamed vs not")
				Expect(streamed.TotalTokens).To(Equal(plain.TotalTokens), "total_tokens streamed vs not")
				Expect(streamed.ReasoningTokens).To(Equal(plain.ReasoningTokens), "reasoning_tokens streamed vs not")
			})
		})
	}

	Describe("usage details", Label("usage"), func() {
		for _, v := range respVias {
			Context(v.name, Label(v.label...), func() {
				It("has cached_tokens no more than the prefix every fresh input shares on a cold input, and the reused prefix when the input comes again", Label("prefix-cache"), func(ctx SpecContext) {
					needCacheMeasured()
					b := conformance.ResponsesBody(env.main.Model, prompt(), map[string]any{"max_output_tokens": maxOut})
					_, cold, raw := v.run(ctx, b)
					Expect(cold.CachedTokens).NotTo(BeNil(), "input_tokens_details.cached_tokens is absent although the target measures it: %s", raw)
					expectNone(conformance.CheckCold(asChatUsage(cold), responsesColdBound()), "cached_tokens of an input that starts with a fresh nonce")
					needPrefixCache()
					_, warm, _ := v.run(ctx, b)
					Expect(warm.InputTokens).To(Equal(cold.InputTokens), "the same input counted differently")
					expectWarm(asChatUsage(warm), "second response")
				})

				It("has cache_write_tokens: what the same input again reads, less what the cold one read, and none when it comes again", Label("prefix-cache"), func(ctx SpecContext) {
					needPrefixCache()
					bs := env.cfg.BlockSize
					if bs == 0 {
						Skip("the target's cache grain is unknown (" + conformance.EnvBlockSize + " is 0): what a request writes depends on it")
					}
					b := conformance.ResponsesBody(env.main.Model, prompt(), map[string]any{"max_output_tokens": maxOut})
					_, cold, raw := v.run(ctx, b)
					// The same input again computes its last token, so it
					// reads the whole blocks before that token's.
					reread := (cold.InputTokens - 1) / bs * bs
					Expect(count(cold.CachedTokens)+count(cold.CacheWriteTokens)).To(Equal(reread),
						"a cold %d-token input leaves %d whole %d-token blocks for the same input to read; each was read (cached_tokens) or newly written (cache_write_tokens): %s",
						cold.InputTokens, reread/bs, bs, raw)
					_, warm, raw := v.run(ctx, b)
					Expect(count(warm.CacheWriteTokens)).To(BeZero(), "the same input again found every block cached, yet wrote some: %s", raw)
					Expect(count(warm.CachedTokens)).To(Equal(reread), "the same input again reads what the first wrote or read: %s", raw)
				})

				It("has reasoning_tokens 0 for a model that does not reason, where chat's is absent", func(ctx SpecContext) {
					if !env.inProcess {
						Skip("whether the target's model reasons is not known here")
					}
					_, u, raw := v.run(ctx, body())
					Expect(u.ReasoningTokens).To(HaveValue(BeZero()),
						"rill's test model marks no reasoning: output_tokens_details.reasoning_tokens is 0, present as OpenAI's schema requires; got %s", raw)
				})
			})
		}
	})

	Context("with previous_response_id", Label("prefix-cache"), func() {
		It("continues the stored conversation, and the prefix cache reuses the earlier turn", func(ctx SpecContext) {
			first, u1, _ := postResponse(ctx, conformance.ResponsesBody(env.main.Model, prompt(), map[string]any{"max_output_tokens": maxOut}))
			_, u2, raw := postResponse(ctx, conformance.ResponsesBody(env.main.Model, "and then?",
				map[string]any{"max_output_tokens": maxOut, "previous_response_id": first.ID}))
			Expect(u2.InputTokens).To(BeNumerically(">", u1.InputTokens), "the continued conversation holds the first turn: %s", raw)
			if !env.main.caps.PrefixCache {
				return
			}
			Expect(u2.CachedTokens).NotTo(BeNil())
			if b := env.cfg.BlockSize; b > 0 {
				Expect(*u2.CachedTokens).To(BeNumerically(">=", (u1.InputTokens-1)/b*b),
					"the second turn starts with the first turn's %d input tokens; their full blocks are cached", u1.InputTokens)
			} else {
				Expect(*u2.CachedTokens).To(BeNumerically(">", 0), "the second turn starts with the first turn's input")
			}
		})
	})
})

var _ = Describe("bad input to /v1/responses", Label("responses", "errors"), func() {
	BeforeEach(func() { needResponses(false) })
	// Each entry builds its body for the model under test.
	type badBody func(model string) map[string]any
	withModel := func(with map[string]any) badBody {
		return func(model string) map[string]any { return merge(map[string]any{"model": model}, with) }
	}
	bad := []TableEntry{
		Entry("a missing model", badBody(func(string) map[string]any { return map[string]any{"input": "hi"} })),
		Entry("an unknown model", withModel(map[string]any{"model": "no-such-model-" + conformance.Nonce(), "input": "hi"})),
		Entry("input of the wrong type", withModel(map[string]any{"input": 5})),
		Entry("a message of an unknown role", withModel(map[string]any{"input": []any{map[string]any{"role": "wizard", "content": "hi"}}})),
		Entry("max_output_tokens = 0", withModel(map[string]any{"input": "hi", "max_output_tokens": 0})),
		Entry("temperature of the wrong type", withModel(map[string]any{"input": "hi", "temperature": "hot"})),
		Entry("an unknown previous_response_id", withModel(map[string]any{"input": "hi", "previous_response_id": "resp_" + conformance.Nonce()})),
	}

	DescribeTable("is refused with a 4xx in the OpenAI error shape, without stream",
		func(ctx SpecContext, build badBody) {
			r, err := env.main.Post(ctx, conformance.ResponsesPath, build(env.main.Model))
			Expect(err).NotTo(HaveOccurred())
			expectNone(conformance.CheckError(r.Status, r.Body), "POST /v1/responses")
		}, bad)

	DescribeTable("is refused with a 4xx in the OpenAI error shape, streamed over SSE", Label("sse"),
		func(ctx SpecContext, build badBody) {
			tr, err := env.main.StreamResponse(ctx, build(env.main.Model))
			Expect(err).NotTo(HaveOccurred())
			expectNone(conformance.CheckError(tr.Status, tr.Error), "POST /v1/responses with stream")
		}, bad)

	DescribeTable("is answered with an error event of a 4xx status over WebSocket, and the connection stays usable", Label("websocket"),
		func(ctx SpecContext, build badBody) {
			needResponses(true)
			s, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.ResponsesPath)
			Expect(err).NotTo(HaveOccurred())
			defer s.Close()
			Expect(s.CreateResponse(ctx, build(env.main.Model))).To(Succeed())
			tr, err := s.ReadResponse(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(tr.Error).NotTo(BeNil(), "a bad response.create must end in an error event; got %d events", len(tr.Events))
			expectNone(conformance.CheckError(tr.Status, tr.Error), "error event")
			Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, shortPrompt(), map[string]any{"max_output_tokens": maxOut}))).To(Succeed())
			tr, err = s.ReadResponse(ctx)
			Expect(err).NotTo(HaveOccurred())
			expectNone(conformance.CheckResponseStream(tr), "the response after the error")
		}, bad)
})

var _ = Describe("the Responses API's WebSocket mode", Label("responses", "websocket"), func() {
	BeforeEach(func() { needResponses(true) })

	It("runs several responses on one connection in sequence, each ending in response.completed with usage", Label("usage"), func(ctx SpecContext) {
		s, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.ResponsesPath)
		Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		// Sent at once: they must still come back one after the other.
		for range 3 {
			Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, shortPrompt(), map[string]any{"max_output_tokens": maxOut}))).To(Succeed())
		}
		ids := map[string]bool{}
		for i := range 3 {
			tr, err := s.ReadResponse(ctx)
			Expect(err).NotTo(HaveOccurred())
			expectNone(conformance.CheckResponseStream(tr), "response %d on the connection", i)
			obj, _, err := tr.Final()
			Expect(err).NotTo(HaveOccurred())
			ids[obj.ID] = true
		}
		Expect(ids).To(HaveLen(3), "three responses with three ids")
	})

	It("continues the connection's last response by previous_response_id even when it was not stored", func(ctx SpecContext) {
		s, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.ResponsesPath)
		Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, shortPrompt(), map[string]any{"max_output_tokens": maxOut, "store": false}))).To(Succeed())
		tr, err := s.ReadResponse(ctx)
		Expect(err).NotTo(HaveOccurred())
		first, u1, _ := finalResponse(tr)
		Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, "go on",
			map[string]any{"max_output_tokens": maxOut, "previous_response_id": first.ID}))).To(Succeed())
		tr, err = s.ReadResponse(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, u2, _ := finalResponse(tr)
		Expect(u2.InputTokens).To(BeNumerically(">", u1.InputTokens), "the second turn holds the first")
	})

	It("stops the running response on response.cancel with an error event of status 499, and stays usable (rill's extension)", func(ctx SpecContext) {
		if !env.inProcess {
			Skip("response.cancel is rill's extension of OpenAI's WebSocket mode")
		}
		s, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.ResponsesPath)
		Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		// No output cap: the response runs to the end of the context (a cap
		// beyond it would be refused before the response runs, and the cancel
		// then finds nothing to stop).
		Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, shortPrompt(),
			map[string]any{"ignore_eos": true}))).To(Succeed())
		Expect(s.SendRaw(ctx, []byte(`{"type":"response.cancel"}`))).To(Succeed())
		tr, err := s.ReadResponse(ctx)
		Expect(err).NotTo(HaveOccurred())
		if tr.Error == nil {
			// The cancel reached the connection before the response ran: it
			// was answered with an error of its own, read next.
			Fail(fmt.Sprintf("the long response was not cancelled: %d events, last %s", len(tr.Events), tr.Events[len(tr.Events)-1].Type))
		}
		Expect(tr.Status).To(Equal(499), "status of the cancelled response's error event: %s", tr.Error)
		Expect(string(tr.Error)).To(ContainSubstring(`"response_cancelled"`))
		Expect(s.CreateResponse(ctx, conformance.ResponsesBody(env.main.Model, shortPrompt(), map[string]any{"max_output_tokens": maxOut}))).To(Succeed())
		tr, err = s.ReadResponse(ctx)
		Expect(err).NotTo(HaveOccurred())
		expectNone(conformance.CheckResponseStream(tr), "the response after the cancel")
	})
})

// expectTypedUsage checks a usage as openai-go typed it: the details
// objects and the three counts OpenAI's schema requires were there, numbers
// (docs/design.md §3 rule 12).
func expectTypedUsage(u responses.ResponseUsage, what string) {
	GinkgoHelper()
	Expect(map[string]bool{
		"input_tokens_details":                    u.JSON.InputTokensDetails.Valid(),
		"input_tokens_details.cached_tokens":      u.InputTokensDetails.JSON.CachedTokens.Valid(),
		"input_tokens_details.cache_write_tokens": u.InputTokensDetails.JSON.CacheWriteTokens.Valid(),
		"output_tokens_details":                   u.JSON.OutputTokensDetails.Valid(),
		"output_tokens_details.reasoning_tokens":  u.OutputTokensDetails.JSON.ReasoningTokens.Valid(),
	}).NotTo(ContainElement(false), "%s: a field OpenAI's schema requires is absent, null or not a number (false): %s", what, u.RawJSON())
}

var _ = Describe("the official openai-go client on /v1/responses", Label("responses", "usage"), func() {
	BeforeEach(func() { needResponses(false) })
	params := func() responses.ResponseNewParams {
		return responses.ResponseNewParams{
			Model:           env.main.Model,
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(shortPrompt())},
			MaxOutputTokens: openai.Int(maxOut),
		}
	}
	// expectSame compares the client's usage with the raw JSON's.
	expectSame := func(got responses.ResponseUsage, raw *conformance.ResponsesUsage, what string) {
		GinkgoHelper()
		deref := func(p *int) int64 {
			if p == nil {
				return 0
			}
			return int64(*p)
		}
		expectTypedUsage(got, what)
		Expect(map[string]int64{"input": got.InputTokens, "output": got.OutputTokens, "total": got.TotalTokens,
			"cached": got.InputTokensDetails.CachedTokens, "cache_write": got.InputTokensDetails.CacheWriteTokens,
			"reasoning": got.OutputTokensDetails.ReasoningTokens}).To(Equal(
			map[string]int64{"input": int64(raw.InputTokens), "output": int64(raw.OutputTokens), "total": int64(raw.TotalTokens),
				"cached": deref(raw.CachedTokens), "cache_write": deref(raw.CacheWriteTokens), "reasoning": deref(raw.ReasoningTokens)}),
			"%s: openai-go's usage (first) vs the raw JSON's (second)", what)
	}

	It("responses.create parses the response, its output text and its usage", func(ctx SpecContext) {
		c := &capture{}
		client := newClient(env.main, c)
		res, err := client.Responses.New(ctx, params())
		Expect(err).NotTo(HaveOccurred())
		obj, raw, err := conformance.ParseResponseObject(c.last())
		Expect(err).NotTo(HaveOccurred())
		Expect(raw).NotTo(BeNil())
		expectSame(res.Usage, raw, "response")
		// A sampled reply may end at its first token, so the text is
		// compared with the wire's rather than required to be non-empty.
		Expect(res.OutputText()).To(Equal(obj.OutputText()), "OutputText of %s", c.last())
	})

	It("responses.create streamed yields every event, and the final event's usage is the raw one", Label("sse"), func(ctx SpecContext) {
		c := &capture{}
		client := newClient(env.main, c)
		s := client.Responses.NewStreaming(ctx, params())
		var text string
		var final *responses.Response
		seen := 0
		for s.Next() {
			ev := s.Current()
			Expect(ev.SequenceNumber).To(Equal(int64(seen)), "sequence_number of event %d (%s)", seen, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				text += ev.Delta
			case "response.completed", "response.incomplete":
				r := ev.Response
				final = &r
			}
			seen++
		}
		Expect(s.Err()).NotTo(HaveOccurred(), "openai-go stream error after %d events", seen)
		Expect(s.Close()).To(Succeed())
		Expect(final).NotTo(BeNil(), "no response.completed among %d events", seen)
		tr := &conformance.ResponseTranscript{Transport: "SSE", Status: 200}
		Expect(conformance.ReadResponseSSE(bytes.NewReader(c.last()), tr)).To(Succeed())
		Expect(seen).To(Equal(len(tr.Events)), "events openai-go yielded vs events on the wire")
		_, raw, err := tr.Final()
		Expect(err).NotTo(HaveOccurred())
		expectSame(final.Usage, raw, "final event")
		Expect(final.OutputText()).To(Equal(text), "the final response's text vs the deltas")
	})

	It("its WebSocket connection receives events that end in response.completed (or response.incomplete) with usage", Label("websocket"), func(sctx SpecContext) {
		needResponses(true)
		ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
		defer cancel()
		// Without newClient's capture: its body wrapper hides the upgraded
		// connection from the SDK's WebSocket dialer.
		key := env.main.APIKey
		if key == "" {
			key = "none"
		}
		client := openai.NewClient(option.WithBaseURL(env.main.BaseURL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
		conn, err := client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		create := responses.ResponsesClientEventResponseCreateParam{
			Model:           env.main.Model,
			Input:           responses.ResponsesClientEventResponseCreateInputUnionParam{OfString: openai.String(shortPrompt())},
			MaxOutputTokens: openai.Int(maxOut),
		}
		for turn := range 2 {
			Expect(conn.Create(ctx, create)).To(Succeed())
			var acc responses.ResponseAccumulator
			var last string
			seen := 0
			var final *responses.Response
			for final == nil {
				ev, err := conn.Recv(ctx)
				Expect(err).NotTo(HaveOccurred(), "turn %d: after %d events", turn, seen)
				Expect(ev.Type).NotTo(Equal("error"), "turn %d: %s", turn, ev.RawJSON())
				Expect(acc.AddEvent(ev)).To(Succeed(), "turn %d: the SDK's accumulator rejected %s", turn, ev.RawJSON())
				last = ev.Type
				switch ev.Type {
				case "response.completed":
					r := ev.OfResponsesServerEventResponseWsCompleted.Response
					final = &r
				case "response.incomplete":
					r := ev.OfResponsesServerEventResponseWsIncomplete.Response
					final = &r
				}
				seen++
			}
			Expect(string(final.Status)).To(Equal(strings.TrimPrefix(last, "response.")), "turn %d: status of the final response", turn)
			expectTypedUsage(final.Usage, fmt.Sprintf("turn %d", turn))
			Expect(final.Usage.TotalTokens).To(Equal(final.Usage.InputTokens+final.Usage.OutputTokens), "turn %d usage", turn)
			Expect(final.Usage.InputTokens).To(BeNumerically(">", 0), "turn %d input_tokens", turn)
			rebuilt, err := acc.ReconstructedResponse()
			Expect(err).NotTo(HaveOccurred())
			Expect(rebuilt.OutputText()).To(Equal(final.OutputText()), "turn %d: the accumulated text vs the final response's", turn)
			create.PreviousResponseID = openai.String(final.ID)
		}
	})
})
