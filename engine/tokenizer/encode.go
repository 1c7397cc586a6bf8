package tokenizer

import "strings"

// EncodeOptions control Encode.
type EncodeOptions struct {
	// AddSpecial puts BOS first and EOS last as Vocab.AddBOS and
	// Vocab.AddEOS say (llama.cpp's add_special).
	AddSpecial bool
	// ParseSpecial makes the texts of Control and Unknown tokens in the input
	// ("<s>", "</s>", "<unk>", chat markers) encode as those tokens; without
	// it they are ordinary text (llama.cpp's parse_special). UserDefined
	// tokens are matched verbatim either way, as in llama.cpp and Hugging
	// Face tokenizers.
	ParseSpecial bool
	// Continuation marks text that continues earlier output (a predicted
	// completion, say): its start gets no space prefix, so it encodes as
	// the model would have generated it.
	Continuation bool
}

// Encode returns the token ids of text. It never fails: text that no token
// spells (including invalid UTF-8) falls back to byte tokens, or to UNK where
// the vocabulary has no byte token for a byte.
//
// The SentencePiece rules, as llama.cpp applies them:
//   - With ParseSpecial the text is first cut at special-token texts, longest
//     token first, leftmost occurrences first; with it off only UserDefined
//     tokens cut.
//   - When Vocab.AddSpacePrefix is set, every piece of text that begins the
//     input or follows a special token (UserDefined ones included) gets one
//     space put before it (so "<s>Hi" and "Hi" both encode "Hi" as " Hi").
//     BOS added by AddSpecial does not change this.
//   - Spaces (U+0020 only) become U+2581; other whitespace stays as is.
//   - Each piece starts as one symbol per UTF-8 character and adjacent symbols
//     merge, highest-scoring merged token first, the leftmost pair on ties,
//     until no adjacent pair spells a token. A symbol that is no token is
//     spelled with byte tokens.
//
// The empty text encodes to no tokens (plus BOS/EOS by AddSpecial). BOS is
// added even when the text itself starts with "<s>" and ParseSpecial turns
// that into a second BOS, as in llama.cpp.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) []int {
	var out []int
	if opts.AddSpecial && t.vocab.AddBOS {
		out = append(out, t.vocab.BOS)
	}
	s := sessions.Get().(*spmSession)
	defer s.release()
	prevSpecial := !opts.Continuation
	for _, f := range t.partition(text, opts.ParseSpecial) {
		if f.token >= 0 {
			out = append(out, f.token)
			prevSpecial = true
			continue
		}
		piece := text[f.start:f.end]
		if t.vocab.AddSpacePrefix && prevSpecial {
			piece = " " + piece
		}
		out = s.encode(t, strings.ReplaceAll(piece, " ", spaceMark), out)
		prevSpecial = false
	}
	if opts.AddSpecial && t.vocab.AddEOS {
		out = append(out, t.vocab.EOS)
	}
	return out
}

// fragment is a special token (token >= 0) or the raw text text[start:end]
// (token -1).
type fragment struct {
	token      int
	start, end int
}

// partition cuts text at the texts of special tokens. Each special token in
// turn (longest first) claims its non-overlapping occurrences, searched left
// to right, inside the text fragments that earlier tokens left; empty text
// fragments are dropped.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{token: -1, start: 0, end: len(text)}}
	var next []fragment
	for _, id := range t.specials {
		if !parseSpecial && t.vocab.Types[id] != UserDefined {
			continue
		}
		tok := t.vocab.Tokens[id]
		if !strings.Contains(text, tok) {
			continue // cheap skip: no fragment can contain it either
		}
		next = next[:0]
		for _, f := range frags {
			if f.token >= 0 {
				next = append(next, f)
				continue
			}
			start := f.start
			for start < f.end {
				i := strings.Index(text[start:f.end], tok)
				if i < 0 {
					break
				}
				if i > 0 {
					next = append(next, fragment{token: -1, start: start, end: start + i})
				}
				next = append(next, fragment{token: id})
				start += i + len(tok)
			}
			if start < f.end {
				next = append(next, fragment{token: -1, start: start, end: f.end})
			}
		}
		frags, next = next, frags
	}
	return frags
}
