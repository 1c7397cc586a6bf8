package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"rill/engine/gguf"
	"rill/internal/shared"
)

// Token types of tokenizer.ggml.token_type.
const (
	ggufNormal      = 1
	ggufControl     = 3
	ggufUserDefined = 4
	ggufByte        = 6
)

// realVocabs names the vocabulary-only GGUFs the tests use: a 32k
// SentencePiece vocabulary and two byte-level BPE ones (151,936 and 128k).
var realVocabs = []string{"llama-spm", "qwen2", "llama-bpe"}

var (
	vocabOnce  sync.Map // name -> *vocabResult
	vocabMutex sync.Mutex
)

type vocabResult struct {
	v   *Vocab
	err error
}

// loadVocab builds a Vocab from ../shared/models/vocab/ggml-vocab-<name>.gguf,
// mapping token texts to raw bytes the way llama.cpp renders them, and skips
// the test when the reference folder is absent. Results are shared between
// tests (a Vocab is immutable and safe for concurrent use).
func loadVocab(tb testing.TB, name string) *Vocab {
	tb.Helper()
	path := shared.Path(tb, "models", "vocab", "ggml-vocab-"+name+".gguf")
	vocabMutex.Lock()
	defer vocabMutex.Unlock()
	if r, ok := vocabOnce.Load(name); ok {
		res := r.(*vocabResult)
		if res.err != nil {
			tb.Fatal(res.err)
		}
		return res.v
	}
	v, err := vocabFromGGUF(path)
	vocabOnce.Store(name, &vocabResult{v, err})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func vocabFromGGUF(path string) (*Vocab, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	md := f.Metadata
	model, _ := md.String("tokenizer.ggml.model")
	texts, ok := md.Strings("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	types, ok := md.Int32s("tokenizer.ggml.token_type")
	if !ok {
		return nil, fmt.Errorf("%s: no token types", path)
	}
	toks := make([][]byte, len(texts))
	for id, text := range texts {
		switch types[id] {
		case ggufNormal:
			if model == "llama" {
				toks[id] = []byte(strings.ReplaceAll(text, "\u2581", " "))
			} else {
				toks[id] = bpeBytes(text)
			}
		case ggufUserDefined:
			toks[id] = []byte(text)
		case ggufByte:
			b, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(text, "<0x"), ">"), 16, 8)
			if err != nil {
				return nil, fmt.Errorf("%s: byte token %d %q: %w", path, id, text, err)
			}
			toks[id] = []byte{byte(b)}
		}
	}
	var eog []int
	if id, ok := md.Uint("tokenizer.ggml.eos_token_id"); ok && int(id) < len(texts) {
		eog = append(eog, int(id))
	}
	for id, text := range texts {
		if types[id] != ggufControl {
			continue
		}
		switch text {
		case "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "</s>", "<|eom_id|>":
			eog = append(eog, id)
		}
	}
	return NewVocab(toks, eog)
}

// bpeUnicodeToByte reverses GPT-2's bytes_to_unicode: printable bytes stand
// for themselves, the others for code points from U+0100 on.
var bpeUnicodeToByte = func() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}()

func bpeBytes(text string) []byte {
	out := make([]byte, 0, len(text))
	for _, r := range text {
		b, ok := bpeUnicodeToByte[r]
		if !ok {
			return []byte(text) // not a byte-level token; keep the text
		}
		out = append(out, b)
	}
	return out
}
