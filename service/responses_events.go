package service

import (
	"strconv"
	"time"

	"rill/engine"
)

// The Responses API's wire: its usage, its response object and the typed
// events of a streamed response, built by one encoder for every transport
// (SSE, WebSocket, and the plain JSON answer, which is the last event's
// response), so that they cannot drift apart.

// ResponseUsage is the usage of the Responses API: the counts of Usage
// under the names OpenAI gives them there (DESIGN §3 rule 12). Pointer
// fields follow Usage's rule: nil is "not measured" and the key is left out.
type ResponseUsage struct {
	InputTokens  int
	OutputTokens int
	TotalTokens  int
	// CachedTokens is input_tokens_details.cached_tokens.
	CachedTokens *int
	// ReasoningTokens is output_tokens_details.reasoning_tokens.
	ReasoningTokens *int
	// AcceptedPredictionTokens and RejectedPredictionTokens are rill's
	// extension of output_tokens_details, present exactly when drafting was
	// active, as in chat's completion_tokens_details.
	AcceptedPredictionTokens *int
	RejectedPredictionTokens *int
}

// ResponseUsageOf renames u: prompt tokens are input tokens, completion
// tokens output tokens, and every detail keeps its presence. It is pure.
func ResponseUsageOf(u Usage) ResponseUsage {
	return ResponseUsage{
		InputTokens:              u.PromptTokens,
		OutputTokens:             u.CompletionTokens,
		TotalTokens:              u.TotalTokens,
		CachedTokens:             u.CachedTokens,
		ReasoningTokens:          u.ReasoningTokens,
		AcceptedPredictionTokens: u.AcceptedPredictionTokens,
		RejectedPredictionTokens: u.RejectedPredictionTokens,
	}
}

// AppendJSON appends the usage object. Without details it is exactly
// {"input_tokens":I,"output_tokens":O,"total_tokens":T}.
func (u *ResponseUsage) AppendJSON(b []byte) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	if u.CachedTokens != nil {
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(*u.CachedTokens), 10)
		b = append(b, '}')
	}
	if u.ReasoningTokens != nil || u.AcceptedPredictionTokens != nil || u.RejectedPredictionTokens != nil {
		b = append(b, `,"output_tokens_details":{`...)
		sep := false
		field := func(name string, v *int) {
			if v == nil {
				return
			}
			if sep {
				b = append(b, ',')
			}
			sep = true
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, int64(*v), 10)
		}
		field("reasoning_tokens", u.ReasoningTokens)
		field("accepted_prediction_tokens", u.AcceptedPredictionTokens)
		field("rejected_prediction_tokens", u.RejectedPredictionTokens)
		b = append(b, '}')
	}
	return append(b, '}')
}

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
//	response.output_item.added, response.content_part.added   (at the first text)
//	response.output_text.delta ...
//	response.output_text.done, response.content_part.done, response.output_item.done
//	response.completed | response.incomplete | response.failed
//
// every one with the next sequence_number, from 0. With a nil writer it only keeps
// the output, for the plain JSON answer: the final response object, which is
// also what the store keeps. Output items are opened when their first piece
// arrives, so that a reasoning item (once the engine splits reasoning out)
// can come first, at output_index 0, without changing the message's events.
// It is owned by one goroutine.
type responseEncoder struct {
	r *responsePlan
	w eventWriter // nil: not streamed

	seq    int
	status string
	buf    []byte

	msgOpen  bool
	text     []byte
	logprobs []engine.TokenLogprob // when r.logprobs
	final    engine.Event
	usage    *ResponseUsage
	err      *apiError // of a failed response
	// completedAt is when the response completed (unix seconds), 0 before.
	completedAt int64
}

