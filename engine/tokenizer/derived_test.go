package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"rill/engine/gguf"
	"rill/engine/testmodel"
	"rill/engine/tokenizer"
	"rill/internal/shared"
)

// The o200k vocabulary of gpt-oss (tokenizer.ggml.pre "gpt-4o", special
// tokens o200k_harmony) has no vocab-only file in ../shared, and tests
// download nothing. So testmodel.DeriveVocab makes one from Qwen 2's
// (ggml-vocab-qwen2.gguf) and scripts/peer/vocab-derived.mjs records
// llama.cpp on the same derived files (testdata/llamacpp_derived.json):
//   - "gpt-4o-qwen2": Qwen 2's tokens and merges under pre "gpt-4o". A
//     fair check of the gpt-4o split rules: they are all that differs from
//     Qwen 2, whose merges rill already matches llama.cpp on; byte-level
//     BPE merges inside each word, so a different split gives different
//     ids, and Qwen 2's merges know English, code and many scripts, so
//     every word of the cases is spelt by real merges.
//   - "harmony-qwen2": the same with gpt-oss's added tokens, all CONTROL
//     as convert_hf_to_gguf writes them, and its BOS, EOS and padding ids,
//     for llama.cpp's o200k_harmony fixes (end of generation, markers
//     rendered as text).

// derivedGolden is testdata/llamacpp_derived.json.
type derivedGolden struct {
	Vocabs map[string]struct {
		Pre      string `json:"pre"`
		NTokens  int    `json:"n_tokens"`
		BOS      int    `json:"bos"`
		EOS      int    `json:"eos"`
		AddBOS   bool   `json:"add_bos"`
		AddEOS   bool   `json:"add_eos"`
		EOG      []int  `json:"eog"`
		Specials []struct {
			ID    int    `json:"id"`
			Text  string `json:"text"`
			Attr  int    `json:"attr"`
			Piece string `json:"piece"`
		} `json:"specials"`
		Cases []struct {
			Text         string `json:"text"`
			ParseSpecial bool   `json:"parse_special"`
			IDs          []int  `json:"ids"`
		} `json:"cases"`
	} `json:"vocabs"`
}

// derivedOptions are the derivations of the recorded vocabularies, as
// scripts/peer/vocab-derived.mjs names them.
var derivedOptions = map[string]testmodel.DeriveOptions{
	"gpt-4o-qwen2":  {Pre: "gpt-4o"},
	"harmony-qwen2": {Pre: "gpt-4o", Harmony: true},
}

var derivedCache sync.Map // name -> *derivedResult

type derivedResult struct {
	once sync.Once
	tk   *tokenizer.Tokenizer
	err  error
}

// loadDerived returns the tokenizer of a derived vocabulary, built once per
// test binary.
func loadDerived(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	opts, ok := derivedOptions[name]
	if !ok {
		t.Fatalf("no derivation for %s", name)
	}
	src := shared.Path(t, "models", "vocab", "ggml-vocab-qwen2.gguf")
	r, _ := derivedCache.LoadOrStore(name, &derivedResult{})
	res := r.(*derivedResult)
	res.once.Do(func() {
		data, err := testmodel.DeriveVocab(src, opts)
		if err != nil {
			res.err = err
			return
		}
		f, err := gguf.Parse(data)
		if err != nil {
			res.err = err
			return
		}
		res.tk, res.err = tokenizer.FromGGUF(f.Metadata)
	})
	if res.err != nil {
		t.Fatalf("derive %s: %v", name, res.err)
	}
	return res.tk
}

func readDerivedGolden(t *testing.T) derivedGolden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "llamacpp_derived.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g derivedGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Vocabs) != len(derivedOptions) {
		t.Fatalf("golden file has %d vocabularies, want %d", len(g.Vocabs), len(derivedOptions))
	}
	return g
}

// TestDerivedGoldenLlamaCpp checks rill against llama.cpp on the derived
// vocabularies: every recorded case's ids, the special ids, add_bos and
// add_eos, and the end-of-generation set.
func TestDerivedGoldenLlamaCpp(t *testing.T) {
	t.Parallel()
	g := readDerivedGolden(t)
	for name, want := range g.Vocabs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tk := loadDerived(t, name)
			v := tk.Vocab()
			if v.Pre != want.Pre || tk.Size() != want.NTokens || v.BOS != want.BOS || v.EOS != want.EOS ||
				v.AddBOS != want.AddBOS || v.AddEOS != want.AddEOS {
				t.Errorf("pre %q size %d bos %d eos %d add_bos %v add_eos %v, llama.cpp has %q %d %d %d %v %v",
					v.Pre, tk.Size(), v.BOS, v.EOS, v.AddBOS, v.AddEOS,
					want.Pre, want.NTokens, want.BOS, want.EOS, want.AddBOS, want.AddEOS)
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
			bad := 0
			for _, c := range want.Cases {
				got := tk.Encode(c.Text, tokenizer.EncodeOptions{ParseSpecial: c.ParseSpecial})
				if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
					if bad++; bad <= 20 {
						t.Errorf("Encode(%q, parse_special=%v)\n got %v\nwant %v", c.Text, c.ParseSpecial, got, c.IDs)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d cases differ", bad, len(want.Cases))
			}
		})
	}
}

// llamaAttr is llama.cpp's token attribute for a token type (llama_token_attr
// bits: UNKNOWN 1, UNUSED 2, NORMAL 4, CONTROL 8, USER_DEFINED 16, BYTE 32).
var llamaAttr = map[tokenizer.TokenType]int{
	tokenizer.Unknown: 1, tokenizer.Unused: 2, tokenizer.Normal: 4,
	tokenizer.Control: 8, tokenizer.UserDefined: 16, tokenizer.Byte: 32,
}

// TestDerivedHarmonySpecials checks the o200k_harmony special tokens of a
// vocabulary typed as gpt-oss's GGUF types them (all CONTROL) against
// llama.cpp's attributes and pieces after its gpt-oss fixes: <|channel|>,
// <|message|>, <|start|>, <|constrain|> and <|end|> become USER_DEFINED and
// render as text, which the harmony parsers read; <|return|>, <|call|> and
// the others stay CONTROL and render as nothing. (The end-of-generation set,
// <|end|> out of it, is TestDerivedGoldenLlamaCpp's.)
func TestDerivedHarmonySpecials(t *testing.T) {
	t.Parallel()
	g := readDerivedGolden(t)
	want := g.Vocabs["harmony-qwen2"]
	if len(want.Specials) == 0 {
		t.Fatal("no special tokens recorded for harmony-qwen2")
	}
	tk := loadDerived(t, "harmony-qwen2")
	v := tk.Vocab()
	for _, s := range want.Specials {
		if v.Tokens[s.ID] != s.Text {
			t.Fatalf("token %d is %q, llama.cpp has %q", s.ID, v.Tokens[s.ID], s.Text)
		}
		if got := llamaAttr[v.Types[s.ID]]; got != s.Attr {
			t.Errorf("%s: type %d (attribute %d), llama.cpp has attribute %d", s.Text, v.Types[s.ID], got, s.Attr)
		}
		if got := string(tk.Piece(s.ID)); got != s.Piece {
			t.Errorf("%s: piece %q, llama.cpp has %q", s.Text, got, s.Piece)
		}
	}
}
