package tokenizer

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// EncodeOptions control Encode.
type EncodeOptions struct {
	// AddSpecial puts BOS first and EOS last as Vocab.AddBOS and
	// Vocab.AddEOS say (llama.cpp's add_special).
	AddSpecial bool
	// ParseSpecial makes the texts of Control and Unknown tokens in the input
	// ("<s>", "</s>", "<|im_start|>", "<|eot_id|>") encode as those tokens;
	// without it they are ordinary text (llama.cpp's parse_special). Set it
	// for text a chat template wrote, never for text a user wrote; a
	// rendered prompt holds both, so give it Plain as well (see
	// chat.Template.RenderPrompt).
	// UserDefined tokens (added tokens such as Qwen 3's "<think>") are
	// matched verbatim either way, as in llama.cpp and Hugging Face
	// tokenizers.
	ParseSpecial bool
	// Continuation marks text that continues earlier output (a predicted
	// completion, say): its start gets no space prefix, so it encodes as
	// the model would have generated it. Only SentencePiece vocabularies
	// add a space prefix; for the others it changes nothing.
	Continuation bool
	// Plain lists byte ranges of the text, sorted and not overlapping,
	// that encode as if ParseSpecial were off: a Control or Unknown
	// token's text that overlaps one is ordinary text. With ParseSpecial
	// this encodes a rendered chat prompt whole (so merges across the
	// boundaries are the model's) while the special-token texts that came
	// from user data (chat.Prompt.UserSpecials) stay text.
	Plain []Span
	// MaxTokens, when positive, is the most tokens EncodeContext may return
	// (BOS and EOS included); pass the context positions the prompt may
	// use. EncodeContext stops as soon as the text is certain to have more,
	// and returns nil and a *TooLongError (errors.Is ErrTooManyTokens): it
	// refuses a text whose length alone rules it out (more than MaxTokens x
	// MaxTokenBytes bytes outside special tokens) before merging anything,
	// and otherwise merges little more than the first MaxTokens tokens'
	// worth of text, one pre-tokenized word or SentencePiece chunk past the
	// limit at most. A text that fits encodes to exactly the ids it does
	// without a limit. Encode ignores MaxTokens.
	MaxTokens int
}

// Span is the byte range [Start, End) of a text.
type Span struct {
	Start, End int
}

// normalizeSpans returns spans sorted and merged where they overlap; spans
// that already are come back as they are.
func normalizeSpans(spans []Span) []Span {
	ok := true
	for i, sp := range spans {
		if sp.End < sp.Start || (i > 0 && sp.Start < spans[i-1].End) {
			ok = false
			break
		}
	}
	if ok {
		return spans
	}
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b Span) int { return a.Start - b.Start })
	out := sorted[:0]
	for _, sp := range sorted {
		if sp.End <= sp.Start {
			continue
		}
		if n := len(out); n > 0 && sp.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, sp.End)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// overlaps reports whether [start, end) overlaps a span of sorted spans.
func overlaps(spans []Span, start, end int) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].End > start })
	return i < len(spans) && spans[i].Start < end
}

// Encode returns the token ids of text. It never fails: text that no token
// spells (including invalid UTF-8) falls back to byte tokens, or to UNK where
// the vocabulary has no byte token for a byte.
//
// Common to all models, as llama.cpp applies them:
//   - With ParseSpecial the text is first cut at special-token texts, longest
//     token first, leftmost occurrences first; with it off only UserDefined
//     tokens cut. A token in Vocab.LStrip or Vocab.RStrip drops the ASCII
//     whitespace next to it.
//   - BOS (AddSpecial and Vocab.AddBOS) comes first even when the text
//     itself starts with BOS's text and ParseSpecial turns that into a second
//     BOS; EOS likewise comes last.
//   - The empty text encodes to no tokens (plus BOS/EOS by AddSpecial).
//
// SentencePiece ("llama"):
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
// Byte-level BPE ("gpt2"):
//   - Each piece of text is split into words by the pre-tokenizer that
//     Vocab.Pre names (see PreTokenizers); invalid UTF-8 first becomes
//     U+FFFD, one per byte that starts no sequence, as in llama.cpp.
//   - A word that is itself a token is that token when Vocab.IgnoreMerges
//     is set. Otherwise its bytes are the symbols, and adjacent symbols
//     merge, lowest merge rank first, the leftmost pair on ties.
//
// WordPiece ("bert"):
//   - BOS ([CLS]) and SEP ([SEP]) frame the text with AddSpecial (Vocab.AddBOS,
//     Vocab.AddSEP); no space prefix.
//   - Each piece of text is normalised and split into words (see
//     Vocab.Lowercase, Vocab.StripAccents): whitespace separates words;
//     punctuation, ASCII symbols and CJK ideographs are words of their own;
//     NUL, U+FFFD (so invalid UTF-8) and control and format characters
//     vanish.
//   - Each word, with U+2581 before it, is cut from its start into the
//     longest tokens that match; a word that cannot be cut to its end is
//     one UNK.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) []int {
	opts.MaxTokens = 0
	ids, _ := t.encode(context.Background(), text, opts)
	return ids
}

