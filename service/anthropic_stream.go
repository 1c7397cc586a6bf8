package service

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"rill/engine"
)

// The Messages API's answer: its usage (docs/design.md §3 rule 13), the
// events of a streamed message and the message object, built by one
// encoder for SSE, WebSocket and the plain JSON answer, so that they
// cannot drift apart.

// MessagesUsage is the usage of the Messages API: the counts of Usage as
// Anthropic splits the prompt (docs/design.md §3 rule 13). InputTokens,
// CacheReadInputTokens and CacheCreationInputTokens add up to the prompt.
type MessagesUsage struct {
	// InputTokens is the prompt tokens neither read from the prefix cache
	// nor newly written to it.
	InputTokens int
	// CacheReadInputTokens is the prompt tokens read from the prefix cache.
	CacheReadInputTokens int
	// CacheCreationInputTokens is the prompt tokens this request newly
	// wrote into the prefix cache, which the same prompt again reads.
	CacheCreationInputTokens int
	// OutputTokens is the completion tokens, thinking included.
	OutputTokens int
	// ThinkingTokens is output_tokens_details.thinking_tokens, the output
	// tokens inside the thinking block, markers included; nil for a model
	// that does not mark reasoning (the details are then left out).
	ThinkingTokens *int
}

// MessagesUsageOf splits u as Anthropic does. A cache count the engine
// does not measure is 0, which claims nothing: the prompt is then all
// input_tokens. It is pure.
func MessagesUsageOf(u Usage) MessagesUsage {
	m := MessagesUsage{OutputTokens: u.CompletionTokens, ThinkingTokens: u.ReasoningTokens}
	if u.CachedTokens != nil {
		m.CacheReadInputTokens = *u.CachedTokens
	}
	if u.CacheWriteTokens != nil {
		m.CacheCreationInputTokens = *u.CacheWriteTokens
	}
	// AssembleUsage holds cached + written <= prompt; clamp all the same,
	// so that no count is ever negative.
	m.CacheReadInputTokens = min(max(m.CacheReadInputTokens, 0), u.PromptTokens)
	m.CacheCreationInputTokens = min(max(m.CacheCreationInputTokens, 0), u.PromptTokens-m.CacheReadInputTokens)
	m.InputTokens = max(u.PromptTokens-m.CacheReadInputTokens-m.CacheCreationInputTokens, 0)
	return m
}

// AppendJSON appends {"input_tokens":I,"cache_creation_input_tokens":W,
// "cache_read_input_tokens":R,"output_tokens":O}, with
// "output_tokens_details":{"thinking_tokens":T} when it is measured.
func (u *MessagesUsage) AppendJSON(b []byte) []byte {
	b = append(b, `{"input_tokens":`...)
	b = appendInt(b, u.InputTokens)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = appendInt(b, u.CacheCreationInputTokens)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = appendInt(b, u.CacheReadInputTokens)
	b = append(b, `,"output_tokens":`...)
	b = appendInt(b, u.OutputTokens)
	if u.ThinkingTokens != nil {
		b = append(b, `,"output_tokens_details":{"thinking_tokens":`...)
		b = appendInt(b, *u.ThinkingTokens)
		b = append(b, '}')
	}
	return append(b, '}')
}

// messageWriter is the transport of a streamed message: it frames one
// event (typ is its "type", data its complete JSON) and delivers it, pings
// an idle stream, and delivers the error that ends a stream after it
// began. Calls come from one goroutine; an error means the client is
// gone. data is valid only during the call.
type messageWriter interface {
	event(typ string, data []byte) error
	ping() error
	fail(e *apiError) error
}

// blockKind is the type of a content block.
type blockKind uint8

const (
	blockText blockKind = iota
	blockThinking
	blockToolUse
)

// contentBlock is one block of a message's content as the encoder builds it.
type contentBlock struct {
	kind  blockKind
	index int
	// text is a text block's text or a thinking block's thinking.
	text []byte
	// A tool_use block's id, name and input (JSON text, as streamed).
	id, name string
	input    []byte
}

