package native

import (
	"strings"

	"rill/engine/tokenizer"
)

// Reasoning models (Qwen 3, QwQ, the DeepSeek-R1 distills) think in a block
// between <think> and </think> before they answer. For chat requests the
// engine splits a choice's output at the block's markers, token by token:
// the block's text streams as Event.Reasoning (delta.reasoning_content),
// the rest as Event.Text, and Stats.ReasoningTokens counts the block's
// tokens exactly.
//
// What counts: every token generated while the block is open, the markers
// included: an opening <think> the model writes itself, the text, and the
// closing </think> (or the end-of-generation token, should the model stop
// inside the block). So completion_tokens − reasoning_tokens is exactly the
// number of tokens of the answer. vLLM (since its streaming parser engine,
// PR #45802) counts only the tokens between the markers, one or two fewer
// per choice. The markers' own text is in neither stream; whitespace after
// </think> ("\n\n" for Qwen 3) is the answer's, as vLLM streams it, so
// reasoning + content is the raw output less the markers.
//
// Where the block starts: a template may open it in the generation prompt
// (DeepSeek-R1's ends with "<think>\n"; QwQ's too), so the output starts
// inside it; a template switched off (Qwen 3 with enable_thinking false
// renders an empty "<think>\n\n</think>\n\n") closed it, so the output is
// all answer; otherwise the model may open the block with its first token,
// as Qwen 3 does.

// thinkMarkers are the token ids of a model's thinking-block markers.
type thinkMarkers struct {
	open, close int // -1: the model does not reason
	openText    string
	closeText   string
}

// Marker texts of the thinking block, as Qwen 3, QwQ and the DeepSeek-R1
// distills spell them (added tokens of their vocabularies).
const (
	thinkOpenText  = "<think>"
	thinkCloseText = "</think>"
)

// findThinkMarkers returns the markers of a model that reasons: its
// vocabulary has both markers as single tokens and its chat template
// writes the opening one (in the generation prompt or around earlier
// reasoning). Otherwise the model does not reason (-1, -1).
func findThinkMarkers(tok *tokenizer.Tokenizer, templateSource string) thinkMarkers {
	none := thinkMarkers{open: -1, close: -1}
	if !strings.Contains(templateSource, thinkOpenText) {
		return none
	}
	ids := tok.Encode(thinkOpenText+thinkCloseText, tokenizer.EncodeOptions{ParseSpecial: true})
	if len(ids) != 2 || tok.Text(ids[0]) != thinkOpenText || tok.Text(ids[1]) != thinkCloseText {
		return none
	}
	return thinkMarkers{open: ids[0], close: ids[1], openText: thinkOpenText, closeText: thinkCloseText}
}

// reasons reports whether the model reasons.
func (m thinkMarkers) reasons() bool { return m.open >= 0 }

// thinkPhase is where a choice's output stands with respect to the
// thinking block.
type thinkPhase uint8

const (
	// phaseNone: no split (a completion request, or a model that does
	// not reason); Stats.ReasoningTokens stays nil.
	phaseNone thinkPhase = iota
	// phaseMayOpen: the next token may open the block; anything else
	// starts the answer.
	phaseMayOpen
	// phaseThinking: inside the block.
	phaseThinking
	// phaseAnswer: the block is over (or never opened).
	phaseAnswer
)

// startPhase reads where a chat's output starts from its rendered prompt:
// inside the block when the prompt ends with the opening marker (white
// space aside), in the answer when it ends with the closing one (a block
// the template closed: thinking switched off), else where the model may
// open the block.
func (m thinkMarkers) startPhase(prompt string) thinkPhase {
	if !m.reasons() {
		return phaseNone
	}
	tail := strings.TrimRight(prompt, " \t\r\n")
	switch {
	case strings.HasSuffix(tail, m.openText):
		return phaseThinking
	case strings.HasSuffix(tail, m.closeText):
		return phaseAnswer
	}
	return phaseMayOpen
}

// thinkSplit is one choice's position in its output's thinking block and
// its count of reasoning tokens.
type thinkSplit struct {
	phase  thinkPhase
	tokens int
}

// next moves the split past tok and reports whether tok is a marker (its
// text belongs to neither stream) and whether the text tok adds, or the
// text held before a marker, is reasoning.
func (s *thinkSplit) next(m thinkMarkers, tok int) (marker, reasoning bool) {
	switch s.phase {
	case phaseMayOpen:
		if tok == m.open {
			s.phase = phaseThinking
			s.tokens++
			return true, true
		}
		s.phase = phaseAnswer
	case phaseThinking:
		s.tokens++
		if tok == m.close {
			s.phase = phaseAnswer
			return true, true
		}
		return false, true
	}
	return false, false
}

// thinking reports whether text now goes to the reasoning stream.
func (s *thinkSplit) thinking() bool { return s.phase == phaseThinking }
