package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"rill/engine/gguf"
	"rill/internal/shared"
)

// vocabSets are llama.cpp's vocab-only GGUFs in ../shared/models/vocab that
// this package claims: every line of their .inp/.out test cases must match.
var vocabSets = []string{
	"llama-spm", "phi-3", "bert-bge",
	"llama-bpe", "qwen2", "qwen35", "starcoder", "gpt-2", "deepseek-llm", "deepseek-coder",
	"falcon", "mpt", "refact", "command-r", "gemma-4",
}

// goldenOnlySets are vocab GGUFs of ../shared/models/vocab that come
// without .inp/.out cases; testdata/llamacpp_vocab.json alone covers them.
var goldenOnlySets = []string{"nomic-bert-moe"}

// pendingSets are vocab sets of ../shared/models/vocab that rill knows of
// and does not read yet, each with what it waits for. A set that is in
// neither list fails TestVocabSetsListed, so that a new one is looked at.
var pendingSets = map[string]string{}

var vocabCache sync.Map // set name -> *modelResult

// loadVocab returns the tokenizer of ../shared/models/vocab/ggml-vocab-<set>.gguf,
// built once per test binary.
func loadVocab(t testing.TB, set string) *Tokenizer {
	t.Helper()
	path := shared.Path(t, "models", "vocab", "ggml-vocab-"+set+".gguf")
	r, _ := vocabCache.LoadOrStore(set, &modelResult{})
	res := r.(*modelResult)
	res.once.Do(func() {
		f, err := gguf.Open(path)
		if err != nil {
			res.err = err
			return
		}
		defer f.Close()
		res.tk, res.err = FromGGUF(f.Metadata)
	})
	if res.err != nil {
		t.Fatalf("load %s: %v", set, res.err)
	}
	return res.tk
}

// vocabCase is one string of a .inp file and its ids from the .out file.
type vocabCase struct {
	text string
	ids  []int
}

// readVocabCases parses a set's .inp/.out pair as llama.cpp's
// test-tokenizer-0 does: inputs separated by "\n__ggml_vocab_test__\n", one
// line of space-separated ids per input.
func readVocabCases(t *testing.T, set string) []vocabCase { return readVocabCasesTB(t, set) }

func readVocabCasesTB(t testing.TB, set string) []vocabCase {
	t.Helper()
	base := shared.Path(t, "models", "vocab", "ggml-vocab-"+set+".gguf")
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var texts []string
	for raw := string(inp); raw != ""; {
		i := strings.Index(raw, sep)
		if i < 0 {
			texts = append(texts, raw)
			break
		}
		texts = append(texts, raw[:i])
		raw = raw[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs but %d output lines", set, len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(line) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s line %d: %v", set, i+1, err)
			}
			cases[i].ids = append(cases[i].ids, id)
		}
	}
	return cases
}

// TestVocabSets replays llama.cpp's tokenizer tests: add_special and
// parse_special off, every line exact.
func TestVocabSets(t *testing.T) {
	t.Parallel()
	for _, set := range vocabSets {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			cases := readVocabCases(t, set)
			for i, c := range cases {
				got := tk.Encode(c.text, EncodeOptions{})
				if !slices.Equal(got, c.ids) && !(len(got) == 0 && len(c.ids) == 0) {
					t.Errorf("case %d: Encode(%q)\n got %v\nwant %v", i+1, c.text, got, c.ids)
				}
			}
		})
	}
}

// TestVocabSetsRoundTrip checks that decoding the expected ids gives the
// input back for the BPE vocabularies (no space prefix, every byte spelt),
// as llama.cpp's test checks its detokenizer.
func TestVocabSetsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, set := range vocabSets {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			switch tk.Vocab().Model {
			case ModelLlama:
				t.Skip("SentencePiece adds a space prefix")
			case ModelBERT:
				t.Skip("WordPiece lowercases, drops accents and puts a space before every word")
			}
			for i, c := range readVocabCases(t, set) {
				if got := tk.Decode(c.ids); got != c.text {
					t.Errorf("case %d: Decode(%v) = %q, want %q", i+1, c.ids, got, c.text)
				}
			}
		})
	}
}

