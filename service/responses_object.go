package service

import (
	"strconv"

	"rill/engine"
)

// The Responses API's response object, its output items and its usage, as
// the encoder (responses_events.go) writes them into events and the plain
// JSON answer.

// ResponseUsage is the usage of the Responses API: the counts of Usage
// under the names OpenAI gives them there (docs/design.md §3 rule 12). Unlike
// chat's, its cached, cache-write and reasoning counts are always sent:
// OpenAI's schema requires input_tokens_details.cached_tokens,
// input_tokens_details.cache_write_tokens and
// output_tokens_details.reasoning_tokens, and typed clients (the openai
// npm SDK) and strict validators reject a usage without them.
type ResponseUsage struct {
	InputTokens  int
	OutputTokens int
	TotalTokens  int
	// CachedTokens is input_tokens_details.cached_tokens.
	CachedTokens int
	// CacheWriteTokens is input_tokens_details.cache_write_tokens: input
	// tokens newly written into the prefix cache.
	CacheWriteTokens int
	// ReasoningTokens is output_tokens_details.reasoning_tokens.
	ReasoningTokens int
	// AcceptedPredictionTokens and RejectedPredictionTokens are rill's
	// extension of output_tokens_details, present exactly when drafting was
	// active, as in chat's completion_tokens_details.
	AcceptedPredictionTokens *int
	RejectedPredictionTokens *int
}

// ResponseUsageOf renames u: prompt tokens are input tokens, completion
// tokens output tokens. A count the engine did not measure is 0: the
// schema has no "not measured" for them, and 0 claims nothing (no tokens
// read from or written to a cache, none reasoned). That is the case of a
// model that does not reason, of an engine without a prefix cache, and of
// upstream engines that report no cache writes (vLLM, SGLang, tabbyAPI).
// The draft counters keep their presence. It is pure.
func ResponseUsageOf(u Usage) ResponseUsage {
	or0 := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	return ResponseUsage{
		InputTokens:              u.PromptTokens,
		OutputTokens:             u.CompletionTokens,
		TotalTokens:              u.TotalTokens,
		CachedTokens:             or0(u.CachedTokens),
		CacheWriteTokens:         or0(u.CacheWriteTokens),
		ReasoningTokens:          or0(u.ReasoningTokens),
		AcceptedPredictionTokens: u.AcceptedPredictionTokens,
		RejectedPredictionTokens: u.RejectedPredictionTokens,
	}
}

// AppendJSON appends the usage object, both details objects always:
// {"input_tokens":I,"output_tokens":O,"total_tokens":T,
// "input_tokens_details":{"cached_tokens":C,"cache_write_tokens":W},
// "output_tokens_details":{"reasoning_tokens":R}} (and the draft counters
// after reasoning_tokens when drafting).
func (u *ResponseUsage) AppendJSON(b []byte) []byte {
	b = appendUsageCounts(b, "input_tokens", "output_tokens", u.InputTokens, u.OutputTokens, u.TotalTokens)
	b = appendUsageDetails(b, "input_tokens_details",
		usageField{"cached_tokens", &u.CachedTokens},
		usageField{"cache_write_tokens", &u.CacheWriteTokens})
	b = appendUsageDetails(b, "output_tokens_details",
		usageField{"reasoning_tokens", &u.ReasoningTokens},
		usageField{"accepted_prediction_tokens", u.AcceptedPredictionTokens},
		usageField{"rejected_prediction_tokens", u.RejectedPredictionTokens})
	return append(b, '}')
}

// appendPart appends a message's output_text part: empty while it is being
// streamed, whole once done.
func appendPart(b []byte, it *outputItem, whole bool) []byte {
	b = append(b, `{"type":"output_text","annotations":[],"logprobs":`...)
	if whole {
		b = appendResponseLogprobs(b, it.logprobs)
	} else {
		b = append(b, "[]"...)
	}
	b = append(b, `,"text":`...)
	if whole {
		b = appendString(b, string(it.text))
	} else {
		b = append(b, `""`...)
	}
	return append(b, '}')
}

