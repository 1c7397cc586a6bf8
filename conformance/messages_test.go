package conformance_test

import (
	"context"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// Anthropic's Messages API (POST /v1/messages, count_tokens, and rill's
// WebSocket transport for it): docs/design.md §3 rule 13. Its usage splits
// the prompt into input_tokens, cache_read_input_tokens and
// cache_creation_input_tokens, which add up to what count_tokens counts;
// message_start carries the input counts, message_delta the cumulative
// usage; every refusal is in Anthropic's error shape.

// messagesCaps is what a target does of the Messages API.
type messagesCaps struct {
	ok, ws, count              bool
	reason, wsReason, countWhy string
}

func probeMessages(ctx context.Context, t *conformance.Target) messagesCaps {
	var c messagesCaps
	c.ok, c.reason, c.ws, c.wsReason, c.count, c.countWhy = conformance.ProbeMessages(ctx, t)
	return c
}

// needMessagesOn skips a spec on a target without the Messages API (or,
// with ws, without its WebSocket transport); the in-process rill must have
// both, so there it fails instead.
func needMessagesOn(t *target, ws bool) {
	GinkgoHelper()
	c := t.messages
	switch {
	case !c.ok && env.inProcess:
		Fail("rill serves /v1/messages, but " + c.reason)
	case !c.ok:
		Skip(c.reason)
	case ws && !c.ws && env.inProcess:
		Fail("rill serves /v1/messages over WebSocket, but " + c.wsReason)
	case ws && !c.ws:
		Skip(c.wsReason)
	}
}

// needCountTokens is needMessagesOn for count_tokens.
func needCountTokens(t *target) {
	GinkgoHelper()
	switch c := t.messages; {
	case c.count:
	case env.inProcess:
		Fail("rill serves " + conformance.CountTokensPath + ", but " + c.countWhy)
	default:
		Skip(c.countWhy)
	}
}

// msgMax is the output cap of the specs' requests.
const msgMax = 16

// msgBody is a greedy request for t's model; in-process it also asks rill
// to keep generating to the cap (ignore_eos), so that every message has
// content blocks to check. Other targets get Anthropic's members only.
func msgBody(t *target, text string, extra ...map[string]any) map[string]any {
	b := conformance.MessagesBody(t.Model, text, msgMax, merge(append([]map[string]any{{"temperature": 0}}, extra...)...))
	if env.inProcess {
		b["ignore_eos"] = true
	}
	return b
}

// msgVia is one way to run a message and read it: a plain POST, or a
// stream over SSE or WebSocket, checked and accumulated.
type msgVia struct {
	name  string
	label []string
	tc    *transportCase // nil: not streamed
}

var msgVias = []msgVia{
	{name: "without stream"},
	{name: "streamed over SSE", label: []string{"sse"}, tc: &transports[0]},
	{name: "streamed over WebSocket", label: []string{"websocket"}, tc: &transports[1]},
}

// run sends body to t the way v says and returns the message and its usage.
func (v msgVia) run(ctx context.Context, t *target, body map[string]any) (*conformance.MessageObject, *conformance.MessagesUsage) {
	GinkgoHelper()
	if v.tc == nil {
		return postMessage(ctx, t, body)
	}
	res := streamMessage(ctx, *v.tc, t, body)
	return res.Message, res.Usage
}

// postMessage sends a plain request that must succeed and validate.
func postMessage(ctx context.Context, t *target, body map[string]any) (*conformance.MessageObject, *conformance.MessagesUsage) {
	GinkgoHelper()
	needMessagesOn(t, false)
	r, err := t.PostAnthropic(ctx, conformance.MessagesPath, body)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Status).To(Equal(200), "POST %s answered %d: %s", conformance.MessagesPath, r.Status, r.Body)
	expectNone(conformance.ValidateResponse("Message", r.Body), "POST %s against openapi.yaml", conformance.MessagesPath)
	m, u, err := conformance.ParseMessage(r.Body)
	Expect(err).NotTo(HaveOccurred(), "%s", r.Body)
	expectNone(conformance.CheckMessage(m, u), "POST %s", conformance.MessagesPath)
	return m, u
}

// streamMessage streams body over tc, checks the stream and accumulates it.
func streamMessage(ctx context.Context, tc transportCase, t *target, body map[string]any) *conformance.MessageStreamResult {
	GinkgoHelper()
	needMessagesOn(t, tc.tr == conformance.WebSocket)
	var tr *conformance.MessageTranscript
	var err error
	if tc.tr == conformance.WebSocket {
		tr, err = t.StreamMessageWS(ctx, body)
	} else {
		tr, err = t.StreamMessage(ctx, body)
	}
	Expect(err).NotTo(HaveOccurred())
	res, problems := conformance.CheckMessageStream(tr)
	expectNone(problems, "%s stream of %s", tr.Transport, conformance.MessagesPath)
	return res
}

