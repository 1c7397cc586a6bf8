// Package tokenizer turns text into token ids and back for the vocabularies
// that GGUF files describe in their tokenizer.ggml.* metadata.
//
// Four tokenizer models are implemented: SentencePiece ("llama": scores,
// byte fallback, a space prefix), byte-level BPE ("gpt2": GPT-2's byte-to-
// unicode mapping, merges by rank, and the pre-tokenizer split rules that
// tokenizer.ggml.pre names), Gemma 4's BPE ("gemma4": merges over
// characters with U+2581 for spaces and <0xXX> byte fallback) and BERT's
// WordPiece ("bert": lowercasing and accent stripping, words split at
// whitespace and punctuation, each cut greedily into the longest pieces). Encoding
// follows llama.cpp (src/llama-vocab.cpp, src/unicode.cpp) token for token:
// the same special-token partitioning, the same space-prefix rule, the same
// pre-tokenizer splits and the same merge order, so that prompt token
// counts, prefix-cache hashes and logits agree with that widely used peer.
//
// Cost: an encode allocates its result (8 bytes per token) and scratch
// space linear in the longest piece of text that merges as one (a
// pre-tokenized word, a SentencePiece chunk): 20 bytes per byte of it for
// BPE, 16 for SentencePiece, so that even a megabyte without a separator
// stays under 32 bytes per input byte in all. EncodeContext stops when its
// context ends and, given EncodeOptions.MaxTokens, as soon as the text is
// certain to have more tokens than that, often before merging any of it.
package tokenizer

import (
	"fmt"
	"math"
	"slices"
)

// TokenType is the kind of a vocabulary entry, with tokenizer.ggml.token_type
// numbering. Values outside 1..6 are kept as they are and behave like llama.cpp's
// "undefined" type: mergeable, never special, rendered as nothing.
type TokenType int32

// Token types of tokenizer.ggml.token_type.
const (
	Normal      TokenType = 1 // text; U+2581 stands for a space
	Unknown     TokenType = 2 // the <unk> token
	Control     TokenType = 3 // <s>, </s>, chat markers: not rendered as text
	UserDefined TokenType = 4 // added tokens, always matched verbatim in input
	Unused      TokenType = 5 // reserved slots: rendered as nothing
	Byte        TokenType = 6 // <0xXX>: one raw byte
)

// Model names of tokenizer.ggml.model.
const (
	ModelLlama  = "llama"  // SentencePiece with scores and byte fallback
	ModelGPT2   = "gpt2"   // byte-level BPE with merges and a pre-tokenizer
	ModelGemma4 = "gemma4" // BPE over characters with U+2581 for spaces and byte fallback (Gemma 4)
	ModelBERT   = "bert"   // WordPiece: greedy longest match per word (BERT and its embedding models)
	ModelT5     = "t5"     // SentencePiece unigram: normalised text cut along the best-scoring path (T5, nomic-bert-moe)
)