// EncodeContext is Encode that stops when ctx ends: it checks ctx about
// every CheckBytes bytes of input (and every few thousand merges inside one
// long word) and then returns nil and ctx.Err(). With opts.MaxTokens it
// also stops when the text has too many tokens (see EncodeOptions). Its
// result is otherwise exactly Encode's.
//
// Memory: besides the result (one int per token) an encode uses scratch
// space that is linear in the longest piece that cannot be cut (a
// pre-tokenized word for BPE; a run of text between spaces for the
// SentencePiece vocabularies of Llama 2 and Phi-3, whose tokens never hold
// a space after another character), 20 bytes per byte of it for BPE and 16
// for SentencePiece, and in the number of special tokens the text holds.
// See BenchmarkEncodeRuns for the figures.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string, opts EncodeOptions) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.encode(ctx, text, opts)
}

// CheckBytes is how much input EncodeContext encodes between two looks at
// its context.
const CheckBytes = 4 << 10

// MaxTokenBytes is the largest number of input bytes one token can stand
// for: the longest token text in bytes, where a byte-fallback token
// ("<0xE2>") counts 1 and a byte-level BPE token that is not special counts
// one byte per character of its text (its text spells each input byte as
// one character of GPT-2's alphabet, "\u0120" for a space). So encoding B
// bytes of valid UTF-8 gives at least ceil(B / MaxTokenBytes()) tokens (BOS
// and EOS not counted), and a caller may refuse a prompt of B bytes without
// encoding it when B > MaxTokenBytes() * contextLength. Special tokens count
// with their full text, which only ParseSpecial (Control) or any text
// (UserDefined) lets them match; SentencePiece's space prefix only adds
// tokens.
//
// One exception: a token listed in Vocab.LStrip or Vocab.RStrip (Phi-3's
// special tokens, <|end|> say) also swallows the ASCII whitespace next to
// it, so for such vocabularies the bound holds for B counted without
// whitespace that touches those tokens. (Invalid UTF-8 can also break it for
// byte-level BPE, whose overlong forms shrink when normalised.)
//
// Figures: 48 for Llama 2 and Phi-3, 93 for Gemma 4, 128 for Llama 3 and
// Qwen 2, 512 for Command-R (the longest texts are runs of spaces or
// dashes).
//
// WordPiece ("bert") has no such bound: a word that cannot be cut into
// tokens is one UNK however long it is, and control characters and accents
// vanish. MaxTokenBytes is math.MaxInt32 there.
//
// EncodeOptions.MaxTokens applies this bound itself, without the
// exceptions (it bounds the text between special tokens, after stripping,
// and leaves out bytes a vocabulary can drop), together with finer ones.
func (t *Tokenizer) MaxTokenBytes() int { return t.maxTokenBytes }

// encodeState is the scratch space of one encode; pooled.
type encodeState struct {
	frags []fragment
	next  []fragment // partition's second buffer
	found []bool
	out   idBuffer
	spm   spmSession
	bpe   bpeSession
	wpm   wpmSession
	ugm   ugmSession
	buf   []byte
}

var encodeStates = sync.Pool{New: func() any { return new(encodeState) }}

// maxPooledFragments bounds the fragment list kept for reuse.
const maxPooledFragments = 1 << 12