func newResponseEncoder(r *responsePlan, w eventWriter) *responseEncoder {
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

// opening sends response.created and response.in_progress.
func (e *responseEncoder) opening() error {
	if err := e.sendResponse("response.created"); err != nil {
		return err
	}
	return e.sendResponse("response.in_progress")
}

// event takes one engine event of the response's only choice.
func (e *responseEncoder) event(ev *engine.Event) error {
	if ev.Text != "" || len(ev.Logprobs) > 0 {
		if err := e.openMessage(); err != nil {
			return err
		}
		e.text = append(e.text, ev.Text...)
		if e.r.logprobs {
			e.logprobs = append(e.logprobs, ev.Logprobs...)
		}
		if e.w != nil {
			e.begin("response.output_text.delta")
			e.buf = e.appendPartRef(e.buf)
			e.buf = append(e.buf, `,"delta":`...)
			e.buf = appendString(e.buf, ev.Text)
			e.buf = append(e.buf, `,"logprobs":`...)
			e.buf = appendResponseLogprobs(e.buf, ev.Logprobs)
			if err := e.send("response.output_text.delta"); err != nil {
				return err
			}
		}
	}
	if ev.Final {
		e.final = *ev
	}
	return nil
}

// openMessage sends the added events of the message item and its text part
// the first time it is called.
func (e *responseEncoder) openMessage() error {
	if e.msgOpen {
		return nil
	}
	e.msgOpen = true
	if e.w == nil {
		return nil
	}
	e.begin("response.output_item.added")
	e.buf = append(e.buf, `,"output_index":0,"item":`...)
	e.buf = e.appendMessage(e.buf, statusInProgress, false)
	if err := e.send("response.output_item.added"); err != nil {
		return err
	}
	e.begin("response.content_part.added")
	e.buf = e.appendPartRef(e.buf)
	e.buf = append(e.buf, `,"part":`...)
	e.buf = e.appendPart(e.buf, false)
	return e.send("response.content_part.added")
}

// finish ends a response whose engine request completed with usage u: the
// done events of the message, then response.completed, or
// response.incomplete when the output hit max_output_tokens (or the context
// window).
func (e *responseEncoder) finish(u *Usage) error {
	ru := ResponseUsageOf(*u)
	e.usage = &ru
	done := statusCompleted
	if e.final.FinishReason == engine.FinishLength {
		done = statusIncomplete
	}
	if err := e.openMessage(); err != nil {
		return err
	}
	if e.w != nil {
		e.begin("response.output_text.done")
		e.buf = e.appendPartRef(e.buf)
		e.buf = append(e.buf, `,"text":`...)
		e.buf = appendString(e.buf, string(e.text))
		e.buf = append(e.buf, `,"logprobs":`...)
		e.buf = appendResponseLogprobs(e.buf, e.logprobs)
		if err := e.send("response.output_text.done"); err != nil {
			return err
		}
		e.begin("response.content_part.done")
		e.buf = e.appendPartRef(e.buf)
		e.buf = append(e.buf, `,"part":`...)
		e.buf = e.appendPart(e.buf, true)
		if err := e.send("response.content_part.done"); err != nil {
			return err
		}
		e.begin("response.output_item.done")
		e.buf = append(e.buf, `,"output_index":0,"item":`...)
		e.buf = e.appendMessage(e.buf, done, true)
		if err := e.send("response.output_item.done"); err != nil {
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
	return e.appendResponse(make([]byte, 0, 512+len(e.text)))
}

// appendPartRef appends the members that locate the text part.
func (e *responseEncoder) appendPartRef(b []byte) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, e.r.messageID)
	return append(b, `,"output_index":0,"content_index":0`...)
}

// appendPart appends the output_text part: empty while it is being
// streamed, whole once done.
func (e *responseEncoder) appendPart(b []byte, whole bool) []byte {
	b = append(b, `{"type":"output_text","annotations":[],"logprobs":`...)
	if whole {
		b = appendResponseLogprobs(b, e.logprobs)
	} else {
		b = append(b, "[]"...)
	}
	b = append(b, `,"text":`...)
	if whole {
		b = appendString(b, string(e.text))
	} else {
		b = append(b, `""`...)
	}
	return append(b, '}')
}

// appendMessage appends the output message item; with whole its text part,
// else no content yet.
func (e *responseEncoder) appendMessage(b []byte, status string, whole bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, e.r.messageID)
	b = append(b, `,"type":"message","status":"`...)
	b = append(b, status...)
	b = append(b, `","role":"assistant","content":[`...)
	if whole {
		b = e.appendPart(b, true)
	}
	return append(b, "]}"...)
}

// appendResponse appends the response object as it stands: status, the
// output so far (a message whose item was opened), usage once finished.
func (e *responseEncoder) appendResponse(b []byte) []byte {
	r := e.r
	b = append(b, `{"id":`...)
	b = appendString(b, r.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = appendInt(b, int(r.createdAt))
	b = append(b, `,"status":"`...)
	b = append(b, e.status...)
	b = append(b, `","background":false,"completed_at":`...)
	if e.completedAt != 0 {
		b = appendInt(b, int(e.completedAt))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"error":`...)
	if e.err != nil {
		code := e.err.Code
		if code == "" {
			code = "server_error"
		}
		b = append(b, `{"code":`...)
		b = appendString(b, code)
		b = append(b, `,"message":`...)
		b = appendString(b, e.err.Message)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if e.status == statusIncomplete {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	if r.instructions != nil {
		b = appendString(b, *r.instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_output_tokens":`...)
	if r.maxOutputTokens > 0 {
		b = appendInt(b, r.maxOutputTokens)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_tool_calls":null,"model":`...)
	b = appendString(b, r.model)
	b = append(b, `,"output":[`...)
	if e.msgOpen && e.status != statusInProgress {
		status := e.status
		if status == statusFailed {
			status = statusIncomplete
		}
		b = e.appendMessage(b, status, true)
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":`...)
	b = appendNullableString(b, r.previousID)
	b = append(b, `,"reasoning":{"effort":null,"summary":null},"service_tier":"default","store":`...)
	b = strconv.AppendBool(b, r.store)
	b = append(b, `,"temperature":`...)
	b = appendFloat(b, r.temperature)
	b = append(b, `,"text":{"format":{"type":"text"}},"tool_choice":`...)
	b = append(b, r.toolChoice...)
	b = append(b, `,"tools":[],"top_logprobs":`...)
	b = appendInt(b, r.topLogprobs)
	b = append(b, `,"top_p":`...)
	b = appendFloat(b, r.topP)
	b = append(b, `,"truncation":"disabled","usage":`...)
	if e.usage != nil {
		b = e.usage.AppendJSON(b)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"user":`...)
	b = appendNullableString(b, r.user)
	b = append(b, `,"metadata":{`...)
	for i, k := range r.metadataKeys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, r.metadata[k])
	}
	return append(b, "}}"...)
}

// appendResponseLogprobs appends the Responses API's logprobs array
// [{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}…]}…].
func appendResponseLogprobs(b []byte, lps []engine.TokenLogprob) []byte {
	b = append(b, '[')
	for i := range lps {
		lp := &lps[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendTokenLogprob(b, lp.Token, lp.Bytes, lp.Logprob)
		b = append(b, `,"top_logprobs":[`...)
		for j := range lp.Top {
			if j > 0 {
				b = append(b, ',')
			}
			t := &lp.Top[j]
			b = appendTokenLogprob(b, t.Token, t.Bytes, t.Logprob)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, ']')
}