// messageEncoder builds the events of one message from its engine events,
// in Anthropic's order:
//
//	message_start   the message with empty content, stop_reason null, and
//	                the usage so far: the input counts and output_tokens
//	ping
//	per content block, one after the other, index from 0:
//	  content_block_start, content_block_delta ..., content_block_stop
//	    thinking: thinking_delta ..., then a signature_delta
//	    text:     text_delta ...
//	    tool_use: input_json_delta ... (content_block_start has input {})
//	message_delta   stop_reason, stop_sequence and the cumulative usage
//	message_stop
//
// message_start waits for the first engine event: its running Stats (the
// plan asks for them) hold the prompt's counts, which only the engine
// knows. With a nil writer the encoder only keeps the content, for the
// plain JSON answer. A block opens when its first piece arrives and stops
// when the next one opens or the message ends: a thinking block
// (Event.Reasoning) before the text that follows it, text before the calls
// a token ends it with, a tool_use block per call. Tool-call fragments must
// come call after call (errCallsInterleaved otherwise), as for the
// Responses API. It is owned by one goroutine.
type messageEncoder struct {
	id, model string
	w         messageWriter // nil: not streamed
	buf       []byte

	started bool
	blocks  []*contentBlock
	open    *contentBlock
	calls   map[int]*contentBlock // tool_use blocks by the engine's call index; nil until one
	// Of the final event (zero before it): its finish reason and the stop
	// string that ended it.
	finishReason engine.FinishReason
	stopSequence string
}

func newMessageEncoder(id, model string, w messageWriter) *messageEncoder {
	return &messageEncoder{id: id, model: model, w: w, buf: make([]byte, 0, 512)}
}

// begin starts an event of type typ: {"type":"<typ>".
func (e *messageEncoder) begin(typ string) {
	e.buf = append(e.buf[:0], `{"type":"`...)
	e.buf = append(e.buf, typ...)
	e.buf = append(e.buf, '"')
}

// send closes the event in buf and delivers it.
func (e *messageEncoder) send(typ string) error {
	e.buf = append(e.buf, '}')
	return e.w.event(typ, e.buf)
}

// start sends message_start, with the usage that st (the first engine
// event's running Stats; nil when the engine keeps none) says so far,
// and the ping Anthropic sends after it.
func (e *messageEncoder) start(st *engine.Stats) error {
	e.started = true
	if e.w == nil {
		return nil
	}
	var u MessagesUsage
	if st != nil {
		u = MessagesUsageOf(AssembleUsage([][]engine.Stats{{*st}}))
	}
	e.begin("message_start")
	e.buf = append(e.buf, `,"message":`...)
	e.buf = e.appendMessage(e.buf, &u, true)
	if err := e.send("message_start"); err != nil {
		return err
	}
	return e.w.ping()
}

// event takes one engine event of the message's only choice: its
// reasoning first, then its text and call fragments in output order (as
// responseEncoder.event orders them).
func (e *messageEncoder) event(ev *engine.Event) error {
	if !e.started {
		if err := e.start(ev.Stats); err != nil {
			return err
		}
	}
	if ev.Reasoning != "" {
		if err := e.add(blockThinking, ev.Reasoning); err != nil {
			return err
		}
	}
	if e.open != nil && e.open.kind == blockToolUse {
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
		if err := e.add(blockText, ev.Text); err != nil {
			return err
		}
	} else {
		if err := e.add(blockText, ev.Text); err != nil {
			return err
		}
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
	}
	if ev.Final {
		e.finishReason, e.stopSequence = ev.FinishReason, ev.StopSequence
	}
	return nil
}

// add appends text to the open block of kind (text or thinking), opening
// one when the open block is of another kind.
func (e *messageEncoder) add(kind blockKind, text string) error {
	if text == "" {
		return nil
	}
	if e.open == nil || e.open.kind != kind {
		if err := e.openBlock(&contentBlock{kind: kind}); err != nil {
			return err
		}
	}
	b := e.open
	b.text = append(b.text, text...)
	if e.w == nil {
		return nil
	}
	e.beginDelta(b)
	if kind == blockThinking {
		e.buf = append(e.buf, `{"type":"thinking_delta","thinking":`...)
	} else {
		e.buf = append(e.buf, `{"type":"text_delta","text":`...)
	}
	e.buf = appendString(e.buf, text)
	e.buf = append(e.buf, '}')
	return e.send("content_block_delta")
}

