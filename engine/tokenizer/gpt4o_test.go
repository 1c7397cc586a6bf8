package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestGPT4OSplitLlamaCpp checks the gpt-4o split rules word by word against
// llama.cpp's own unicode_regex_split (recorded by
// scripts/peer/vocab-derived.mjs with splitoracle.cpp): the hard strings,
// the letter-case strings and every .inp case of ../shared/models/vocab.
// Token ids (derived_test.go) show a split only where a merge crosses a
// word boundary; words show every boundary.
func TestGPT4OSplitLlamaCpp(t *testing.T) {
	t.Parallel()
	var g struct {
		Vocabs map[string]struct {
			Cases []struct {
				Text  string `json:"text"`
				Words []int  `json:"words"`
			} `json:"cases"`
		} `json:"vocabs"`
	}
	readJSON(t, filepath.Join("testdata", "llamacpp_derived.json"), &g)
	cases := g.Vocabs["gpt-4o-qwen2"].Cases
	rules := preGPT4O.rules()
	checked := 0
	for _, c := range cases {
		if c.Words == nil {
			continue
		}
		checked++
		var got []int
		rules.split(c.Text, func(w string) bool {
			got = append(got, len(w))
			return true
		})
		if !slices.Equal(got, c.Words) && !(len(got) == 0 && len(c.Words) == 0) {
			t.Errorf("split(%q)\n got %v\nwant %v", c.Text, got, c.Words)
		}
	}
	if checked < 100 {
		t.Fatalf("only %d cases have llama.cpp's words; record them with SPLIT_ORACLE", checked)
	}
}

// TestGPT4OSplit shows the rules where they differ from Qwen 2's and from
// tokenizer.json's original regex: contractions stay on their word,
// capitals start a word, and letters outside ASCII have no case (llama.cpp
// matches them in a text collapsed to one byte per category).
func TestGPT4OSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"camel case", "getHTTPResponse", []string{"get", "HTTPResponse"}},
		{"contractions stay", "don't DON'T", []string{"don't", " DON'T"}},
		{"leading apostrophe is the prefix", "'sup", []string{"'sup"}},
		{"capitals then digit", "ABC1", []string{"ABC", "1"}},
		{"non-ASCII capital ends the word", "ÄBC1", []string{"Ä", "BC", "1"}},
		{"non-ASCII capitals are lower case too", "ÉCOLE École", []string{"É", "COLE", " École"}},
		{"cyrillic has no case", "ПРИВЕТ мир", []string{"ПРИВЕТ", " мир"}},
		{"three digits", "1234567", []string{"123", "456", "7"}},
		{"line ends and slashes after punctuation", "a.\n/\r\nb", []string{"a", ".\n/\r\n", "b"}},
		{"whitespace", "a  \n\n b", []string{"a", "  \n\n", " b"}},
		{"marks are no letters", "e\u0301a", []string{"e", "\u0301a"}},
	}
	rules := preGPT4O.rules()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			rules.split(tt.in, func(w string) bool {
				got = append(got, w)
				return true
			})
			if !slices.Equal(got, tt.want) {
				t.Errorf("split(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestGPT4ONames checks the names llama.cpp maps to its GPT4O type: the
// gpt-4o rules, merges not ignored, no BOS added unless the file says so.
func TestGPT4ONames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"gpt-4o", "llama4", "kanana2", "talkie"} {
		t.Run(name, func(t *testing.T) {
			spec, err := lookupPre(name)
			if err != nil {
				t.Fatal(err)
			}
			if spec != (preSpec{family: preGPT4O}) {
				t.Errorf("spec %+v, want the gpt-4o family with ignore_merges and add_bos off", spec)
			}
			if !slices.Contains(PreTokenizers(), name) {
				t.Errorf("PreTokenizers() lacks %q", name)
			}
		})
	}
}