func (st *encodeState) release() {
	st.out.release()
	if cap(st.frags) > maxPooledFragments || cap(st.next) > maxPooledFragments || !st.spm.small() || !st.bpe.small() || !st.wpm.small() || !st.ugm.small() || cap(st.buf) > 4*maxPooledSymbols {
		return
	}
	encodeStates.Put(st)
}

// canceller looks at a context every CheckBytes of progress (and merging
// looks every mergesPerCheck merges, through alive).
type canceller struct {
	ctx     context.Context
	done    <-chan struct{}
	pending int
	seen    int // bytes of progress in all
	err     error
	limit   tokenLimit
}

// over reports whether tokens, produced or certain to be, go over
// EncodeOptions.MaxTokens, and then sets c.err.
func (c *canceller) over(tokens int) bool { return c.limit.over(tokens, &c.err) }

// advance records n bytes of progress and reports whether to go on.
func (c *canceller) advance(n int) bool {
	c.seen += n
	if c.done == nil {
		return true
	}
	if c.pending += n; c.pending < CheckBytes {
		return true
	}
	c.pending = 0
	return c.alive()
}

// alive looks at the context now and reports whether to go on.
func (c *canceller) alive() bool {
	if c.done == nil {
		return true
	}
	select {
	case <-c.done:
		c.err = c.ctx.Err()
		return false
	default:
		return true
	}
}

func (t *Tokenizer) encode(ctx context.Context, text string, opts EncodeOptions) ([]int, error) {
	c := canceller{ctx: ctx, done: ctx.Done()}
	if opts.MaxTokens > 0 {
		c.limit = tokenLimit{on: true, maxTokens: opts.MaxTokens, room: opts.MaxTokens, bytes: len(text)}
		if opts.AddSpecial && t.vocab.AddEOS {
			c.limit.room-- // EOS comes last
		}
		if opts.AddSpecial && t.vocab.AddSEP {
			c.limit.room-- // and SEP after it
		}
	}
	st := encodeStates.Get().(*encodeState)
	defer st.release()
	if opts.AddSpecial && t.vocab.AddBOS {
		st.out.push(t.vocab.BOS)
	}
	opts.Plain = normalizeSpans(opts.Plain)
	if !t.partition(st, text, opts, &c) {
		return nil, c.err
	}
	if c.limit.on {
		// Every fragment still to come gives at least its bound: reserve
		// them all, and give each back when its turn comes.
		for _, f := range st.frags {
			c.limit.room -= t.fragmentTokens(text, f)
		}
		if c.over(st.out.n) {
			return nil, c.err
		}
	}
	prevSpecial := !opts.Continuation
	for _, f := range st.frags {
		if c.limit.on {
			c.limit.room += t.fragmentTokens(text, f)
		}
		if f.token >= 0 {
			st.out.push(f.token)
			prevSpecial = true
			continue
		}
		piece := text[f.start:f.end]
		var ok bool
		switch {
		case t.wpm != nil:
			ok = t.encodeWPM(st, piece, &c)
		case t.ugm != nil:
			ok = t.encodeUGM(st, piece, t.vocab.AddSpacePrefix && prevSpecial, &c)
		case t.bpe != nil:
			ok = t.encodeBPE(st, piece, &c)
		default:
			ok = t.encodeSPM(st, piece, t.vocab.AddSpacePrefix && prevSpecial, &c)
		}
		if !ok {
			return nil, c.err
		}
		prevSpecial = false
	}
	if opts.AddSpecial && t.vocab.AddEOS {
		st.out.push(t.vocab.EOS)
	}
	if opts.AddSpecial && t.vocab.AddSEP {
		st.out.push(t.vocab.SEP)
	}
	return st.out.take(), nil
}

// fragmentTokens is a lower bound on the tokens of fragment f of text: 1
// for a special token, and for text 1 per MaxTokenBytes bytes that merging
// cannot drop, where the vocabulary makes that bound hold (computeBounds).
// Byte-level BPE normalises invalid UTF-8 (overlong forms shrink), so such
// text gets no bound. A SentencePiece or Gemma 4 token covers at most as
// many raw bytes as its text has: each U+2581 of it covers a space (one
// byte) or a U+2581 (three).
func (t *Tokenizer) fragmentTokens(text string, f fragment) int {
	switch {
	case f.token >= 0:
		return 1
	case !t.boundsHold || (t.byteLevel && !utf8.ValidString(text[f.start:f.end])):
		return 0
	}
	return ceilDiv(keptBytes(t, text[f.start:f.end]), t.maxTokenBytes)
}

