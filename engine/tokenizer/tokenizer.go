package tokenizer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text for one
// vocabulary. It is immutable after New and safe for concurrent use.
type Tokenizer struct {
	vocab Vocab

	// byText maps a token text to its id (texts are unique).
	byText map[string]int
	// pieces[id] is the output text of id (see Piece); shared, read-only.
	pieces [][]byte
	// byteToken[b] is the id emitted for byte b when byte fallback applies;
	// -1 when the vocabulary has no way to spell b.
	byteToken [256]int
	// specials are the ids that partition input text before merging
	// (Control, UserDefined and Unknown types), longest text first;
	// specialTrie finds which of them a text holds.
	specials       []int
	specialTrie    specialTrie
	hasUserDefined bool // some special is UserDefined, so plain text has specials too
	strip          map[int]stripFlags
	eog            map[int]bool

	// bpe is the BPE encoder; nil for SentencePiece. byteLevel says its
	// token texts are in GPT-2's byte alphabet.
	bpe       *bpeModel
	byteLevel bool
	// spmCuts says where SentencePiece text can be merged in independent
	// chunks (see encodeSPM).
	spmCuts spmCuts
	// wpm is the WordPiece encoder; nil for the other models.
	wpm *wpmModel
	// ugm is the unigram encoder; nil for the other models.
	ugm *ugmModel
	// canonicalFrom is the length from which valid text is merged in
	// canonical form (see appendMerged): canonicalBytes; tests lower it.
	canonicalFrom int
	maxTokenBytes int
	// boundsHold says minTokens's lower bounds are valid for this
	// vocabulary; they do not count the bytes in droppable (dropsBytes:
	// there are some). See computeBounds.
	boundsHold bool
	droppable  [256]bool
	dropsBytes bool
}

// New checks v and builds a Tokenizer. It copies the slices of v, so the
// caller may reuse them. Errors: an unsupported model, mismatched lengths,
// special ids outside the vocabulary, empty or duplicate token texts, a byte
// token whose text is not <0xXX>, AddBOS/AddEOS without the token.
func New(v Vocab) (*Tokenizer, error) { return newTokenizer(v, nil) }