// beginDelta starts a content_block_delta of b, up to its delta's value.
func (e *messageEncoder) beginDelta(b *contentBlock) {
	e.begin("content_block_delta")
	e.buf = append(e.buf, `,"index":`...)
	e.buf = appendInt(e.buf, b.index)
	e.buf = append(e.buf, `,"delta":`...)
}

// addCalls adds tool-call fragments: the first of a call opens its
// tool_use block, pieces of arguments are input_json_deltas of the open one.
func (e *messageEncoder) addCalls(deltas []engine.ToolCallDelta) error {
	for _, d := range deltas {
		b := e.calls[d.Index]
		switch {
		case b == nil:
			b = &contentBlock{kind: blockToolUse, id: d.ID, name: d.Name}
			if b.id == "" {
				b.id = newObjectID("toolu_") // an engine that names no call; tool_result needs an id
			}
			if e.calls == nil {
				e.calls = make(map[int]*contentBlock)
			}
			e.calls[d.Index] = b
			if err := e.openBlock(b); err != nil {
				return err
			}
		case b != e.open:
			return &errCallsInterleaved{index: d.Index}
		case b.name == "":
			b.name = d.Name
		}
		if d.Arguments == "" {
			continue
		}
		b.input = append(b.input, d.Arguments...)
		if e.w == nil {
			continue
		}
		e.beginDelta(b)
		e.buf = append(e.buf, `{"type":"input_json_delta","partial_json":`...)
		e.buf = appendString(e.buf, d.Arguments)
		e.buf = append(e.buf, '}')
		if err := e.send("content_block_delta"); err != nil {
			return err
		}
	}
	return nil
}

// openBlock stops the open block and starts b: content_block_start.
func (e *messageEncoder) openBlock(b *contentBlock) error {
	if err := e.closeBlock(); err != nil {
		return err
	}
	b.index = len(e.blocks)
	e.blocks = append(e.blocks, b)
	e.open = b
	if e.w == nil {
		return nil
	}
	e.begin("content_block_start")
	e.buf = append(e.buf, `,"index":`...)
	e.buf = appendInt(e.buf, b.index)
	e.buf = append(e.buf, `,"content_block":`...)
	e.buf = appendBlock(e.buf, b, false)
	return e.send("content_block_start")
}

// closeBlock stops the open block, if any: a thinking block gets its
// signature_delta first, then content_block_stop.
func (e *messageEncoder) closeBlock() error {
	b := e.open
	if b == nil {
		return nil
	}
	e.open = nil
	if e.w == nil {
		return nil
	}
	if b.kind == blockThinking {
		e.beginDelta(b)
		e.buf = append(e.buf, `{"type":"signature_delta","signature":`...)
		e.buf = appendString(e.buf, thinkingSignature(b.text))
		e.buf = append(e.buf, '}')
		if err := e.send("content_block_delta"); err != nil {
			return err
		}
	}
	e.begin("content_block_stop")
	e.buf = append(e.buf, `,"index":`...)
	e.buf = appendInt(e.buf, b.index)
	return e.send("content_block_stop")
}

// finish ends a message whose engine request completed with usage u: the
// open block stops, then message_delta with the stop reason and the
// cumulative usage, then message_stop.
func (e *messageEncoder) finish(u *Usage) error {
	if e.w == nil {
		return nil
	}
	if !e.started {
		if err := e.start(nil); err != nil {
			return err
		}
	}
	if err := e.closeBlock(); err != nil {
		return err
	}
	mu := MessagesUsageOf(*u)
	e.begin("message_delta")
	e.buf = append(e.buf, `,"delta":{"stop_reason":"`...)
	e.buf = append(e.buf, e.stopReason()...)
	e.buf = append(e.buf, `","stop_sequence":`...)
	e.buf = e.appendStopSequence(e.buf)
	e.buf = append(e.buf, `},"usage":`...)
	e.buf = mu.AppendJSON(e.buf)
	if err := e.send("message_delta"); err != nil {
		return err
	}
	e.begin("message_stop")
	return e.send("message_stop")
}