// asChat restates a Messages usage in chat's names, for the cache checks
// the endpoints share: the prompt is the three input counts, the cached
// tokens those read from the cache.
func asChat(u *conformance.MessagesUsage) *conformance.Usage {
	read := u.CacheReadInputTokens
	return &conformance.Usage{PromptTokens: u.Prompt(), CompletionTokens: u.OutputTokens,
		TotalTokens: u.Prompt() + u.OutputTokens, CachedTokens: &read}
}

var _ = Describe("POST /v1/messages", Label("messages"), func() {
	Context("without stream", func() {
		It("answers a Message whose input, cache read and cache creation tokens add up to count_tokens", Label("usage"), func(ctx SpecContext) {
			b := msgBody(env.main, shortPrompt(), map[string]any{"system": "Be brief."})
			m, u := postMessage(ctx, env.main, b)
			Expect(m.ID).NotTo(BeEmpty())
			Expect(u.Prompt()).To(BeNumerically(">", 0))
			Expect(u.OutputTokens).To(BeNumerically(">", 0), "a message with content has output tokens")
			needCountTokens(env.main)
			n, err := env.main.CountTokens(ctx, b)
			Expect(err).NotTo(HaveOccurred())
			Expect(u.Prompt()).To(Equal(n), "input_tokens %d + cache_read_input_tokens %d + cache_creation_input_tokens %d is the prompt count_tokens counts",
				u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens)
		})
	})

	for _, tc := range transports {
		Context("streamed over "+tc.tr.Name(), Label(tc.label), func() {
			It("sends message_start, the content blocks in index order, message_delta and message_stop, with the usage cumulative", Label("usage"), func(ctx SpecContext) {
				res := streamMessage(ctx, tc, env.main, msgBody(env.main, shortPrompt()))
				Expect(res.Start).NotTo(BeNil(), "message_start carries the usage so far")
				Expect(res.Usage).NotTo(BeNil(), "message_delta carries the cumulative usage")
				Expect(res.Start.Prompt()).To(BeNumerically(">", 0), "message_start carries the prompt's counts")
				if env.inProcess {
					Expect(res.Message.Blocks("text")).NotTo(BeEmpty(), "rill keeps generating to max_tokens (ignore_eos): a text block")
				}
			})

			It("reports the usage of the same request without stream", Label("usage"), func(ctx SpecContext) {
				b := msgBody(env.main, shortPrompt())
				m, plain := postMessage(ctx, env.main, b)
				res := streamMessage(ctx, tc, env.main, b)
				Expect(res.Usage.Prompt()).To(Equal(plain.Prompt()), "the prompt, streamed vs not")
				Expect(res.Usage.OutputTokens).To(Equal(plain.OutputTokens), "output_tokens of the same greedy request, streamed vs not")
				Expect(*res.Message.StopReason).To(Equal(*m.StopReason), "stop_reason, streamed vs not")
			})
		})
	}

	Describe("usage of the prefix cache", Label("usage", "prefix-cache"), func() {
		for _, v := range msgVias {
			Context(v.name, Label(v.label...), func() {
				It("reads at most the shared prefix on a cold prompt, and when it comes again reads what the cold one read or wrote, writing nothing", func(ctx SpecContext) {
					needCacheMeasured()
					b := msgBody(env.main, prompt())
					_, cold := v.run(ctx, env.main, b)
					expectNone(conformance.CheckCold(asChat(cold), coldBound(conformance.Chat)),
						"cache_read_input_tokens of a prompt that starts with a fresh nonce (the prompt of the same chat)")
					needPrefixCache()
					_, warm := v.run(ctx, env.main, b)
					Expect(warm.Prompt()).To(Equal(cold.Prompt()), "the same prompt counted differently")
					bs := env.cfg.BlockSize
					if bs == 0 {
						expectWarm(asChat(warm), "the same message again")
						return
					}
					reread := (cold.Prompt() - 1) / bs * bs
					Expect(cold.CacheReadInputTokens+cold.CacheCreationInputTokens).To(Equal(reread),
						"a cold %d-token prompt leaves %d whole %d-token blocks for the same prompt to read; each was read (cache_read_input_tokens %d) or newly written (cache_creation_input_tokens %d)",
						cold.Prompt(), reread/bs, bs, cold.CacheReadInputTokens, cold.CacheCreationInputTokens)
					Expect(warm.CacheReadInputTokens).To(Equal(reread), "the same prompt again reads what the first read or wrote")
					Expect(warm.CacheCreationInputTokens).To(BeZero(), "the same prompt again found every block cached, yet wrote some")
					Expect(warm.InputTokens).To(Equal(warm.Prompt()-reread), "input_tokens is the prompt less what was read and written")
				})
			})
		}
	})

	Describe("with a forced tool", Label("tools"), func() {
		for _, v := range msgVias {
			Context(v.name, Label(v.label...), func() {
				It("answers with a tool_use block whose input follows input_schema, and stop_reason tool_use", func(ctx SpecContext) {
					needTools()
					b := conformance.MessagesBody(env.main.Model, "What is the weather in Oslo?", 400, map[string]any{
						"tools": []any{conformance.MessagesProbeTool}, "tool_choice": conformance.ForceMessagesProbeTool, "temperature": 0})
					m, _ := v.run(ctx, env.main, b)
					Expect(*m.StopReason).To(Equal("tool_use"))
					calls := m.Blocks("tool_use")
					Expect(calls).To(HaveLen(1), "one forced call (disable_parallel_tool_use)")
					expectCityCall(conformance.ToolCall{Name: calls[0].Name, Arguments: string(calls[0].Input)}, "tool_use input")
				})
			})
		}
	})

	Describe("on a model that reasons", Label("usage"), func() {
		for _, v := range msgVias {
			Context(v.name, Label(v.label...), func() {
				It("shows its thinking as a signed thinking block before the text, counted in output_tokens_details.thinking_tokens", func(ctx SpecContext) {
					t := needReasoning()
					b := conformance.MessagesBody(t.Model, shortPrompt(), 48, map[string]any{"thinking": map[string]any{"type": "adaptive"}, "temperature": 0})
					m, u := v.run(ctx, t, b)
					Expect(u.ThinkingTokens).NotTo(BeNil(), "output_tokens_details.thinking_tokens of a model that reasons")
					answered := false
					for i, c := range m.Content {
						switch c.Type {
						case "thinking":
							Expect(answered).To(BeFalse(), "block %d is thinking after the answer", i)
							Expect(c.Signature).NotTo(BeEmpty(), "a thinking block has a signature, which Anthropic's clients send back")
						default:
							answered = true
						}
					}
					if th := m.Blocks("thinking"); len(th) > 0 && th[0].Thinking != "" {
						Expect(*u.ThinkingTokens).To(BeNumerically(">", 0), "thinking %q was sent but thinking_tokens is 0", th[0].Thinking)
					}
				})
			})
		}
	})
})