// newTokenizer is New; byText, when not nil, is the text-to-id index of
// v.Tokens that the caller already built (and owns no longer).
func newTokenizer(v Vocab, byText map[string]int) (*Tokenizer, error) {
	var spec preSpec
	switch v.Model {
	case ModelLlama:
	case ModelGPT2:
		var err error
		if spec, err = lookupPre(v.Pre); err != nil {
			return nil, err
		}
	case ModelGemma4:
		spec = preNames["gemma4"]
	case ModelBERT, ModelT5:
	default:
		return nil, fmt.Errorf("unsupported tokenizer model %q", v.Model)
	}
	if err := v.validate(); err != nil {
		return nil, err
	}
	v.Tokens = slices.Clone(v.Tokens)
	v.Scores = slices.Clone(v.Scores)
	v.Types = slices.Clone(v.Types)
	v.EOG = slices.Clone(v.EOG)
	v.Merges = slices.Clone(v.Merges)
	v.LStrip = slices.Clone(v.LStrip)
	v.RStrip = slices.Clone(v.RStrip)
	v.Charsmap = slices.Clone(v.Charsmap)

	n := len(v.Tokens)
	t := &Tokenizer{
		vocab:  v,
		byText: byText,
		pieces: make([][]byte, n),
		eog:    map[int]bool{},
		strip:  map[int]stripFlags{},
		// gpt2 vocabularies are byte-level unless their pre-tokenizer is
		// Gemma 4's SentencePiece-style one.
		byteLevel:     v.Model == ModelGPT2 && spec.family != preGemma4,
		canonicalFrom: canonicalBytes,
	}
	if t.byText == nil {
		t.byText = make(map[string]int, n)
		for id, text := range v.Tokens {
			if prev, dup := t.byText[text]; dup {
				return nil, fmt.Errorf("tokens %d and %d are both %q", prev, id, text)
			}
			t.byText[text] = id
		}
	}
	for id := range v.Tokens {
		t.pieces[id] = t.piece(id)
		switch v.Types[id] {
		case Control, UserDefined, Unknown:
			t.specials = append(t.specials, id)
			t.hasUserDefined = t.hasUserDefined || v.Types[id] == UserDefined
		}
		t.maxTokenBytes = max(t.maxTokenBytes, t.inputBytes(id))
	}
	// Longest first so that a special token wins over any special token that
	// is a part of it; ties keep id order, which makes the choice stable
	// (llama.cpp leaves it to an unstable sort).
	slices.SortStableFunc(t.specials, func(a, b int) int {
		return cmp.Compare(len(v.Tokens[b]), len(v.Tokens[a]))
	})
	texts := make([]string, len(t.specials))
	for i, id := range t.specials {
		texts[i] = v.Tokens[id]
	}
	t.specialTrie = newSpecialTrie(texts)
	for _, id := range v.LStrip {
		t.strip[id] |= stripLeft
	}
	for _, id := range v.RStrip {
		t.strip[id] |= stripRight
	}
	switch v.Model {
	case ModelLlama:
		t.spmCuts = newSPMCuts(v.Tokens)
	case ModelBERT:
		t.wpm = newWPM(&v)
	case ModelT5:
		var err error
		if t.ugm, err = newUGM(&v); err != nil {
			return nil, err
		}
	default:
		var err error
		if t.bpe, err = newBPE(t, spec, v.Merges, v.IgnoreMerges); err != nil {
			return nil, err
		}
	}
	for b := range 256 {
		t.byteToken[b] = t.lookupByte(byte(b))
	}
	t.computeBounds()
	if t.wpm != nil || t.ugm != nil {
		// One UNK can stand for a word of any length, and control
		// characters and accents vanish: no bound on bytes per token.
		t.boundsHold = false
		t.maxTokenBytes = math.MaxInt32
	}
	for _, id := range append([]int{v.EOS, v.EOT}, v.EOG...) {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	return t, nil
}

// inputBytes is the most input bytes token id can stand for: its text's
// length, except that a byte token stands for one byte and a byte-level
// token that is not special for one byte per character of its text.
func (t *Tokenizer) inputBytes(id int) int {
	text := t.vocab.Tokens[id]
	switch typ := t.vocab.Types[id]; {
	case typ == Byte:
		return 1
	case typ == Control || typ == UserDefined || typ == Unknown:
		return len(text) // matched verbatim in the input
	case t.byteLevel:
		return utf8.RuneCountInString(text)
	}
	return len(text)
}

// spaceAfterChar reports whether a token text holds U+2581 right after
// another character.
func spaceAfterChar(text string) bool {
	for i := strings.Index(text, spaceMark); i >= 0; {
		if i > 0 && !strings.HasSuffix(text[:i], spaceMark) {
			return true
		}
		j := strings.Index(text[i+len(spaceMark):], spaceMark)
		if j < 0 {
			return false
		}
		i += len(spaceMark) + j
	}
	return false
}

// piece computes the output bytes of id, following llama.cpp's
// token_to_piece without special rendering.
func (t *Tokenizer) piece(id int) []byte {
	text := t.vocab.Tokens[id]
	switch t.vocab.Types[id] {
	case Normal:
		if t.byteLevel {
			return decodeByteLevel(text)
		}
		return []byte(strings.ReplaceAll(text, spaceMark, " "))
	case UserDefined:
		// Added tokens are emitted verbatim: no U+2581 unescaping.
		return []byte(text)
	case Byte:
		b, _ := parseByteToken(text) // validated by New
		return []byte{b}
	}
	// Control, Unknown, Unused and undefined types render as nothing.
	return nil
}

// lookupByte finds the token for one byte of byte fallback: "<0xXX>", else a
// token whose text is that single byte, else UNK (where llama.cpp would throw).
func (t *Tokenizer) lookupByte(b byte) int {
	if id, ok := t.byText[byteTokenText(b)]; ok {
		return id
	}
	if id, ok := t.byText[string([]byte{b})]; ok {
		return id
	}
	return t.vocab.UNK
}

// Size is the number of tokens in the vocabulary; valid ids are 0..Size()-1.
func (t *Tokenizer) Size() int { return len(t.vocab.Tokens) }

// Vocab returns the vocabulary. It and its slices are shared and must not be
// modified.
func (t *Tokenizer) Vocab() *Vocab { return &t.vocab }

// BOS is the beginning-of-sequence id, -1 if none.
func (t *Tokenizer) BOS() int { return t.vocab.BOS }

// EOS is the end-of-sequence id, -1 if none.
func (t *Tokenizer) EOS() int { return t.vocab.EOS }

// IsEOG reports whether generating id ends a choice: EOS, EOT or one of
// Vocab.EOG.
func (t *Tokenizer) IsEOG(id int) bool { return t.eog[id] }

// ControlTexts returns the texts of the special tokens that only
// EncodeOptions.ParseSpecial lets input text spell (Control and Unknown
// tokens: "<|im_start|>", "<|eot_id|>", "<s>"), longest first: the texts a
// chat prompt must not take from user data (see chat.Template.RenderPrompt).
// UserDefined tokens are not among them: they match in any text, as in
// llama.cpp and Hugging Face tokenizers. The slice is the caller's.
func (t *Tokenizer) ControlTexts() []string {
	var out []string
	for _, id := range t.specials {
		if t.vocab.Types[id] != UserDefined {
			out = append(out, t.vocab.Tokens[id])
		}
	}
	return out
}

// Valid reports whether id is a token id of this vocabulary.
func (t *Tokenizer) Valid(id int) bool { return id >= 0 && id < len(t.vocab.Tokens) }

// Text returns the vocabulary's spelling of id ("<s>" for a BOS token, say),
// or "" for an invalid id. Chat templates use it for bos_token/eos_token.
func (t *Tokenizer) Text(id int) string {
	if !t.Valid(id) {
		return ""
	}
	return t.vocab.Tokens[id]
}

// Piece returns the bytes id contributes to output text, as llama.cpp's
// server renders generated tokens: Normal tokens with U+2581 turned into a
// space (a leading one included) for SentencePiece, or mapped back from
// GPT-2's byte alphabet for byte-level BPE, Byte tokens as their single byte,
// UserDefined tokens verbatim, and nothing for Control, Unknown, Unused and
// undefined types and for invalid ids. A piece may be part of a multi-byte
// UTF-8 character; Decoder reassembles those. The slice is shared and must not
// be modified; Piece does not allocate.
func (t *Tokenizer) Piece(id int) []byte {
	if !t.Valid(id) {
		return nil
	}
	return t.pieces[id]
}

// spaceMark is U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's stand-in for a
// space inside token texts.
const spaceMark = "\u2581"