// stopReason is the message's stop_reason: end_turn (the end of the
// sequence, or a stop sequence the engine did not name), stop_sequence
// (engine.Event.StopSequence names it), max_tokens (max_tokens, or the end
// of the context window where max_tokens went beyond it), or tool_use,
// which a message with calls has whatever the engine said.
func (e *messageEncoder) stopReason() string {
	switch {
	case e.finishReason == engine.FinishLength:
		return "max_tokens"
	case e.finishReason == engine.FinishToolCalls, len(e.calls) > 0:
		return "tool_use"
	case e.stopSequence != "":
		return "stop_sequence"
	}
	return "end_turn"
}

// appendStopSequence appends the message's stop_sequence: the stop string
// that ended it (stop_reason stop_sequence), else null.
func (e *messageEncoder) appendStopSequence(b []byte) []byte {
	if e.stopReason() != "stop_sequence" {
		return append(b, "null"...)
	}
	return appendString(b, e.stopSequence)
}

// message returns the complete message object with usage u, the plain
// JSON answer.
func (e *messageEncoder) message(u *Usage) []byte {
	n := 512
	for _, b := range e.blocks {
		n += 128 + len(b.text) + len(b.input)
	}
	mu := MessagesUsageOf(*u)
	return e.appendMessage(make([]byte, 0, n), &mu, false)
}

// appendMessage appends the message object: as message_start carries it
// (opening: no content yet, stop_reason null) or complete.
func (e *messageEncoder) appendMessage(b []byte, u *MessagesUsage, opening bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, e.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, e.model)
	b = append(b, `,"content":[`...)
	if !opening {
		for i, blk := range e.blocks {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendBlock(b, blk, true)
		}
	}
	b = append(b, `],"stop_reason":`...)
	if opening {
		b = append(b, "null"...)
	} else {
		b = appendString(b, e.stopReason())
	}
	b = append(b, `,"stop_sequence":`...)
	if opening {
		b = append(b, "null"...)
	} else {
		b = e.appendStopSequence(b)
	}
	b = append(b, `,"usage":`...)
	b = u.AppendJSON(b)
	return append(b, '}')
}

// appendBlock appends a content block: empty as content_block_start
// carries it, or whole as the message object does.
func appendBlock(b []byte, blk *contentBlock, whole bool) []byte {
	switch blk.kind {
	case blockThinking:
		b = append(b, `{"type":"thinking","thinking":`...)
		sig := ""
		if whole {
			b = appendString(b, string(blk.text))
			sig = thinkingSignature(blk.text)
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"signature":`...)
		b = appendString(b, sig)
	case blockToolUse:
		b = append(b, `{"type":"tool_use","id":`...)
		b = appendString(b, blk.id)
		b = append(b, `,"name":`...)
		b = appendString(b, blk.name)
		b = append(b, `,"input":`...)
		if whole && firstByte(blk.input) == '{' && json.Valid(blk.input) {
			b = append(b, compactJSON(blk.input)...)
		} else {
			// Streamed input comes in deltas; arguments a cap cut short
			// are no object to show.
			b = append(b, `{}`...)
		}
	default:
		b = append(b, `{"type":"text","text":`...)
		if whole {
			b = appendString(b, string(blk.text))
		} else {
			b = append(b, `""`...)
		}
	}
	return append(b, '}')
}

// thinkingSignature is a thinking block's signature. Anthropic's clients
// expect one and send it back with the block; Anthropic's is an
// encrypted attestation. rill attests nothing and checks nothing on the
// way back: its signature is a checksum of the thinking text (SHA-256, in
// base64), so that it is present and stable.
func thinkingSignature(text []byte) string {
	sum := sha256.Sum256(text)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// fail ends a stream that the engine gave up on after it began: the
// error event, its fields in the Messages API's names.
func (e *messageEncoder) fail(ae *apiError) error {
	if e.w == nil {
		return nil
	}
	return e.w.fail(messagesError(ae))
}
