package service

import (
	"encoding/json"
	"fmt"

	"rill/engine"
)

// Reasoning on the Responses API. A reasoning model's thinking block
// (engine.Event.Reasoning, chat's reasoning_content) is a reasoning output
// item, {"type":"reasoning","id":"rs_…","summary":[],"content":[{"type":
// "reasoning_text","text":…}]}, before the answer it precedes; its tokens
// are output_tokens_details.reasoning_tokens, as chat counts them. The
// request's reasoning.effort turns thinking off or leaves it on; reasoning
// items in the input are the reasoning of the assistant turn that follows
// them, as chat's reasoning_content is (engine.Message.ReasoningContent),
// for templates that render earlier reasoning.

// responseReasoning is the request's reasoning member.
type responseReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
	// GenerateSummary is summary's deprecated name.
	GenerateSummary *string `json:"generate_summary"`
}

// includeReasoningEncrypted is the include value that asks for reasoning
// items' encrypted_content, so that a client can send them back with store
// false and without their content (Codex does): rill's is the reasoning
// text sealed under a key of the process (responses_seal.go).
const includeReasoningEncrypted = "reasoning.encrypted_content"

// thinkingOff reports whether effort asks a reasoning model not to think:
// "none" and "minimal" turn its thinking block off, every other effort
// leaves it on (rill has no budget to make thinking shorter or longer).
func thinkingOff(effort string) bool { return effort == "none" || effort == "minimal" }

// applyReasoning maps r.reasoning onto req and the job's echo. An effort
// that turns thinking off is enable_thinking false for the chat template,
// as chat's chat_template_kwargs says it: reasoning models' templates then
// close an empty block and the model answers at once (reasoning_tokens 0).
// Other efforts leave the template's default, which is thinking on for
// every model rill finds reasoning in. A model that does not reason has a
// template that reads no enable_thinking, so the effort changes nothing
// there, as OpenAI ignores it for such models. summary is echoed and has no
// effect: rill has no summarizer, and its reasoning items' summary is
// always empty.
func applyReasoning(r *responseRequest, req *engine.Request, p *responseJob) {
	rs := r.Reasoning
	if rs == nil {
		return
	}
	if rs.Effort != nil {
		p.reasoningEffort = *rs.Effort
		req.ReasoningEffort = *rs.Effort
		if thinkingOff(*rs.Effort) {
			req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
		}
	}
	switch {
	case rs.Summary != nil:
		p.reasoningSummary = *rs.Summary
	case rs.GenerateSummary != nil:
		p.reasoningSummary = *rs.GenerateSummary
	}
}

// appendReasoningEcho appends the response object's reasoning member: the
// request's effort and summary, null when it sent none.
func (rp *responseJob) appendReasoningEcho(b []byte) []byte {
	b = append(b, `{"effort":`...)
	b = appendNullableString(b, rp.reasoningEffort)
	b = append(b, `,"summary":`...)
	b = appendNullableString(b, rp.reasoningSummary)
	return append(b, '}')
}

// reasoningItem reads a reasoning input item: the text of its content's
// reasoning_text parts, concatenated, or without content the text sealed
// in its encrypted_content. Its summary is accepted and ignored: a summary
// is not what the model thought. encrypted_content that rill did not seal
// (OpenAI's, another server's, one from before a restart, or one changed
// since) adds no text and a warning: the reasoning of an earlier turn is
// context the model can do without, which most chat templates do not show
// anyway.
func reasoningItem(it *responseInputItem, param string, warn *warnings) (string, *apiError) {
	var parts []contentPart
	if !isNull(it.Content) {
		if err := json.Unmarshal(it.Content, &parts); err != nil {
			return "", invalid(param+".content", "invalid_type", "Invalid type for '%s.content': expected an array of reasoning_text parts.", param)
		}
	}
	if len(parts) == 0 {
		if it.EncryptedContent == nil || *it.EncryptedContent == "" {
			return "", nil
		}
		text, ok := processSealer.open(*it.EncryptedContent)
		if !ok {
			warn.add("%s.encrypted_content is left out: this server did not make it (another server or an earlier run did), or it was changed.", param)
		}
		return text, nil
	}
	var b []byte
	for j, part := range parts {
		if part.Type != "reasoning_text" {
			return "", invalid(fmt.Sprintf("%s.content[%d].type", param, j), "invalid_value",
				"Invalid value for '%s.content[%d].type': a reasoning item's content holds reasoning_text parts, not '%s'.", param, j, clip(part.Type, maxEchoBytes))
		}
		if part.Text == nil {
			return "", missingPartField(param+".content", j, "text")
		}
		b = append(b, *part.Text...)
	}
	return string(b), nil
}

// isReasoningOnly reports whether m stands for a reasoning item: an
// assistant message with reasoning and nothing else (a stored reasoning
// item, referred to by its id, reads so).
func isReasoningOnly(m engine.Message) bool {
	return m.Role == engine.RoleAssistant && m.ReasoningContent != "" && m.Content == "" && len(m.ToolCalls) == 0
}
