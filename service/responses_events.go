package service

import (
	"strconv"
	"time"

	"rill/engine"
)

// The typed events of a Responses API response, built by one encoder for
// every transport (SSE, WebSocket, and the plain JSON answer, which is the
// last event's response), so that they cannot drift apart.

// Response statuses.
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusIncomplete = "incomplete"
	statusFailed     = "failed"
)

// eventWriter is the transport of a streamed response: it frames one event
// (typ is its "type", data its complete JSON) and delivers it. Calls come
// from one goroutine; an error means the client is gone. data is valid only
// during the call.
type eventWriter interface {
	event(typ string, data []byte) error
	ping() error
}

// responseEncoder builds the events of one response from its engine events,
// in OpenAI's order:
//
//	response.created, response.in_progress,
//	then per output item, one after the other, in output order:
//	  a message:       response.output_item.added, response.content_part.added,
//	                   response.output_text.delta ...,
//	                   response.output_text.done, response.content_part.done,
//	                   response.output_item.done
//	  a function call: response.output_item.added (arguments ""),
//	                   response.function_call_arguments.delta ...,
//	                   response.function_call_arguments.done,
//	                   response.output_item.done
//	response.completed | response.incomplete | response.failed
//
// every one with the next sequence_number, from 0. With a nil writer it only
// keeps the output, for the plain JSON answer: the final response object,
// which is also what the store keeps. An item opens when its first piece
// arrives and is done when the next one opens or the response ends, so
// text before calls is a message item before them and text after them
// another message. A reasoning item (once the engine splits reasoning out
// for this API: Event.Reasoning) is one more item kind that opens the same
// way, before the message it precedes.
//
// Tool-call fragments must come call after call (every engine rill drives
// sends them so): a fragment of a call whose item is done fails the
// response with a server error rather than lose or misplace its text. It is
// owned by one goroutine.
type responseEncoder struct {
	r *responsePlan
	w eventWriter // nil: not streamed

	seq    int
	status string
	buf    []byte

	items []*outputItem
	open  *outputItem         // the item being streamed, the last of items; nil once done
	calls map[int]*outputItem // function call items by the engine's call index
	// pending are logprobs of tokens that showed no text while no item was
	// open (when r.logprobs): they go with the next text, or are dropped
	// when a function call opens (they were its tokens).
	pending []engine.TokenLogprob
	final   engine.Event
	usage   *ResponseUsage
	err     *apiError // of a failed response
	// completedAt is when the response completed (unix seconds), 0 before.
	completedAt int64
}

// itemKind is the type of an output item.
type itemKind uint8

const (
	itemMessage itemKind = iota
	itemFunctionCall
)

// outputItem is one item of a response's output as the encoder builds it.
type outputItem struct {
	kind   itemKind
	id     string // "msg_…" or "fc_…"
	index  int    // output_index
	status string // in_progress while open; completed or incomplete once done
	// A message's one output_text part.
	text     []byte
	logprobs []engine.TokenLogprob
	// A function call's call_id, name and arguments (JSON text).
	callID, name string
	arguments    []byte
}

// message returns the chat message the item stands for in a conversation:
// an assistant message with its text, or with its one call.
func (it *outputItem) message() engine.Message {
	if it.kind == itemFunctionCall {
		return engine.Message{Role: engine.RoleAssistant, NullContent: true,
			ToolCalls: []engine.ToolCall{{ID: it.callID, Name: it.name, Arguments: string(it.arguments)}}}
	}
	return engine.Message{Role: engine.RoleAssistant, Content: string(it.text)}
}

// errCallsInterleaved is the engine breaking the order the encoder needs.
type errCallsInterleaved struct{ index int }

func (e *errCallsInterleaved) Error() string {
	return "the engine sent a fragment of tool call " + strconv.Itoa(e.index) + " after a later output item began"
}

func newResponseEncoder(r *responsePlan, w eventWriter) *responseEncoder {
	return &responseEncoder{r: r, w: w, status: statusInProgress, buf: make([]byte, 0, 512), calls: map[int]*outputItem{}}
}

// begin starts an event of type typ: {"type":…,"sequence_number":N[,"stream_id":…].
func (e *responseEncoder) begin(typ string) {
	e.buf = append(e.buf[:0], `{"type":"`...)
	e.buf = append(e.buf, typ...)
	e.buf = append(e.buf, `","sequence_number":`...)
	e.buf = appendInt(e.buf, e.seq)
	if e.r.streamID != "" {
		e.buf = append(e.buf, `,"stream_id":`...)
		e.buf = appendString(e.buf, e.r.streamID)
	}
}