// encodeBPE appends the tokens of one piece of raw text. Before merging a
// word it checks that the word's lower bound (minTokens) fits the token
// limit, after it that the tokens so far do.
func (t *Tokenizer) encodeBPE(st *encodeState, piece string, c *canceller) bool {
	if !t.bpe.byteLevel {
		// Spaces are spelt word by word (appendMerged); the split (at
		// newlines) does not look at them.
		valid := utf8.ValidString(piece)
		return t.bpe.pre.split(piece, func(word string) bool {
			canonical := valid && len(word) >= t.canonicalFrom
			st.buf = appendMerged(st.buf[:0], word, canonical)
			if c.limit.on && c.over(st.out.n+minTokens(t, st.buf, c.limit.room-st.out.n, canonical)) {
				return false
			}
			ok := st.bpe.encodeChars(t, t.bpe, st.buf, &st.out, c)
			c.limit.encoded += len(word)
			return ok && !c.over(st.out.n) && c.advance(len(word))
		})
	}
	if !laxValid(piece) {
		piece = laxNormalize(piece)
	}
	return t.bpe.pre.split(piece, func(word string) bool {
		if c.limit.on && c.over(st.out.n+minTokens(t, word, c.limit.room-st.out.n, true)) {
			return false
		}
		ok := st.bpe.encodeWord(t, t.bpe, word, &st.out, c)
		c.limit.encoded += len(word)
		return ok && !c.over(st.out.n) && c.advance(len(word))
	})
}

// encodeSPM appends the tokens of one piece of raw text, space prefix
// included when prefix is set, checking the token limit as encodeBPE does
// around each chunk. The piece is merged in chunks cut where the
// vocabulary makes a cut exact (see spmCuts): no token can then span a cut,
// so no merge crosses one and every chunk merges as it would inside the
// whole. Cuts need valid UTF-8, which keeps symbols aligned with characters.
func (t *Tokenizer) encodeSPM(st *encodeState, piece string, prefix bool, c *canceller) bool {
	valid := utf8.ValidString(piece)
	for len(piece) > 0 {
		end := len(piece)
		if valid {
			end = t.spmCuts.next(piece)
		}
		canonical := valid && end >= t.canonicalFrom
		st.buf = st.buf[:0]
		if prefix {
			st.buf = appendMerged(st.buf, " ", canonical)
			prefix = false
		}
		st.buf = appendMerged(st.buf, piece[:end], canonical)
		if c.limit.on && c.over(st.out.n+minTokens(t, st.buf, c.limit.room-st.out.n, canonical)) {
			return false
		}
		ok := st.spm.encodeChunked(t, st.buf, &st.out, maxSPMChunk, c)
		c.limit.encoded += end
		if !ok || c.over(st.out.n) || !c.advance(end+1) {
			return false
		}
		piece = piece[end:]
	}
	return true
}

// maxSPMChunk is the most bytes merged at once: symbol offsets are int32.
const maxSPMChunk = 1<<31 - 1

// spmCuts says where SentencePiece text may be cut into chunks that merge
// independently.
type spmCuts struct {
	// beforeSpace: no token holds U+2581 right after another character, so
	// a cut may go before a space that follows a character other than a
	// space or U+2581 (which escapes to the same mark). True for Llama 2
	// and Phi-3.
	beforeSpace bool
	// isolated[b]: no token longer than one byte holds the ASCII byte b, so
	// b never merges and a cut may go on either side of it ('\n' in Llama 2).
	isolated [utf8.RuneSelf]bool
}

