package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Reasoning models think in a block before they answer; the block streams
// as reasoning_content and its tokens are usage's
// completion_tokens_details.reasoning_tokens (docs/design.md §3 rule 9).

// ChoiceText is what one choice said: its answer (a chat's content or a
// legacy completion's text) and its reasoning (reasoning_content).
type ChoiceText struct {
	Content, Reasoning string
}

// ChoiceTexts returns, per choice index 0..n-1, the text the stream
// carried.
func (t *Transcript) ChoiceTexts(n int) ([]ChoiceText, error) {
	out := make([]ChoiceText, n)
	for i, raw := range t.Chunks {
		var c struct {
			Choices []struct {
				Index   int          `json:"index"`
				Text    *string      `json:"text"`
				Delta   *textMembers `json:"delta"`
				Message *textMembers `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		for _, ch := range c.Choices {
			if ch.Index < 0 || ch.Index >= n {
				return nil, fmt.Errorf("chunk %d has choice index %d, want 0..%d", i, ch.Index, n-1)
			}
			o := &out[ch.Index]
			if ch.Text != nil {
				o.Content += *ch.Text
			}
			for _, m := range []*textMembers{ch.Delta, ch.Message} {
				if m == nil {
					continue
				}
				if m.Content != nil {
					o.Content += *m.Content
				}
				if m.ReasoningContent != nil {
					o.Reasoning += *m.ReasoningContent
				}
			}
		}
	}
	return out, nil
}

// textMembers are the text members of a delta or message.
type textMembers struct {
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
}

// ResponseChoiceTexts is ChoiceTexts for a non-streamed response body.
func ResponseChoiceTexts(body []byte, n int) ([]ChoiceText, error) {
	t := &Transcript{Chunks: []json.RawMessage{body}}
	return t.ChoiceTexts(n)
}

// ProbeReasoning reports whether model on t reasons: whether a chat
// completion's usage carries completion_tokens_details.reasoning_tokens
// (present for every chat of a model that reasons, 0 when it did not); if
// not, why.
func ProbeReasoning(ctx context.Context, t *Target, model string) (bool, string) {
	body := Chat.Body(model, "Why is the sky blue? Think briefly.", map[string]any{"max_tokens": 8})
	r, err := t.Post(ctx, Chat.Path, body)
	if err != nil {
		return false, fmt.Sprintf("reasoning probe of model %q failed: %v", model, err)
	}
	if r.Status != http.StatusOK {
		return false, fmt.Sprintf("reasoning probe: model %q answered %d: %s", model, r.Status, clip(r.Body))
	}
	_, u, err := ResponseUsage(r.Body)
	switch {
	case err != nil || u == nil:
		return false, fmt.Sprintf("reasoning probe: model %q sent no readable usage (%v)", model, err)
	case u.ReasoningTokens == nil:
		return false, fmt.Sprintf("model %q reports no completion_tokens_details.reasoning_tokens (it does not reason); set %s to a model that does", model, EnvReasoningModel)
	}
	return true, ""
}
