package testmodel

import (
	"fmt"
	"sort"
	"strings"

	"rill/engine/tokenizer"
)

// corpus is the text the test models' bigram statistics come from. It is
// written for this project; paragraphs end with the end-of-sequence token.
var corpus = []string{
	"Once upon a time there was a small river. The river ran past a green hill and a old mill. Every day the river sang a quiet song to the stones.",
	"One morning a little fox came down the hill. The fox was thirsty and tired. He drank from the river and said thank you to the water.",
	"The river was happy. It told the fox about the sea far away. The fox wanted to see the sea, so he walked along the river all day.",
	"At night the fox sat under a tall tree. The stars came out one by one. The river sang its song and the fox fell asleep.",
	"In the morning the fox met a bird. The bird could fly over the hill and see the sea. She told the fox that the sea was big and blue.",
	"The fox and the bird went on together. They crossed a bridge, they passed the mill, and they shared bread with a kind old man.",
	"When they saw the sea, the fox laughed. The water was bright and the waves were loud. The river ran into the sea and its song became a great song.",
	"The fox stayed by the sea for a long time. Then he went home to the hill, and every day he came to the river to say hello.",
	"Tokens stream from the server one by one. The client reads every chunk and counts the usage at the end.",
	"A cached prefix is fast, and a good draft is faster. The server reports both numbers so that people can trust them.",
}

const (
	tokUnk     = 0
	tokBOS     = 1
	tokEOS     = 2
	tokImStart = 259
	tokImEnd   = 260
	firstPiece = 261
	// VocabSize is the size of the test models' shared vocabulary.
	VocabSize = 512
)

// ChatTemplate is the test models' tokenizer.chat_template (ChatML).
const ChatTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// vocab builds the SentencePiece vocabulary shared by all test models:
// <unk>, <s>, </s>, the 256 byte tokens, the two ChatML control tokens,
// "▁", printable ASCII and newline, then pieces learned from the corpus by
// byte-pair merging until the vocabulary is full. A piece's score falls with
// its merge order, so SentencePiece's highest-score-first merging replays
// the learned merges.
func vocab() (tokenizer.Vocab, error) {
	v := tokenizer.Vocab{
		Model: "llama",
		BOS:   tokBOS, EOS: tokEOS, UNK: tokUnk, PAD: -1, EOT: tokImEnd,
		AddBOS: true, AddSpacePrefix: true,
	}
	add := func(piece string, score float32, typ tokenizer.TokenType) {
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, tokenizer.Unknown)
	add("<s>", 0, tokenizer.Control)
	add("</s>", 0, tokenizer.Control)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokenizer.Byte)
	}
	add("<|im_start|>", 0, tokenizer.Control)
	add("<|im_end|>", 0, tokenizer.Control)
	add("▁", 0, tokenizer.Normal)
	for c := byte(' ' + 1); c < 127; c++ {
		add(string(c), 0, tokenizer.Normal)
	}
	add("\n", 0, tokenizer.Normal)

	for i, m := range merges(VocabSize - len(v.Tokens)) {
		add(m, float32(VocabSize-i), tokenizer.Normal)
	}
	if len(v.Tokens) != VocabSize {
		return v, fmt.Errorf("test vocabulary has %d tokens, want %d", len(v.Tokens), VocabSize)
	}
	if v.Tokens[tokImStart] != "<|im_start|>" || v.Tokens[firstPiece] != "▁" {
		return v, fmt.Errorf("test vocabulary layout changed")
	}
	return v, nil
}

// merges learns n byte-pair merges from the corpus words ("▁word", with
// punctuation split off) and returns the merged pieces in merge order.
// Ties in pair frequency go to the lexically smaller pair, so the result is
// deterministic.
func merges(n int) []string {
	type word struct {
		syms  []string
		count int
	}
	counts := map[string]int{}
	for _, para := range corpus {
		for _, w := range strings.Fields(para) {
			core := strings.TrimRight(w, ".,!?")
			if core != "" {
				counts["▁"+core]++
			}
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, len(keys))
	for i, k := range keys {
		for _, r := range k {
			words[i].syms = append(words[i].syms, string(r))
		}
		words[i].count = counts[k]
	}
	var out []string
	for len(out) < n {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if c > bestN || (c == bestN && p[0]+"\x00"+p[1] < best[0]+"\x00"+best[1]) {
				best, bestN = p, c
			}
		}
		if bestN == 0 {
			break // every word is one piece
		}
		merged := best[0] + best[1]
		out = append(out, merged)
		for wi := range words {
			syms := words[wi].syms
			for i := 0; i+1 < len(syms); i++ {
				if syms[i] == best[0] && syms[i+1] == best[1] {
					syms = append(syms[:i+1], syms[i+2:]...)
					syms[i] = merged
				}
			}
			words[wi].syms = syms
		}
	}
	// Pad with two-letter pieces if the corpus ran out of merges.
	seen := map[string]bool{}
	for _, m := range out {
		seen[m] = true
	}
	for a := 'a'; a <= 'z' && len(out) < n; a++ {
		for b := 'a'; b <= 'z' && len(out) < n; b++ {
			if p := string([]rune{a, b}); !seen[p] {
				out = append(out, p)
			}
		}
	}
	return out
}

// bigrams returns P(next | token) estimated from the corpus, tokenised with
// tok, as a dense VocabSize x VocabSize row-stochastic table.
func bigrams(tok *tokenizer.Tokenizer) [][]float32 {
	counts := make([][]float32, VocabSize)
	for i := range counts {
		counts[i] = make([]float32, VocabSize)
	}
	for _, para := range corpus {
		ids := tok.Encode(para, tokenizer.EncodeOptions{AddSpecial: true})
		ids = append(ids, tokEOS)
		for i := 0; i+1 < len(ids); i++ {
			counts[ids[i]][ids[i+1]]++
		}
	}
	// Tokens the corpus never shows (the chat template's newline, say) are
	// followed like the start of a paragraph.
	for i, row := range counts {
		var sum float32
		for _, c := range row {
			sum += c
		}
		if sum == 0 && i != tokBOS {
			copy(row, counts[tokBOS])
		}
	}
	for _, row := range counts {
		var sum float32
		for _, c := range row {
			sum += c
		}
		for j := range row {
			row[j] /= sum
		}
	}
	return counts
}
