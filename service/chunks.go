package service

import (
	"unicode/utf8"

	"rill/engine"
)

// chunker builds the wire chunks of one streamed generation from its engine
// events: chat.completion.chunk or text_completion objects, in the order
// OpenAI sends them. It is the single place chunks are made; transports only
// frame them (see chunkWriter). A chunker is owned by one goroutine; the
// bytes it hands to the writer are valid only during that call.
type chunker struct {
	g *generation
	w chunkWriter
	// buf starts with the chunk object up to and including `"choices":[`,
	// prefixLen bytes that every chunk begins with and none overwrites;
	// nil while the stream waits long (waitForDropping; begin makes it
	// again).
	buf       []byte
	prefixLen int
	suffix    []byte // `]}`, or `],"usage":null}` with include_usage
	// tokenRunes is, per wire index, the length in code points of the
	// tokens already sent: the legacy text_offset of the next token.
	tokenRunes []int
	// With continuous usage: the latest Stats of each choice by wire index
	// (seen is false until its first), from which every chunk's running
	// usage is assembled, and scratch space for that. Chat's opening chunks
	// wait for the first event (openingDue), which brings the prompt's
	// counts: a running usage of zero prompt tokens would be false.
	running    []engine.Stats
	seen       []bool
	byPrompt   [][]engine.Stats
	openingDue bool
	// usageRunning: the chunks carry the running usage (continuous usage;
	// running is also kept for timings_per_token, whose chunks carry the
	// running timings once a choice has reported, anySeen).
	usageRunning bool
	anySeen      bool
}

func newChunker(g *generation, w chunkWriter) *chunker {
	c := &chunker{g: g, w: w}
	c.suffix = []byte("]}")
	if g.includeUsage {
		c.suffix = []byte(`],"usage":null}`)
	}
	if g.kind == kindCompletion && g.logprobs {
		c.tokenRunes = make([]int, g.choices())
	}
	c.usageRunning = g.continuousUsage
	if g.continuousUsage || g.timingsPerToken {
		c.running = make([]engine.Stats, g.choices())
		c.seen = make([]bool, g.choices())
		c.byPrompt = make([][]engine.Stats, len(g.reqs))
	}
	return c
}

// appendHeader appends `{"id":…,"object":…,"created":…,"model":…,"choices":[`,
// the start every chunk and response of g shares.
func appendHeader(b []byte, g *generation, object string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, g.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = appendInt(b, int(g.created))
	b = append(b, `,"model":`...)
	b = appendString(b, g.model)
	return append(b, `,"choices":[`...)
}

// emit frames the choice object in c.buf[prefixLen:] and sends the chunk,
// with the running usage when the request asked for continuous usage, and
// the running timings when it asked for timings_per_token.
func (c *chunker) emit() error {
	timed := c.g.timingsPerToken && c.anySeen
	if !c.usageRunning && !timed {
		c.buf = append(c.buf, c.suffix...)
		return c.w.chunk(c.buf)
	}
	u := c.runningUsage()
	switch {
	case c.usageRunning:
		c.buf = append(c.buf, `],"usage":`...)
		c.buf = u.AppendJSON(c.buf)
	default:
		c.buf = append(c.buf, c.suffix[:len(c.suffix)-1]...) // the suffix less its '}'
	}
	if timed {
		t := AssembleTimings(c.byPrompt, &u)
		c.buf = append(c.buf, `,"timings":`...)
		c.buf = t.AppendJSON(c.buf)
	}
	c.buf = append(c.buf, '}')
	return c.w.chunk(c.buf)
}

// record keeps st as the latest counts of the choice at wire index i.
func (c *chunker) record(i int, st *engine.Stats) {
	c.running[i], c.seen[i] = *st, true
	c.anySeen = true
}

// runningUsage assembles the usage of the request so far from the latest
// counts of every choice that has reported any, by docs/design.md §3's rules (a
// prompt and its cached prefix once, completion and draft counters summed).
func (c *chunker) runningUsage() Usage {
	n := c.g.n
	for p := range c.byPrompt {
		c.byPrompt[p] = c.byPrompt[p][:0]
		for j := range n {
			if i := p*n + j; c.seen[i] {
				c.byPrompt[p] = append(c.byPrompt[p], c.running[i])
			}
		}
	}
	return AssembleUsage(c.byPrompt)
}

func (c *chunker) begin() {
	if c.buf == nil {
		// Made at the first chunk, and again after a long wait: a waiting
		// stream keeps none of it.
		c.buf = appendHeader(make([]byte, 0, 512), c.g, chunkObject(c.g.job))
		c.prefixLen = len(c.buf)
	}
	c.buf = c.buf[:c.prefixLen]
}