func TestVocabSetsListed(t *testing.T) {
	t.Parallel()
	dir := shared.Path(t, "models", "vocab")
	files, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf.inp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		set := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "ggml-vocab-"), ".gguf.inp")
		if why, ok := pendingSets[set]; ok {
			t.Logf("vocab set %s is not read yet: it needs %s", set, why)
			continue
		}
		if !slices.Contains(vocabSets, set) {
			t.Errorf("vocab set %s in %s is not claimed", set, dir)
		}
	}
}

// vocabGolden is testdata/llamacpp_vocab.json, written by
// scripts/peer/vocab.mjs from llama.cpp itself (node-llama-cpp 3.21.1).
type vocabGolden struct {
	Vocabs map[string]struct {
		NTokens int   `json:"n_tokens"`
		BOS     int   `json:"bos"`
		EOS     int   `json:"eos"`
		AddBOS  bool  `json:"add_bos"`
		AddEOS  bool  `json:"add_eos"`
		EOG     []int `json:"eog"`
		Cases   []struct {
			Text         string `json:"text"`
			ParseSpecial bool   `json:"parse_special"`
			IDs          []int  `json:"ids"`
		} `json:"cases"`
	} `json:"vocabs"`
}

// TestVocabGoldenLlamaCpp checks hard strings (special tokens parsed and
// not, every kind of whitespace, contractions, digit runs, many scripts)
// and the special ids, add_bos/add_eos and end-of-generation set that
// llama.cpp resolves for each claimed vocabulary.
func TestVocabGoldenLlamaCpp(t *testing.T) {
	t.Parallel()
	var g vocabGolden
	readJSON(t, filepath.Join("testdata", "llamacpp_vocab.json"), &g)
	if want := len(vocabSets) + len(goldenOnlySets); len(g.Vocabs) != want {
		t.Errorf("golden file has %d vocabularies, want the %d claimed", len(g.Vocabs), want)
	}
	for set, want := range g.Vocabs {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			v := tk.Vocab()
			if tk.Size() != want.NTokens || v.BOS != want.BOS || v.EOS != want.EOS || v.AddBOS != want.AddBOS || v.AddEOS != want.AddEOS {
				t.Errorf("size %d bos %d eos %d add_bos %v add_eos %v, llama.cpp has %d %d %d %v %v",
					tk.Size(), v.BOS, v.EOS, v.AddBOS, v.AddEOS, want.NTokens, want.BOS, want.EOS, want.AddBOS, want.AddEOS)
			}
			var eog []int
			for id := range tk.Size() {
				if tk.IsEOG(id) {
					eog = append(eog, id)
				}
			}
			if !slices.Equal(eog, want.EOG) {
				t.Errorf("end-of-generation ids %v, llama.cpp has %v", eog, want.EOG)
			}
			for _, c := range want.Cases {
				got := tk.Encode(c.Text, EncodeOptions{ParseSpecial: c.ParseSpecial})
				if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
					t.Errorf("Encode(%q, parse_special=%v)\n got %v\nwant %v", c.Text, c.ParseSpecial, got, c.IDs)
				}
			}
		})
	}
}

// TestStreamingDecodeBPE feeds the tokens of multi-byte text (emoji, CJK,
// combining marks, which byte-level BPE splits inside characters) to a
// Decoder one at a time: every step is valid UTF-8 and the steps add up to
// the text.
func TestStreamingDecodeBPE(t *testing.T) {
	t.Parallel()
	texts := []string{
		"emoji \U0001f999\U0001f680\U0001f44d\U0001f3fd family \U0001f468\u200d\U0001f469\u200d\U0001f467",
		"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \u0928\u092e\u0938\u094d\u0924\u0947",
		"e\u0301 a\u0300\u0301\u0302 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
	}
	for _, set := range []string{"llama-bpe", "qwen2", "gpt-2"} {
		tk := loadVocab(t, set)
		split := 0
		for _, text := range texts {
			d := tk.NewDecoder()
			var sb strings.Builder
			for _, id := range tk.Encode(text, EncodeOptions{}) {
				if !utf8.Valid(tk.Piece(id)) {
					split++
				}
				step := d.Add(id)
				if !utf8.ValidString(step) {
					t.Fatalf("%s: Decoder.Add gave invalid UTF-8 %q", set, step)
				}
				sb.WriteString(step)
			}
			sb.WriteString(d.Flush())
			if sb.String() != text {
				t.Errorf("%s: streamed %q, want %q", set, sb.String(), text)
			}
		}
		if split == 0 {
			t.Errorf("%s: no token split a character; the test shows nothing", set)
		}
	}
}
