package tokenizer

import "unicode/utf8"

// Decode returns the text of ids as llama.cpp's server reports generated
// text: the concatenation of every token's Piece. In particular
//   - a leading space is kept: a first token "▁Once" decodes to " Once" (the
//     server does not strip it from generated text; llama.cpp's
//     llama_detokenize, which does, is not what clients see);
//   - Control, Unknown and Unused tokens (BOS, EOS, <unk>) and invalid ids
//     contribute nothing. So for valid UTF-8 text s that holds no special
//     token text and no U+2581 (which decodes as a space),
//     Decode(Encode(s, AddSpecial)) is " "+s when the vocabulary adds a
//     space prefix and has byte tokens (both Llama 2 models do);
//   - bytes that do not form valid UTF-8 become U+FFFD, one per maximal
//     invalid subsequence (as the Unicode standard recommends), so the result
//     is always valid UTF-8.
//
// Decode(ids) equals the concatenated output of a Decoder fed ids, then
// flushed.
func (t *Tokenizer) Decode(ids []int) string {
	var buf []byte
	for _, id := range ids {
		buf = append(buf, t.Piece(id)...)
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	out, _ := appendValidUTF8(nil, buf, true)
	return string(out)
}

// Decoder turns a stream of token ids into text that never splits a UTF-8
// character, for streaming generated text. It is owned by one goroutine.
type Decoder struct {
	t *Tokenizer
	// held are the bytes of a character that has begun but not completed.
	held []byte
}

// NewDecoder returns a Decoder with nothing held.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Add returns the text that id completes: its Piece joined to the bytes held
// from earlier tokens, up to the last complete character. The bytes of a
// character that can still complete (at most three) are held for the next
// call; bytes that can never be valid are returned as U+FFFD at once. The
// result is always valid UTF-8 and may be empty.
func (d *Decoder) Add(id int) string {
	p := d.t.Piece(id)
	if len(d.held) == 0 && utf8.Valid(p) {
		return string(p)
	}
	d.held = append(d.held, p...)
	out, n := appendValidUTF8(nil, d.held, false)
	d.held = d.held[:copy(d.held, d.held[n:])]
	return string(out)
}

// Flush returns what is held, as U+FFFD (a held sequence never completed),
// and empties the Decoder. It returns "" when nothing is held.
func (d *Decoder) Flush() string {
	if len(d.held) == 0 {
		return ""
	}
	out, _ := appendValidUTF8(nil, d.held, true)
	d.held = d.held[:0]
	return string(out)
}

// appendValidUTF8 appends p to dst with every maximal invalid subsequence
// replaced by U+FFFD and returns how many bytes of p it consumed. When final
// is false an incomplete but so far valid sequence at the end of p is left
// unconsumed; when final is true it too becomes U+FFFD.
func appendValidUTF8(dst, p []byte, final bool) ([]byte, int) {
	const replacement = "\uFFFD"
	i := 0
	for i < len(p) {
		b := p[i]
		if b < utf8.RuneSelf {
			dst = append(dst, b)
			i++
			continue
		}
		n, lo, hi := seqBounds(b)
		if n == 0 {
			dst = append(dst, replacement...)
			i++
			continue
		}
		j := 1
		for ; j < n; j++ {
			if i+j == len(p) {
				if !final {
					return dst, i
				}
				break
			}
			c := p[i+j]
			if j > 1 {
				lo, hi = 0x80, 0xBF
			}
			if c < lo || c > hi {
				break
			}
		}
		if j < n {
			dst = append(dst, replacement...)
		} else {
			dst = append(dst, p[i:i+n]...)
		}
		i += j
	}
	return dst, i
}

// seqBounds returns, for a lead byte b >= 0x80, the length of its sequence
// and the range its second byte must fall in (which excludes overlong forms,
// surrogates and code points above U+10FFFF); n is 0 when b cannot start a
// sequence.
func seqBounds(b byte) (n int, lo, hi byte) {
	switch {
	case b >= 0xC2 && b <= 0xDF:
		return 2, 0x80, 0xBF
	case b == 0xE0:
		return 3, 0xA0, 0xBF
	case b == 0xED:
		return 3, 0x80, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		return 3, 0x80, 0xBF
	case b == 0xF0:
		return 4, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		return 4, 0x80, 0xBF
	case b == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