// send closes the event in buf and delivers it.
func (e *responseEncoder) send(typ string) error {
	e.buf = append(e.buf, '}')
	e.seq++
	return e.w.event(typ, e.buf)
}

// sendResponse sends an event that carries the response object as it is now.
func (e *responseEncoder) sendResponse(typ string) error {
	if e.w == nil {
		return nil
	}
	e.begin(typ)
	e.buf = append(e.buf, `,"response":`...)
	e.buf = e.appendResponse(e.buf)
	return e.send(typ)
}

// opening sends response.created and response.in_progress.
func (e *responseEncoder) opening() error {
	if err := e.sendResponse("response.created"); err != nil {
		return err
	}
	return e.sendResponse("response.in_progress")
}

// event takes one engine event of the response's only choice. Its text
// and its call fragments are in output order when the text is before a
// call that opens in the event or after a call already open: an engine's
// event holds what one token ended, and a token ends text before a call or
// after one, never both.
func (e *responseEncoder) event(ev *engine.Event) error {
	if e.open != nil && e.open.kind == itemFunctionCall {
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
		if err := e.addText(ev.Text, ev.Logprobs); err != nil {
			return err
		}
	} else {
		if err := e.addText(ev.Text, ev.Logprobs); err != nil {
			return err
		}
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
	}
	if ev.Final {
		e.final = *ev
	}
	return nil
}

// addText adds text (and its tokens' logprobs) to the open message, opening
// one when the open item is not a message.
func (e *responseEncoder) addText(text string, lps []engine.TokenLogprob) error {
	if !e.r.logprobs {
		lps = nil
	}
	if text == "" && len(lps) == 0 {
		return nil
	}
	inMessage := e.open != nil && e.open.kind == itemMessage
	if text == "" && !inMessage {
		if e.open == nil {
			e.pending = append(e.pending, lps...)
		}
		return nil
	}
	if !inMessage {
		if err := e.openItem(&outputItem{kind: itemMessage, id: newObjectID("msg_")}); err != nil {
			return err
		}
	}
	if len(e.pending) > 0 {
		lps = append(e.pending, lps...)
		e.pending = nil
	}
	return e.textDelta(text, lps)
}

// textDelta appends to the open message and sends its delta.
func (e *responseEncoder) textDelta(text string, lps []engine.TokenLogprob) error {
	it := e.open
	it.text = append(it.text, text...)
	it.logprobs = append(it.logprobs, lps...)
	if e.w == nil {
		return nil
	}
	e.begin("response.output_text.delta")
	e.buf = e.appendPartRef(e.buf, it)
	e.buf = append(e.buf, `,"delta":`...)
	e.buf = appendString(e.buf, text)
	e.buf = append(e.buf, `,"logprobs":`...)
	e.buf = appendResponseLogprobs(e.buf, lps)
	return e.send("response.output_text.delta")
}

// addCalls adds tool-call fragments: the first of a call opens its
// function_call item, pieces of arguments are deltas of the open one.
func (e *responseEncoder) addCalls(deltas []engine.ToolCallDelta) error {
	for _, d := range deltas {
		it := e.calls[d.Index]
		switch {
		case it == nil:
			it = &outputItem{kind: itemFunctionCall, id: newObjectID("fc_"), callID: d.ID, name: d.Name}
			if it.callID == "" {
				it.callID = newObjectID("call_") // an engine that names no call; the conversation needs an id
			}
			e.calls[d.Index] = it
			e.pending = nil
			if err := e.openItem(it); err != nil {
				return err
			}
		case it != e.open:
			return &errCallsInterleaved{index: d.Index}
		case it.name == "":
			it.name = d.Name
		}
		if d.Arguments == "" {
			continue
		}
		it.arguments = append(it.arguments, d.Arguments...)
		if e.w == nil {
			continue
		}
		e.begin("response.function_call_arguments.delta")
		e.buf = append(e.buf, `,"item_id":`...)
		e.buf = appendString(e.buf, it.id)
		e.buf = append(e.buf, `,"output_index":`...)
		e.buf = appendInt(e.buf, it.index)
		e.buf = append(e.buf, `,"delta":`...)
		e.buf = appendString(e.buf, d.Arguments)
		if err := e.send("response.function_call_arguments.delta"); err != nil {
			return err
		}
	}
	return nil
}