// opening sends what precedes the first token: for chat, one chunk per
// choice with delta.role "assistant" and empty content, as OpenAI does.
// With continuous usage they wait for the first event (see event).
func (c *chunker) opening() error {
	if c.g.kind != kindChat {
		return nil
	}
	if c.usageRunning {
		c.openingDue = true
		return nil
	}
	return c.sendOpening()
}

func (c *chunker) sendOpening() error {
	for i := range c.g.choices() {
		c.begin()
		c.buf = append(c.buf, `{"index":`...)
		c.buf = appendInt(c.buf, i)
		c.buf = append(c.buf, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
		if err := c.emit(); err != nil {
			return err
		}
	}
	return nil
}

// event sends the chunks of one engine event of the choice at wire index i:
// its text (skipped when it has neither text nor logprobs), and for a final
// event the finish_reason — in a separate chunk with an empty delta for chat,
// together with the last text for completions, as OpenAI does.
func (c *chunker) event(i int, ev *engine.Event) error {
	if c.running != nil {
		if c.openingDue {
			// The opening chunks go first, with the prompt's counts and
			// none of this event's tokens, as vLLM's first chunk has.
			c.openingDue = false
			if ev.Stats != nil {
				c.record(i, openingStats(ev.Stats))
			}
			if err := c.sendOpening(); err != nil {
				return err
			}
		}
		if ev.Stats != nil {
			c.record(i, ev.Stats)
		}
	}
	hasContent := ev.Text != "" || len(ev.Logprobs) > 0
	if c.g.kind == kindCompletion {
		if !hasContent && !ev.Final {
			return nil
		}
		c.begin()
		c.buf = append(c.buf, `{"text":`...)
		c.buf = appendString(c.buf, ev.Text)
		c.buf = append(c.buf, `,"index":`...)
		c.buf = appendInt(c.buf, i)
		c.buf = append(c.buf, `,"logprobs":`...)
		if c.g.logprobs {
			c.buf = appendLegacyLogprobs(c.buf, ev.Logprobs, &c.tokenRunes[i])
		} else {
			c.buf = append(c.buf, "null"...)
		}
		c.buf = append(c.buf, `,"finish_reason":`...)
		c.buf = appendFinish(c.buf, ev)
		c.buf = append(c.buf, '}')
		return c.emit()
	}

	// Content (and reasoning) first, then tool-call fragments; logprobs
	// ride on the first chunk of the event (a content chunk when there is
	// neither).
	tools := len(ev.ToolCalls) > 0
	text := ev.Text != "" || ev.Reasoning != ""
	if text || (hasContent && !tools) {
		if err := c.delta(i, ev, false, c.g.logprobs); err != nil {
			return err
		}
	}
	if tools {
		if err := c.delta(i, ev, true, c.g.logprobs && !text); err != nil {
			return err
		}
	}
	if !ev.Final {
		return nil
	}
	c.begin()
	c.buf = append(c.buf, `{"index":`...)
	c.buf = appendInt(c.buf, i)
	c.buf = append(c.buf, `,"delta":{},"logprobs":null,"finish_reason":`...)
	c.buf = appendFinish(c.buf, ev)
	c.buf = append(c.buf, '}')
	return c.emit()
}

// delta sends one chunk of choice i with ev's content and reasoning, or
// with its tool-call fragments; withLogprobs puts ev's logprobs on it (else
// null).
func (c *chunker) delta(i int, ev *engine.Event, tools, withLogprobs bool) error {
	c.begin()
	c.buf = append(c.buf, `{"index":`...)
	c.buf = appendInt(c.buf, i)
	c.buf = append(c.buf, `,"delta":{`...)
	if tools {
		c.buf = appendToolCallDeltas(c.buf, ev.ToolCalls)
	} else {
		c.buf = appendDeltaText(c.buf, ev)
	}
	c.buf = append(c.buf, `},"logprobs":`...)
	if withLogprobs {
		c.buf = appendChatLogprobs(c.buf, ev.Logprobs)
	} else {
		c.buf = append(c.buf, "null"...)
	}
	c.buf = append(c.buf, `,"finish_reason":null}`...)
	return c.emit()
}

// openingStats are st with nothing generated yet: its prompt counts, and
// zero for each completion counter st reports.
func openingStats(st *engine.Stats) *engine.Stats {
	zero := 0
	out := &engine.Stats{PromptTokens: st.PromptTokens, CachedTokens: st.CachedTokens}
	if st.DraftAccepted != nil {
		out.DraftAccepted = &zero
	}
	if st.DraftRejected != nil {
		out.DraftRejected = &zero
	}
	if st.ReasoningTokens != nil {
		out.ReasoningTokens = &zero
	}
	return out
}

// appendDeltaText appends the text members of a chat delta: the
// reasoning as "reasoning_content" (vLLM's and DeepSeek's name) when there
// is some, and "content" when there is text or nothing else.
func appendDeltaText(b []byte, ev *engine.Event) []byte {
	if ev.Reasoning != "" {
		b = append(b, `"reasoning_content":`...)
		b = appendString(b, ev.Reasoning)
		if ev.Text == "" {
			return b
		}
		b = append(b, ',')
	}
	b = append(b, `"content":`...)
	return appendString(b, ev.Text)
}

// usage sends the last chunk of a stream that asked for its usage
// (include_usage) or its timings (t, nil when not asked): no choices, the
// usage of the whole request, and the timings.
func (c *chunker) usage(u *Usage, t *Timings) error {
	c.begin()
	c.buf = append(c.buf, ']')
	if c.g.includeUsage {
		c.buf = append(c.buf, `,"usage":`...)
		c.buf = u.AppendJSON(c.buf)
	}
	if t != nil {
		c.buf = append(c.buf, `,"timings":`...)
		c.buf = t.AppendJSON(c.buf)
	}
	c.buf = append(c.buf, '}')
	return c.w.chunk(c.buf)
}

// progress sends a prompt_progress chunk (return_progress): no choices,
// and how far the processing of prompt p has come, in llama.cpp's shape
// {"total","cache","processed","time_ms"}, with "index" naming the prompt
// when the request has several. It goes before the first token of its
// prompt; include_usage's "usage": null is on it too.
func (c *chunker) progress(p int, pr *engine.Progress) error {
	c.begin()
	c.buf = append(c.buf, ']')
	if c.g.includeUsage {
		c.buf = append(c.buf, `,"usage":null`...)
	}
	c.buf = append(c.buf, `,"prompt_progress":{"total":`...)
	c.buf = appendInt(c.buf, pr.Total)
	c.buf = append(c.buf, `,"cache":`...)
	c.buf = appendInt(c.buf, pr.Cached)
	c.buf = append(c.buf, `,"processed":`...)
	c.buf = appendInt(c.buf, pr.Processed)
	c.buf = append(c.buf, `,"time_ms":`...)
	c.buf = appendInt(c.buf, int(pr.Elapsed.Milliseconds()))
	if len(c.g.reqs) > 1 {
		c.buf = append(c.buf, `,"index":`...)
		c.buf = appendInt(c.buf, p)
	}
	c.buf = append(c.buf, "}}"...)
	return c.w.chunk(c.buf)
}

// appendFinish appends the finish_reason of ev: null unless ev is final.
// An engine that ends a choice without a reason is taken to have stopped.
func appendFinish(b []byte, ev *engine.Event) []byte {
	if !ev.Final {
		return append(b, "null"...)
	}
	switch ev.FinishReason {
	case engine.FinishLength:
		return append(b, `"length"`...)
	case engine.FinishToolCalls:
		return append(b, `"tool_calls"`...)
	}
	return append(b, `"stop"`...)
}

// appendChatLogprobs appends the chat logprobs object
// {"content":[{"token","logprob","bytes","top_logprobs":[…]}…],"refusal":null}.
func appendChatLogprobs(b []byte, lps []engine.TokenLogprob) []byte {
	b = append(b, `{"content":`...)
	b = appendResponseLogprobs(b, lps)
	return append(b, `,"refusal":null}`...)
}

// appendTokenLogprob appends {"token":…,"logprob":…,"bytes":[…] and leaves
// the object open for the caller to extend and close. Bytes
// default to the token's own UTF-8 bytes when the engine left them out.
func appendTokenLogprob(b []byte, token string, raw []byte, lp float64) []byte {
	b = append(b, `{"token":`...)
	b = appendString(b, token)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, logprob(lp))
	b = append(b, `,"bytes":`...)
	if raw != nil {
		b = appendByteArray(b, raw)
	} else {
		b = appendByteArray(b, token)
	}
	return b
}

// appendLegacyLogprobs appends the completions logprobs object
// {"tokens":[…],"token_logprobs":[…],"top_logprobs":[{tok:lp…}…],"text_offset":[…]}.
// *runes is the text offset, in code points, of the first token; it is
// advanced past the tokens appended.
func appendLegacyLogprobs(b []byte, lps []engine.TokenLogprob, runes *int) []byte {
	b = append(b, `{"tokens":[`...)
	for i := range lps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, lps[i].Token)
	}
	b = append(b, `],"token_logprobs":[`...)
	for i := range lps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFloat(b, logprob(lps[i].Logprob))
	}
	b = append(b, `],"top_logprobs":[`...)
	for i := range lps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j, t := range lps[i].Top {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendString(b, t.Token)
			b = append(b, ':')
			b = appendFloat(b, logprob(t.Logprob))
		}
		b = append(b, '}')
	}
	b = append(b, `],"text_offset":[`...)
	for i := range lps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, *runes)
		*runes += utf8.RuneCountInString(lps[i].Token)
	}
	return append(b, "]}"...)
}