// Vocab is a vocabulary with everything needed to encode and decode. Token ids
// are indices into Tokens; Scores and Types have the same length as Tokens.
//
// Special ids are -1 when the vocabulary has none; note that 0 is a valid id,
// so a Vocab built by hand must set unused ids to -1 explicitly.
type Vocab struct {
	// Model is tokenizer.ggml.model: ModelLlama, ModelGPT2, ModelGemma4 or
	// ModelBERT.
	Model string
	// Pre names the pre-tokenizer of a ModelGPT2 vocabulary
	// (tokenizer.ggml.pre: "llama-bpe", "qwen2", "gpt-2", ...; see
	// PreTokenizers); "" or "default" is llama.cpp's default rule set.
	// ModelGemma4 always uses "gemma4"; ModelLlama has none.
	Pre string
	// Merges are the BPE merges of a ModelGPT2 or ModelGemma4 vocabulary,
	// highest priority first, each "left right" (tokenizer.ggml.merges).
	Merges []string
	// IgnoreMerges makes a pre-tokenized word that is itself a token encode
	// as that token without merging (Hugging Face's ignore_merges; llama.cpp
	// sets it for the llama-bpe family).
	IgnoreMerges bool
	// Tokens are the token texts. They are unique and non-empty.
	Tokens []string
	// Scores rank SentencePiece merges: of two candidate pairs the one whose
	// merged token scores higher merges first.
	Scores []float32
	// Types are the token types.
	Types []TokenType

	BOS, EOS, UNK, PAD, EOT int
	// SEP is the separator token ([SEP] for BERT), which AddSEP appends.
	SEP int
	// EOG lists further end-of-generation ids beyond EOS and EOT (an EOM
	// token, fill-in-the-middle pad/repo/separator tokens, tokens llama.cpp
	// recognises by their text). It may be nil.
	EOG []int

	// AddBOS and AddEOS say whether Encode with AddSpecial puts BOS first and
	// EOS last. AddSpacePrefix makes the SentencePiece encoder put a space
	// before text that starts the input or follows a special token.
	AddBOS, AddEOS, AddSpacePrefix bool
	// AddSEP makes Encode with AddSpecial put SEP last (after EOS, if that
	// is added too): BERT's "[CLS] text [SEP]".
	AddSEP bool
	// Lowercase and StripAccents are a ModelBERT vocabulary's normaliser
	// options: lowercase every character; reduce every character to the
	// first code point of its canonical decomposition and drop combining
	// marks. Other models ignore them.
	Lowercase, StripAccents bool
	// Charsmap is a ModelT5 vocabulary's precompiled normaliser
	// (tokenizer.ggml.precompiled_charsmap, SentencePiece's double-array
	// trie of replacements); nil for none. RemoveExtraWhitespaces
	// (tokenizer.ggml.remove_extra_whitespaces) drops leading and trailing
	// spaces and collapses runs of them. Other models ignore both.
	Charsmap               []byte
	RemoveExtraWhitespaces bool

	// LStrip and RStrip list special tokens that swallow the ASCII
	// whitespace (space, \t, \n, \v, \f, \r) to their left or right when
	// they are cut out of input text: llama.cpp's LSTRIP/RSTRIP token
	// attributes, which it sets per model (all special tokens of Phi-3 but
	// <unk>, <s> and <|endoftext|> strip to the right). Usually nil.
	LStrip, RStrip []int
}

// validate checks the invariants New relies on.
func (v *Vocab) validate() error {
	n := len(v.Tokens)
	if n == 0 {
		return fmt.Errorf("vocabulary has no tokens")
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("vocabulary has %d tokens, more than token ids can address", n)
	}
	if len(v.Scores) != n {
		return fmt.Errorf("vocabulary has %d scores for %d tokens", len(v.Scores), n)
	}
	if len(v.Types) != n {
		return fmt.Errorf("vocabulary has %d token types for %d tokens", len(v.Types), n)
	}
	ids := []struct {
		name string
		id   int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unk", v.UNK}, {"pad", v.PAD}, {"eot", v.EOT}, {"sep", v.SEP}}
	for _, s := range ids {
		if s.id < -1 || s.id >= n {
			return fmt.Errorf("%s token id %d outside the vocabulary of %d tokens", s.name, s.id, n)
		}
	}
	for _, id := range v.EOG {
		if id < 0 || id >= n {
			return fmt.Errorf("end-of-generation token id %d outside the vocabulary of %d tokens", id, n)
		}
	}
	if v.Model == ModelBERT && v.UNK < 0 {
		return fmt.Errorf("wordpiece vocabulary has no unknown token")
	}
	if v.Model == ModelT5 && v.UNK < 0 {
		return fmt.Errorf("unigram vocabulary has no unknown token")
	}
	if v.AddBOS && v.BOS < 0 {
		return fmt.Errorf("vocabulary asks to add a bos token but has none")
	}
	if v.AddEOS && v.EOS < 0 {
		return fmt.Errorf("vocabulary asks to add an eos token but has none")
	}
	if v.AddSEP && v.SEP < 0 {
		return fmt.Errorf("vocabulary asks to add a sep token but has none")
	}
	for _, id := range append(slices.Clip(v.LStrip), v.RStrip...) {
		if id < 0 || id >= n {
			return fmt.Errorf("strip token id %d outside the vocabulary of %d tokens", id, n)
		}
	}
	for i, text := range v.Tokens {
		if text == "" {
			return fmt.Errorf("token %d is empty", i)
		}
		if v.Types[i] == Byte {
			if _, ok := parseByteToken(text); !ok {
				return fmt.Errorf("byte token %d has text %q, want <0xXX>", i, text)
			}
		}
	}
	return nil
}

// parseByteToken reads the byte of a "<0xXX>" token text.
func parseByteToken(text string) (byte, bool) {
	if len(text) != 6 || text[:3] != "<0x" || text[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(text[3])
	lo, ok2 := hexDigit(text[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// byteTokenText is the text of the byte-fallback token for b, as SentencePiece
// names them: "<0x" two upper-case hex digits ">".
func byteTokenText(b byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
}