var _ = Describe("bad input to /v1/messages", Label("messages", "errors"), func() {
	type badBody func(model string) map[string]any
	user := []any{map[string]any{"role": "user", "content": "hi"}}
	with := func(extra map[string]any) badBody {
		return func(model string) map[string]any {
			return merge(map[string]any{"model": model, "max_tokens": 8, "messages": user}, extra)
		}
	}
	bad := []TableEntry{
		Entry("no max_tokens", badBody(func(model string) map[string]any { return map[string]any{"model": model, "messages": user} })),
		Entry("an unknown model", with(map[string]any{"model": "no-such-model-" + conformance.Nonce()})),
		Entry("a role the API lacks", with(map[string]any{"messages": []any{map[string]any{"role": "tool", "content": "hi"}}})),
		Entry("max_tokens 0", with(map[string]any{"max_tokens": 0})),
		Entry("temperature above 1", with(map[string]any{"temperature": 1.5})),
		Entry("tool_choice of an unknown type", with(map[string]any{"tool_choice": map[string]any{"type": "required"}})),
	}
	expectRefusal := func(status int, body json.RawMessage, what string) {
		GinkgoHelper()
		expectNone(conformance.CheckMessagesError(status, body), "%s", what)
	}
	DescribeTable("without stream", func(ctx SpecContext, b badBody) {
		needMessagesOn(env.main, false)
		r, err := env.main.PostAnthropic(ctx, conformance.MessagesPath, b(env.main.Model))
		Expect(err).NotTo(HaveOccurred())
		expectRefusal(r.Status, r.Body, "POST "+conformance.MessagesPath)
	}, bad)
	DescribeTable("streamed over SSE", Label("sse"), func(ctx SpecContext, b badBody) {
		needMessagesOn(env.main, false)
		tr, err := env.main.StreamMessage(ctx, b(env.main.Model))
		Expect(err).NotTo(HaveOccurred())
		Expect(tr.Events).To(BeEmpty(), "a refused request starts no stream")
		expectRefusal(tr.Status, tr.Error, "a refused stream")
	}, bad)
	DescribeTable("streamed over WebSocket", Label("websocket"), func(ctx SpecContext, b badBody) {
		needMessagesOn(env.main, true)
		tr, err := env.main.StreamMessageWS(ctx, b(env.main.Model))
		Expect(err).NotTo(HaveOccurred())
		Expect(tr.Problems).To(BeEmpty())
		expectRefusal(tr.Status, tr.Error, "the error message of a refused create")
	}, bad)
})