// openItem ends the open item (completed) and opens it: its added event,
// and a message's part's.
func (e *responseEncoder) openItem(it *outputItem) error {
	if e.open != nil {
		if err := e.closeItem(statusCompleted); err != nil {
			return err
		}
	}
	it.index, it.status = len(e.items), statusInProgress
	e.items = append(e.items, it)
	e.open = it
	if e.w == nil {
		return nil
	}
	e.begin("response.output_item.added")
	e.buf = append(e.buf, `,"output_index":`...)
	e.buf = appendInt(e.buf, it.index)
	e.buf = append(e.buf, `,"item":`...)
	e.buf = e.appendItem(e.buf, it, false)
	if err := e.send("response.output_item.added"); err != nil {
		return err
	}
	if it.kind != itemMessage {
		return nil
	}
	e.begin("response.content_part.added")
	e.buf = e.appendPartRef(e.buf, it)
	e.buf = append(e.buf, `,"part":`...)
	e.buf = appendPart(e.buf, it, false)
	return e.send("response.content_part.added")
}

// closeItem ends the open item with status: its done events.
func (e *responseEncoder) closeItem(status string) error {
	it := e.open
	e.open = nil
	it.status = status
	if e.w == nil {
		return nil
	}
	switch it.kind {
	case itemMessage:
		e.begin("response.output_text.done")
		e.buf = e.appendPartRef(e.buf, it)
		e.buf = append(e.buf, `,"text":`...)
		e.buf = appendString(e.buf, string(it.text))
		e.buf = append(e.buf, `,"logprobs":`...)
		e.buf = appendResponseLogprobs(e.buf, it.logprobs)
		if err := e.send("response.output_text.done"); err != nil {
			return err
		}
		e.begin("response.content_part.done")
		e.buf = e.appendPartRef(e.buf, it)
		e.buf = append(e.buf, `,"part":`...)
		e.buf = appendPart(e.buf, it, true)
		if err := e.send("response.content_part.done"); err != nil {
			return err
		}
	case itemFunctionCall:
		e.begin("response.function_call_arguments.done")
		e.buf = append(e.buf, `,"item_id":`...)
		e.buf = appendString(e.buf, it.id)
		e.buf = append(e.buf, `,"name":`...)
		e.buf = appendString(e.buf, it.name)
		e.buf = append(e.buf, `,"output_index":`...)
		e.buf = appendInt(e.buf, it.index)
		e.buf = append(e.buf, `,"arguments":`...)
		e.buf = appendString(e.buf, string(it.arguments))
		if err := e.send("response.function_call_arguments.done"); err != nil {
			return err
		}
	}
	e.begin("response.output_item.done")
	e.buf = append(e.buf, `,"output_index":`...)
	e.buf = appendInt(e.buf, it.index)
	e.buf = append(e.buf, `,"item":`...)
	e.buf = e.appendItem(e.buf, it, true)
	return e.send("response.output_item.done")
}

// finish ends a response whose engine request completed with usage u: the
// done events of its last item (an empty message when the output is empty),
// then response.completed, or response.incomplete when the output hit
// max_output_tokens (or the context window), which leaves the last item
// incomplete. A reply with tool calls is completed, as on OpenAI (the API
// has no tool_calls status).
func (e *responseEncoder) finish(u *Usage) error {
	ru := ResponseUsageOf(*u)
	e.usage = &ru
	done := statusCompleted
	if e.final.FinishReason == engine.FinishLength {
		done = statusIncomplete
	}
	if len(e.items) == 0 {
		if err := e.openItem(&outputItem{kind: itemMessage, id: newObjectID("msg_")}); err != nil {
			return err
		}
	}
	if len(e.pending) > 0 && e.open != nil && e.open.kind == itemMessage {
		lps := e.pending
		e.pending = nil
		if err := e.textDelta("", lps); err != nil {
			return err
		}
	}
	if e.open != nil {
		if err := e.closeItem(done); err != nil {
			return err
		}
	}
	e.status = done
	e.completedAt = time.Now().Unix()
	if done == statusIncomplete {
		return e.sendResponse("response.incomplete")
	}
	return e.sendResponse("response.completed")
}

// fail ends a response that the engine gave up on after it began:
// response.failed, with the error and no usage (the engine sent no counts).
func (e *responseEncoder) fail(ae *apiError) error {
	e.status = statusFailed
	e.err = ae
	return e.sendResponse("response.failed")
}

// response returns the final response object.
func (e *responseEncoder) response() []byte {
	n := 512
	for _, it := range e.items {
		n += 128 + len(it.text) + len(it.arguments)
	}
	return e.appendResponse(make([]byte, 0, n))
}

// appendPartRef appends the members that locate a message's text part.
func (e *responseEncoder) appendPartRef(b []byte, it *outputItem) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, it.id)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, it.index)
	return append(b, `,"content_index":0`...)
}
