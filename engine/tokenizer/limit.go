package tokenizer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrTooManyTokens is what a *TooLongError is (errors.Is): the text has
// more tokens than EncodeOptions.MaxTokens allows.
var ErrTooManyTokens = errors.New("too many tokens")

// TooLongError is EncodeContext's error when a text has more tokens than
// EncodeOptions.MaxTokens. Encoding stopped as soon as that was certain,
// so Tokens is a lower bound, not the text's token count.
type TooLongError struct {
	// MaxTokens is the limit the text went over.
	MaxTokens int
	// Tokens is at least the number of tokens the whole text encodes to
	// (BOS and EOS included), and more than MaxTokens.
	Tokens int
	// Encoded is how many bytes of the text were merged into tokens before
	// encoding stopped (the special-token scan always reads all of it); the
	// rest was bounded without merging.
	Encoded int
	// Bytes is the length of the text.
	Bytes int
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("text of %d bytes has at least %d tokens, more than the limit of %d", e.Bytes, e.Tokens, e.MaxTokens)
}

// Unwrap makes errors.Is(err, ErrTooManyTokens) hold.
func (e *TooLongError) Unwrap() error { return ErrTooManyTokens }

// tokenLimit tracks an encode against EncodeOptions.MaxTokens.
type tokenLimit struct {
	on        bool
	maxTokens int
	// room is MaxTokens less the tokens still certain to come: EOS, and
	// the lower bounds of the fragments not encoded yet.
	room    int
	encoded int // input bytes merged so far
	bytes   int // len(text)
}

// over reports whether tokens (those produced so far, or a lower bound on
// them) leave no room, and then sets *err to the TooLongError.
func (l *tokenLimit) over(tokens int, err *error) bool {
	if !l.on || tokens <= l.room {
		return false
	}
	*err = &TooLongError{MaxTokens: l.maxTokens, Tokens: tokens + l.maxTokens - l.room, Encoded: l.encoded, Bytes: l.bytes}
	return true
}

// computeBounds sets what minTokens and fragmentTokens need: which bytes
// merging may drop (t.droppable), and whether the bounds hold at all
// (t.boundsHold). Their premise is that every token merging emits covers
// at least one byte of the word and at most as many as its length, so that
// the bytes no token can drop need at least bytes / longest token tokens.
// Byte-level BPE breaks it where a merge makes a symbol that is no token
// (spelled by the bytes of its GPT-2 text, possibly in no token at all);
// no real vocabulary does. A byte whose symbol is no token (Falcon's
// control bytes) or, elsewhere, that has no byte token may be dropped, so
// the bounds count only the other bytes.
func (t *Tokenizer) computeBounds() {
	t.boundsHold = true
	for b := range 256 {
		if t.bpe != nil && t.bpe.byteLevel {
			t.droppable[b] = int(t.bpe.byteSymbol[b]) >= t.Size()
		} else {
			t.droppable[b] = t.byteToken[b] < 0
		}
		t.dropsBytes = t.dropsBytes || t.droppable[b]
	}
	if t.bpe != nil && t.bpe.byteLevel {
		for _, result := range t.bpe.results {
			if int(result) >= t.Size() {
				t.boundsHold = false
			}
		}
	}
}

// keptBytes counts the bytes of s that merging cannot drop.
func keptBytes[S ~string | ~[]byte](t *Tokenizer, s S) int {
	if !t.dropsBytes {
		return len(s)
	}
	kept := 0
	for i := range len(s) {
		if !t.droppable[s[i]] {
			kept++
		}
	}
	return kept
}

// longWordBytes is the length from which minTokens also scans the
// vocabulary for the longest token the word's bytes can spell: the scan
// costs about as much as merging a word of that length.
const longWordBytes = 16 << 10

// minTokens returns a lower bound on the tokens that merging word gives:
// word is what merging sees, the raw bytes of a pre-tokenized word for
// byte-level BPE, the canonical or escaped text of a word or chunk
// otherwise (appendMerged). room is how many more tokens fit; a word that
// could fit (no longer than room) only gets the cheap bound, and so does
// escaped text (canonical false; byte-level words are canonical). It returns 0 where the vocabulary gives no
// bound (boundsHold).
//
// Each token covers at most MaxTokenBytes bytes of word, and, finer, at
// most the length of the longest token that consists of bytes word holds:
// a run of one letter or of random letters is spelt with short tokens.
// Bytes merging may drop are not counted (computeBounds).
func minTokens[S ~string | ~[]byte](t *Tokenizer, word S, room int, canonical bool) int {
	if !t.boundsHold {
		return 0
	}
	n := keptBytes(t, word)
	bound := ceilDiv(n, t.maxTokenBytes)
	if bound > room || n < longWordBytes || n <= room || !canonical {
		return bound
	}
	var set [256]bool
	for i := range len(word) {
		set[word[i]] = true
	}
	return max(bound, ceilDiv(n, t.longestWithin(&set)))
}

// longestWithin returns the length in bytes of the longest token that
// merging can emit whose bytes all lie in set, at least 1: for byte-level
// BPE the bytes a Normal token stands for, and those of the other tokens
// that merges or the byte alphabet make (specialSymbols); otherwise a
// token's text in canonical form (U+2581 as a space), byte tokens (<0xXX>)
// counting one.
func (t *Tokenizer) longestWithin(set *[256]bool) int {
	best := 1
	if t.byteLevel {
		for _, spelt := range t.bpe.specialSymbols {
			if len(spelt) > best && allIn(spelt, set) {
				best = len(spelt)
			}
		}
	}
	types := t.vocab.Types
	for id, text := range t.vocab.Tokens {
		switch {
		case types[id] == Byte:
		case t.byteLevel && types[id] != Normal:
			// in specialSymbols if merging can make it
		case t.byteLevel:
			if piece := t.pieces[id]; len(piece) > best && allIn(piece, set) {
				best = len(piece)
			}
		default:
			if len(text) > best {
				if n, ok := canonicalIn(text, set); ok {
					best = max(best, n)
				}
			}
		}
	}
	return best
}

// allIn reports whether every byte of s lies in set.
func allIn[S ~string | ~[]byte](s S, set *[256]bool) bool {
	for i := range len(s) {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

// canonicalIn returns the length of text in canonical form (every U+2581 a
// space) and whether all of its bytes in that form lie in set.
func canonicalIn(text string, set *[256]bool) (int, bool) {
	n := 0
	for i := 0; i < len(text); n++ {
		if strings.HasPrefix(text[i:], spaceMark) {
			if !set[' '] {
				return 0, false
			}
			i += len(spaceMark)
			continue
		}
		if !set[text[i]] {
			return 0, false
		}
		i++
	}
	return n, true
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