// newSPMCuts finds the cuts a vocabulary allows.
func newSPMCuts(tokens []string) spmCuts {
	c := spmCuts{beforeSpace: !slices.ContainsFunc(tokens, spaceAfterChar)}
	for b := range c.isolated {
		c.isolated[b] = b != ' '
	}
	for _, text := range tokens {
		if len(text) < 2 {
			continue
		}
		for i := 0; i < len(text); i++ {
			if text[i] < utf8.RuneSelf {
				c.isolated[text[i]] = false
			}
		}
	}
	return c
}

// next returns the end of the first chunk of s (valid UTF-8): the first
// allowed cut after position 0, or len(s).
func (c *spmCuts) next(s string) int {
	for i := 1; i < len(s); i++ {
		b, prev := s[i], s[i-1]
		switch {
		case b < utf8.RuneSelf && c.isolated[b], prev < utf8.RuneSelf && c.isolated[prev]:
			return i
		case c.beforeSpace && b == ' ' && prev != ' ' && !strings.HasSuffix(s[:i], spaceMark):
			return i
		}
	}
	return len(s)
}

// SentencePiece and Gemma 4 tokens spell a space as U+2581, and a U+2581
// in the input is the same symbol as a space. Text is merged escaped, every
// space as U+2581, as llama.cpp merges it, or, from canonicalBytes of valid
// UTF-8 up, in canonical form, every U+2581 as a space: one byte per space
// rather than three, so that a run of spaces costs no more merge state per
// input byte than any other text. Lookups spell the spaces back
// (spelling), which shorter text, the usual case, is spared. Invalid UTF-8
// is always merged escaped: there a byte that announces a longer sequence
// can swallow part of an escaped U+2581, which the canonical form cannot
// show.

// canonicalBytes is Tokenizer.canonicalFrom's value: the length from which
// a valid word or chunk is merged in canonical form.
const canonicalBytes = 1 << 10

// appendMerged appends s in the form merging takes: canonical or escaped.
func appendMerged(dst []byte, s string, canonical bool) []byte {
	if !canonical {
		return appendEscaped(dst, s)
	}
	dst = slices.Grow(dst, len(s))
	for {
		i := strings.Index(s, spaceMark)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, ' ')
		s = s[i+len(spaceMark):]
	}
}

// appendEscaped appends s with every space as U+2581, growing dst once to
// the exact size it needs.
func appendEscaped[S ~string | ~[]byte](dst []byte, s S) []byte {
	spaces := 0
	for i := range len(s) {
		if s[i] == ' ' {
			spaces++
		}
	}
	dst = slices.Grow(dst, len(s)+(len(spaceMark)-1)*spaces)
	for i := range len(s) {
		if s[i] == ' ' {
			dst = append(dst, spaceMark...)
		} else {
			dst = append(dst, s[i])
		}
	}
	return dst
}

// spelling returns the vocabulary's spelling of merged text: text itself,
// or, when it holds spaces (canonical text), the text with every space as
// U+2581 in *scratch.
func spelling(text []byte, scratch *[]byte) []byte {
	i := bytes.IndexByte(text, ' ')
	if i < 0 {
		return text
	}
	spelt := append((*scratch)[:0], text[:i]...)
	for i >= 0 {
		spelt = append(spelt, spaceMark...)
		text = text[i+1:]
		if i = bytes.IndexByte(text, ' '); i >= 0 {
			spelt = append(spelt, text[:i]...)
		}
	}
	spelt = append(spelt, text...)
	*scratch = spelt
	return spelt
}

// pushBytes appends the byte tokens that spell merged text byte by byte
// (a space as the bytes of U+2581); bytes without a token are dropped.
func (t *Tokenizer) pushBytes(text []byte, out *idBuffer) {
	for _, b := range text {
		if b == ' ' {
			for i := range len(spaceMark) {
				if id := t.byteToken[spaceMark[i]]; id >= 0 {
					out.push(id)
				}
			}
			continue
		}
		if id := t.byteToken[b]; id >= 0 {
			out.push(id)
		}
	}
}

// fragment is a special token (token >= 0) or the raw text text[start:end]
// (token -1).
type fragment struct {
	token      int
	start, end int
}