// appendReasoningPart appends a reasoning item's reasoning_text part: empty
// while it is being streamed, whole once done.
func appendReasoningPart(b []byte, it *outputItem, whole bool) []byte {
	b = append(b, `{"type":"reasoning_text","text":`...)
	if whole {
		b = appendString(b, string(it.text))
	} else {
		b = append(b, `""`...)
	}
	return append(b, '}')
}

// appendItem appends an output item as its status stands (an item still
// open in a response that ended is incomplete): with whole its content,
// else as it opens (a message or reasoning without parts, a call with
// empty arguments or input). A reasoning item's summary is always empty
// (rill has no summarizer); whole, it has encrypted_content when the
// request included it. A call of a namespace's tool names its namespace.
func (e *responseEncoder) appendItem(b []byte, it *outputItem, whole bool) []byte {
	status := it.status
	if status == statusInProgress && e.status != statusInProgress {
		status = statusIncomplete
	}
	b = append(b, `{"id":`...)
	b = appendString(b, it.id)
	switch it.kind {
	case itemFunctionCall, itemCustomCall:
		typ, payload, payloadName := "function_call", string(it.arguments), `,"arguments":`
		if it.kind == itemCustomCall {
			typ, payload, payloadName = "custom_tool_call", it.customInput(), `,"input":`
		}
		b = append(b, `,"type":"`...)
		b = append(b, typ...)
		b = append(b, `","status":"`...)
		b = append(b, status...)
		b = append(b, '"')
		b = append(b, payloadName...)
		if whole {
			b = appendString(b, payload)
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"call_id":`...)
		b = appendString(b, it.callID)
		b = append(b, `,"name":`...)
		b = appendString(b, it.name)
		if it.namespace != "" {
			b = append(b, `,"namespace":`...)
			b = appendString(b, it.namespace)
		}
		return append(b, '}')
	case itemReasoning:
		b = append(b, `,"type":"reasoning","status":"`...)
		b = append(b, status...)
		b = append(b, `","summary":[],"content":[`...)
		if whole {
			b = appendReasoningPart(b, it, true)
		}
		b = append(b, ']')
		if whole && e.r.encryptReasoning {
			if it.sealed == "" {
				// Sealed once: the item's done event and the response
				// carry the same encrypted_content.
				it.sealed = processSealer.seal(string(it.text))
			}
			b = append(b, `,"encrypted_content":`...)
			b = appendString(b, it.sealed)
		}
		return append(b, '}')
	default:
		b = append(b, `,"type":"message","status":"`...)
		b = append(b, status...)
		b = append(b, `","role":"assistant","content":[`...)
		if whole {
			b = appendPart(b, it, true)
		}
		return append(b, "]}"...)
	}
}

// appendResponse appends the response object as it stands: status, the
// output once it ended (every item opened), usage once finished.
func (e *responseEncoder) appendResponse(b []byte) []byte {
	r := e.r
	b = append(b, `{"id":`...)
	b = appendString(b, r.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = appendInt(b, int(r.createdAt))
	b = append(b, `,"status":"`...)
	b = append(b, e.status...)
	b = append(b, `","background":`...)
	b = strconv.AppendBool(b, r.background)
	b = append(b, `,"completed_at":`...)
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
	if e.status != statusInProgress {
		for i, it := range e.items {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.appendItem(b, it, true)
		}
	}
	b = append(b, `],"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, r.parallelToolCalls)
	b = append(b, `,"previous_response_id":`...)
	b = appendNullableString(b, r.previousID)
	b = append(b, `,"reasoning":`...)
	b = r.appendReasoningEcho(b)
	b = append(b, `,"service_tier":"default","store":`...)
	b = strconv.AppendBool(b, r.store)
	b = append(b, `,"temperature":`...)
	b = appendFloat(b, r.temperature)
	b = append(b, `,"text":{"format":`...)
	b = append(b, r.textFormat...)
	b = append(b, `},"tool_choice":`...)
	b = append(b, r.toolChoice...)
	b = append(b, `,"tools":`...)
	b = append(b, r.tools...)
	b = append(b, `,"top_logprobs":`...)
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

// appendResponseLogprobs appends a logprobs array
// [{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}…]}…]:
// the Responses API's, and the content of chat's logprobs object.
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
