package service

import (
	"bytes"
	"encoding/json"
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
//	  reasoning:       response.output_item.added, response.content_part.added,
//	                   response.reasoning_text.delta ...,
//	                   response.reasoning_text.done, response.content_part.done,
//	                   response.output_item.done
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
// another message, and a thinking block (Event.Reasoning) is a reasoning
// item before the answer that follows it. Within one engine event the
// reasoning comes first: a token that ends the block ends its reasoning
// before any answer text.
//
// Logprobs are output_text's: those of the thinking block's tokens (its
// markers included, and any token that shows no text while a reasoning
// item is open) are not sent, as OpenAI sends none for reasoning, and
// neither are those of a token that only adds to a call.
//
// Tool-call fragments must come call after call (every engine rill drives
// sends them so): a fragment of a call whose item is done fails the
// response with a server error rather than lose or misplace its text. It is
// owned by one goroutine.
type responseEncoder struct {
	r *responseJob
	w eventWriter // nil: not streamed

	seq    int
	status string
	buf    []byte

	items []*outputItem
	open  *outputItem         // the item being streamed, the last of items; nil once done
	calls map[int]*outputItem // function call items by the engine's call index; nil until one
	// pending are logprobs of tokens that showed no text while no item was
	// open (when r.logprobs): they go with the next text, or are dropped
	// when a function call opens (they were its tokens).
	pending []engine.TokenLogprob
	// finishReason is the final event's finish reason ("" before it).
	finishReason engine.FinishReason
	usage        *ResponseUsage
	err          *apiError // of a failed response
	// completedAt is when the response completed (unix seconds), 0 before.
	completedAt int64
}

// itemKind is the type of an output item.
type itemKind uint8

const (
	itemMessage itemKind = iota
	itemFunctionCall
	itemReasoning
	// itemCustomCall is a call of a custom tool: a function call to the
	// engine, whose arguments {"input": ...} hold the item's input.
	itemCustomCall
)

// outputItem is one item of a response's output as the encoder builds it.
type outputItem struct {
	kind   itemKind
	id     string // "msg_…", "fc_…" or "rs_…"
	index  int    // output_index
	status string // in_progress while open; completed or incomplete once done
	// A message's one output_text part, or a reasoning item's one
	// reasoning_text part.
	text     []byte
	logprobs []engine.TokenLogprob
	// A function call's call_id, name and arguments (JSON text); a custom
	// tool call's arguments hold its input. callName is the function the
	// model called; name is the tool's own, namespace its namespace ("":
	// none).
	callID, name, namespace, callName string
	arguments                         []byte
	// sealed is a reasoning item's encrypted_content, once made.
	sealed string
}

// isCall reports whether the item is a call of a function or custom tool.
func (it *outputItem) isCall() bool { return it.kind == itemFunctionCall || it.kind == itemCustomCall }

// customInput is a custom tool call's input: the input member of the
// arguments the model wrote; of arguments cut short (by
// max_output_tokens), the part of the input string they hold; or, from an
// engine that does not hold arguments to the schema, the arguments
// themselves.
func (it *outputItem) customInput() string {
	var a struct {
		Input *string `json:"input"`
	}
	if json.Unmarshal(it.arguments, &a) == nil && a.Input != nil {
		return *a.Input
	}
	if in, ok := partialInput(it.arguments); ok {
		return in
	}
	return string(it.arguments)
}

// partialInput reads arguments cut inside {"input": "…: the string's
// characters so far, an escape cut in half left out.
func partialInput(args []byte) (string, bool) {
	rest := bytes.TrimLeft(args, " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte("{"))
	if !ok {
		return "", false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(`"input"`))
	if !ok {
		return "", false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(":"))
	if !ok {
		return "", false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(`"`))
	if !ok {
		return "", false
	}
	// The string so far closes as a JSON string, unless an escape was cut
	// in half (a backslash, or \u and fewer than four digits): then the
	// longest prefix that does. Arguments that went on past the string
	// (and are not JSON for another reason) close as none.
	for cut := len(rest); cut >= 0 && cut > len(rest)-6; cut-- {
		var s string
		if json.Unmarshal(append(append([]byte{'"'}, rest[:cut]...), '"'), &s) == nil {
			return s, true
		}
	}
	return "", false
}

// message returns the chat message the item stands for in a conversation:
// an assistant message with its text, with its one call, or with only its
// reasoning (which belongs to the assistant turn that follows it).
func (it *outputItem) message() engine.Message {
	switch it.kind {
	case itemFunctionCall, itemCustomCall:
		return engine.Message{Role: engine.RoleAssistant, NullContent: true,
			ToolCalls: []engine.ToolCall{{ID: it.callID, Name: it.callName, Arguments: string(it.arguments)}}}
	case itemReasoning:
		return engine.Message{Role: engine.RoleAssistant, ReasoningContent: string(it.text)}
	}
	return engine.Message{Role: engine.RoleAssistant, Content: string(it.text)}
}

// errCallsInterleaved is the engine breaking the order the encoder needs.
type errCallsInterleaved struct{ index int }

func (e *errCallsInterleaved) Error() string {
	return "the engine sent a fragment of tool call " + strconv.Itoa(e.index) + " after a later output item began"
}

func newResponseEncoder(r *responseJob, w eventWriter) *responseEncoder {
	return &responseEncoder{r: r, w: w, status: statusInProgress, buf: make([]byte, 0, 512)}
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

// opening sends response.created and response.in_progress; a queued
// response (a background one) is created queued.
func (e *responseEncoder) opening() error {
	if err := e.sendResponse("response.created"); err != nil {
		return err
	}
	e.status = statusInProgress
	return e.sendResponse("response.in_progress")
}

// event takes one engine event of the response's only choice. Its
// reasoning comes first; its text and its call fragments are in output
// order when the text is before a call that opens in the event or after a
// call already open: an engine's event holds what one token ended, and a
// token ends text before a call or after one, never both.
func (e *responseEncoder) event(ev *engine.Event) error {
	lps := ev.Logprobs
	if ev.Reasoning != "" {
		if err := e.addReasoning(ev.Reasoning); err != nil {
			return err
		}
	}
	if ev.Text == "" && (ev.Reasoning != "" || len(ev.ToolCalls) > 0) {
		lps = nil // the token was the thinking block's or a call's, not a message's
	}
	if e.open != nil && e.open.isCall() {
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
		if err := e.addText(ev.Text, lps); err != nil {
			return err
		}
	} else {
		if err := e.addText(ev.Text, lps); err != nil {
			return err
		}
		if err := e.addCalls(ev.ToolCalls); err != nil {
			return err
		}
	}
	if ev.Final {
		e.finishReason = ev.FinishReason
	}
	return nil
}

// addReasoning adds a piece of the thinking block to the open reasoning
// item, opening one when the open item is not reasoning. Logprobs pending
// from before it were the block's opening marker's: they are dropped.
func (e *responseEncoder) addReasoning(text string) error {
	if e.open == nil || e.open.kind != itemReasoning {
		e.pending = nil
		if err := e.openItem(&outputItem{kind: itemReasoning, id: newObjectID("rs_")}); err != nil {
			return err
		}
	}
	it := e.open
	it.text = append(it.text, text...)
	if e.w == nil {
		return nil
	}
	e.begin("response.reasoning_text.delta")
	e.buf = e.appendPartRef(e.buf, it)
	e.buf = append(e.buf, `,"delta":`...)
	e.buf = appendString(e.buf, text)
	return e.send("response.reasoning_text.delta")
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
// function_call (or custom_tool_call) item, pieces of arguments are
// deltas of the open one (a custom tool call's input is sent whole when
// it is done: its pieces are pieces of JSON).
func (e *responseEncoder) addCalls(deltas []engine.ToolCallDelta) error {
	for _, d := range deltas {
		it := e.calls[d.Index]
		switch {
		case it == nil:
			it = &outputItem{kind: itemFunctionCall, callID: d.ID}
			e.r.nameCall(it, d.Name, true)
			it.id = newObjectID("fc_")
			if it.kind == itemCustomCall {
				it.id = newObjectID("ctc_")
			}
			if it.callID == "" {
				it.callID = newObjectID("call_") // an engine that names no call; the conversation needs an id
			}
			if e.calls == nil {
				e.calls = make(map[int]*outputItem)
			}
			e.calls[d.Index] = it
			e.pending = nil
			if err := e.openItem(it); err != nil {
				return err
			}
		case it != e.open:
			return &errCallsInterleaved{index: d.Index}
		case it.callName == "":
			e.r.nameCall(it, d.Name, false)
		}
		if d.Arguments == "" {
			continue
		}
		it.arguments = append(it.arguments, d.Arguments...)
		if e.w == nil || it.kind == itemCustomCall {
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
// and its part's for a message or reasoning.
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
	if it.isCall() {
		return nil
	}
	e.begin("response.content_part.added")
	e.buf = e.appendPartRef(e.buf, it)
	e.buf = append(e.buf, `,"part":`...)
	e.buf = appendItemPart(e.buf, it, false)
	return e.send("response.content_part.added")
}

// appendItemPart appends the one part of a message (output_text) or a
// reasoning item (reasoning_text).
func appendItemPart(b []byte, it *outputItem, whole bool) []byte {
	if it.kind == itemReasoning {
		return appendReasoningPart(b, it, whole)
	}
	return appendPart(b, it, whole)
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
	case itemMessage, itemReasoning:
		typ := "response.output_text.done"
		if it.kind == itemReasoning {
			typ = "response.reasoning_text.done"
		}
		e.begin(typ)
		e.buf = e.appendPartRef(e.buf, it)
		e.buf = append(e.buf, `,"text":`...)
		e.buf = appendString(e.buf, string(it.text))
		if it.kind == itemMessage {
			e.buf = append(e.buf, `,"logprobs":`...)
			e.buf = appendResponseLogprobs(e.buf, it.logprobs)
		}
		if err := e.send(typ); err != nil {
			return err
		}
		e.begin("response.content_part.done")
		e.buf = e.appendPartRef(e.buf, it)
		e.buf = append(e.buf, `,"part":`...)
		e.buf = appendItemPart(e.buf, it, true)
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
	case itemCustomCall:
		input := it.customInput()
		if input != "" {
			e.begin("response.custom_tool_call_input.delta")
			e.buf = e.appendCallRef(e.buf, it)
			e.buf = append(e.buf, `,"delta":`...)
			e.buf = appendString(e.buf, input)
			if err := e.send("response.custom_tool_call_input.delta"); err != nil {
				return err
			}
		}
		e.begin("response.custom_tool_call_input.done")
		e.buf = e.appendCallRef(e.buf, it)
		e.buf = append(e.buf, `,"input":`...)
		e.buf = appendString(e.buf, input)
		if err := e.send("response.custom_tool_call_input.done"); err != nil {
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
// done events of its last item, then response.completed, or
// response.incomplete when the output hit max_output_tokens (or the context
// window), which leaves the last item incomplete. A reply with tool calls
// is completed, as on OpenAI (the API has no tool_calls status). An output
// without an answer (no message, no call) gets an empty message, unless
// the cap cut it inside its thinking block: then, as on OpenAI, its
// reasoning is all there is.
func (e *responseEncoder) finish(u *Usage) error {
	ru := ResponseUsageOf(*u)
	e.usage = &ru
	done := statusCompleted
	if e.finishReason == engine.FinishLength {
		done = statusIncomplete
	}
	if e.lacksAnswer(done) {
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

// lacksAnswer reports whether a response ending with status done needs an
// empty message: it has neither a message nor a call, and was not cut
// while it reasoned.
func (e *responseEncoder) lacksAnswer(done string) bool {
	for _, it := range e.items {
		if it.kind != itemReasoning {
			return false
		}
	}
	cutThinking := done == statusIncomplete && e.open != nil && e.open.kind == itemReasoning
	return !cutThinking
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

// appendCallRef appends the members that locate a call item.
func (e *responseEncoder) appendCallRef(b []byte, it *outputItem) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, it.id)
	b = append(b, `,"output_index":`...)
	return appendInt(b, it.index)
}

// nameCall names a call item by the function the model called, name: a
// custom tool's call is a custom_tool_call (when opening: an item's type is
// set when it opens, and every engine rill drives names a call in its
// first fragment), a namespaced function's carries its namespace and its
// own name.
func (rp *responseJob) nameCall(it *outputItem, name string, opening bool) {
	it.callName, it.name = name, name
	ct, ok := rp.clientTools[name]
	if !ok || (ct.custom && !opening) {
		return
	}
	it.name, it.namespace = ct.name, ct.namespace
	if ct.custom {
		it.kind = itemCustomCall
	}
}

// appendPartRef appends the members that locate a message's text part.
func (e *responseEncoder) appendPartRef(b []byte, it *outputItem) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, it.id)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, it.index)
	return append(b, `,"content_index":0`...)
}