// partition cuts text at the texts of special tokens into st.frags. Each
// special token in turn (longest first) claims its non-overlapping
// occurrences, searched left to right, inside the text fragments that
// earlier tokens left; empty text fragments are dropped. Only the tokens the
// text contains at all (found in one pass over a trie) are searched for. A
// Control or Unknown occurrence that overlaps opts.Plain is skipped (the
// search goes on one byte after its start). It returns false when c says to
// stop.
func (t *Tokenizer) partition(st *encodeState, text string, opts EncodeOptions, c *canceller) bool {
	parseSpecial := opts.ParseSpecial
	st.frags = st.frags[:0]
	if text == "" {
		return true
	}
	st.frags = append(st.frags, fragment{token: -1, start: 0, end: len(text)})
	if len(t.specials) == 0 || (!parseSpecial && !t.hasUserDefined) {
		return true
	}
	if !t.specialTrie.find(text, &st.found, len(t.specials), c) {
		return false
	}
	next := st.next
	for i, id := range t.specials {
		if !st.found[i] || (!parseSpecial && t.vocab.Types[id] != UserDefined) {
			continue
		}
		tok := t.vocab.Tokens[id]
		lstrip, rstrip := t.strip[id]&stripLeft != 0, t.strip[id]&stripRight != 0
		plain := len(opts.Plain) > 0 && t.vocab.Types[id] != UserDefined
		next = next[:0]
		for _, f := range st.frags {
			if f.token >= 0 {
				next = append(next, f)
				continue
			}
			// base is where the text not yet cut off starts; from is where
			// the search goes on (past a skipped occurrence).
			base, from := f.start, f.start
			for from < f.end {
				at := strings.Index(text[from:f.end], tok)
				if at < 0 {
					break
				}
				at += from
				if plain && overlaps(opts.Plain, at, at+len(tok)) {
					from = at + 1
					continue
				}
				leftEnd := at
				for lstrip && leftEnd > base && isASCIISpace(text[leftEnd-1]) {
					leftEnd--
				}
				if leftEnd > base {
					next = append(next, fragment{token: -1, start: base, end: leftEnd})
				}
				next = append(next, fragment{token: id})
				base = at + len(tok)
				for rstrip && base < f.end && isASCIISpace(text[base]) {
					base++
				}
				from = base
			}
			if base < f.end {
				next = append(next, fragment{token: -1, start: base, end: f.end})
			}
		}
		st.frags, next = next, st.frags
		if !c.advance(len(text)) {
			return false
		}
	}
	st.next = next
	return true
}

// isASCIISpace is C's isspace in the C locale, which llama.cpp's strip
// attributes use.
func isASCIISpace(b byte) bool {
	return b == ' ' || ('\t' <= b && b <= '\r')
}

// idBuffer collects token ids in pooled fixed-size chunks of int32, so that
// an encode allocates only its exactly sized result, not a slice grown by
// doubling: 8 bytes per token once the pool is warm, 12 when the chunks are
// new.
type idBuffer struct {
	full [][]int32
	cur  []int32
	n    int
}

const chunkIDs = 8192

var idChunks = sync.Pool{New: func() any { return new([chunkIDs]int32) }}

// push appends id, which fits int32: token ids are bounded by Vocab.validate.
func (b *idBuffer) push(id int) {
	if len(b.cur) == cap(b.cur) {
		b.grow()
	}
	b.cur = append(b.cur, int32(id))
	b.n++
}

func (b *idBuffer) grow() {
	if cap(b.cur) > 0 {
		b.full = append(b.full, b.cur)
	}
	b.cur = idChunks.Get().(*[chunkIDs]int32)[:0]
}

// take returns the ids collected and empties b.
func (b *idBuffer) take() []int {
	out := make([]int, 0, b.n)
	for _, c := range b.full {
		for _, id := range c {
			out = append(out, int(id))
		}
	}
	for _, id := range b.cur {
		out = append(out, int(id))
	}
	b.release()
	return out
}

// release returns the chunks to the pool and empties b.
func (b *idBuffer) release() {
	for _, c := range b.full {
		idChunks.Put((*[chunkIDs]int32)(c[:chunkIDs]))
	}
	if cap(b.cur) > 0 {
		idChunks.Put((*[chunkIDs]int32)(b.cur[:chunkIDs]))
	}
	clear(b.full)
	b.full, b.cur, b.n = b.full[:0], nil, 0
}
