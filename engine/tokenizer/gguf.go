package tokenizer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"rill/engine/gguf"
)

// Metadata keys read by VocabFromGGUF.
const (
	keyModel          = "tokenizer.ggml.model"
	keyPre            = "tokenizer.ggml.pre"
	keyMerges         = "tokenizer.ggml.merges"
	keyName           = "general.name"
	keyTokens         = "tokenizer.ggml.tokens"
	keyScores         = "tokenizer.ggml.scores"
	keyTypes          = "tokenizer.ggml.token_type"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyLowercase      = "tokenizer.ggml.normalizer.lowercase"
	keyStripAccents   = "tokenizer.ggml.normalizer.strip_accents"
	keyCharsmap       = "tokenizer.ggml.precompiled_charsmap"
	keyRemoveExtraWS  = "tokenizer.ggml.remove_extra_whitespaces"
)

// role is a special token llama.cpp's loader knows: read from its metadata
// key, else (for some) recognised by its text.
type role int

const (
	roleBOS role = iota
	roleEOS
	roleEOT
	roleEOM
	roleUNK
	rolePAD
	roleFIMPre
	roleFIMSuf
	roleFIMMid
	roleFIMPad
	roleFIMRep
	roleFIMSep
	roleSEP
	nRoles
)

// roleKeys lists the metadata keys of each role in the order llama.cpp reads
// them; a later key overrides an earlier one (the deprecated prefix/suffix/
// middle keys come last).
var roleKeys = []struct {
	key  string
	role role
}{
	{"tokenizer.ggml.bos_token_id", roleBOS},
	{"tokenizer.ggml.eos_token_id", roleEOS},
	{"tokenizer.ggml.eot_token_id", roleEOT},
	{"tokenizer.ggml.eom_token_id", roleEOM},
	{"tokenizer.ggml.unknown_token_id", roleUNK},
	{"tokenizer.ggml.seperator_token_id", roleSEP}, // sic
	{"tokenizer.ggml.padding_token_id", rolePAD},
	{"tokenizer.ggml.fim_pre_token_id", roleFIMPre},
	{"tokenizer.ggml.fim_suf_token_id", roleFIMSuf},
	{"tokenizer.ggml.fim_mid_token_id", roleFIMMid},
	{"tokenizer.ggml.fim_pad_token_id", roleFIMPad},
	{"tokenizer.ggml.fim_rep_token_id", roleFIMRep},
	{"tokenizer.ggml.fim_sep_token_id", roleFIMSep},
	{"tokenizer.ggml.prefix_token_id", roleFIMPre},
	{"tokenizer.ggml.suffix_token_id", roleFIMSuf},
	{"tokenizer.ggml.middle_token_id", roleFIMMid},
}

// roleTexts are the token texts by which llama.cpp finds a role that no
// metadata key names. When several are present the byte-wise smallest wins,
// as llama.cpp scans its sorted text-to-id map.
var roleTexts = map[role][]string{
	roleEOT: {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"},
	roleEOM: {"<|eom_id|>"},
	roleFIMPre: {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
		"<|code_prefix|>", "<|prefix|>"},
	roleFIMSuf: {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
		"<|code_suffix|>", "<|suffix|>"},
	roleFIMMid: {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
		"<|code_middle|>", "<|middle|>"},
	roleFIMPad: {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
	roleFIMRep: {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
	roleFIMSep: {"<|file_sep|>"},
}

// eogTexts are token texts that llama.cpp always treats as end of generation.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
}

// FromGGUF builds a Tokenizer from a GGUF file's metadata:
// New(VocabFromGGUF(md)).
func FromGGUF(md *gguf.Metadata) (*Tokenizer, error) {
	v, byText, err := vocabFromGGUF(md)
	if err != nil {
		return nil, err
	}
	return newTokenizer(v, byText)
}

// VocabFromGGUF reads the tokenizer.ggml.* metadata the way llama.cpp's loader
// does, defaults included:
//   - model "llama": BOS 1, EOS 2, UNK 0 unless their keys say otherwise;
//     add_bos_token true, add_eos_token false, add_space_prefix true when the
//     keys are absent.
//   - model "gemma4": as "gpt2" with pre-tokenizer "gemma4" (spaces as
//     U+2581, words split at newlines, <0xXX> byte fallback), no default
//     special ids, and add_bos_token always true, as llama.cpp forces it.
//   - model "gpt2": tokenizer.ggml.merges is required and tokenizer.ggml.pre
//     names the pre-tokenizer (absent: llama.cpp's default rules); BOS and
//     EOS 11 (llama.cpp's historical default) and no UNK unless keys say
//     otherwise; add_bos_token true for the llama-bpe family and false for
//     the others, add_eos_token false, when the keys are absent;
//     IgnoreMerges for the llama-bpe family. Other models, and pre-tokenizers
//     this package does not implement, are an "unsupported" error.
//   - model "bert" (WordPiece): BOS ([CLS]) 101, UNK 100, SEP 102, PAD 0
//     and no EOS unless their keys say otherwise (tokenizer.ggml.cls_token_id
//     is not read, as in llama.cpp); AddBOS and AddSEP always and AddEOS
//     never, whatever the add_*_token keys say, since llama.cpp's WordPiece
//     encoder ignores them; Lowercase from
//     tokenizer.ggml.normalizer.lowercase (absent: true) and StripAccents
//     from tokenizer.ggml.normalizer.strip_accents (absent: as Lowercase).
//   - model "t5" (SentencePiece unigram): EOS 1, UNK 2, PAD 0 and no BOS
//     unless their keys say otherwise; add_bos_token false, add_eos_token
//     true, add_space_prefix and remove_extra_whitespaces false when the
//     keys are absent; the normaliser from
//     tokenizer.ggml.precompiled_charsmap (uint8 or int8 array; absent:
//     none).
//   - scores absent: all 0 (FLOAT32 or INT32 arrays accepted); token_type
//     absent: all Normal. Arrays shorter than the token list are an error,
//     longer ones are cut to it.
//   - an empty token text becomes "[EMPTY_<id>]"; duplicate texts are an error
//     (llama.cpp aborts on them).
//   - a special id key whose value is outside the vocabulary (for example
//     0xFFFFFFFF for "none") leaves that id at its default, as in llama.cpp.
//   - EOT, EOM and fill-in-the-middle tokens that no key names are recognised
//     by their text, and they and the tokens llama.cpp treats as end of
//     generation by text are made Control, as llama.cpp does. EOM and the FIM
//     pad/repo/separator tokens go into Vocab.EOG. llama.cpp's fixes for
//     particular vocabularies apply too: gpt-oss's <|channel|>, <|message|>,
//     <|start|>, <|constrain|> are UserDefined; <|end|> is no end of
//     generation (and UserDefined) beside <|return|> and <|call|>, or
//     <|calls|> and <|flush|>; </s> is none (and Normal) beside
//     <|tool_response>.
//   - a model whose general.name contains "phi-3" or "phi3" (any case) gets
//     llama.cpp's Phi-3 strip attributes: every special token but <unk>,
//     <s> and <|endoftext|>, and </s>, swallows the whitespace to its right
//     (Vocab.RStrip).
//
// A key present with the wrong value type is an error naming the key.
func VocabFromGGUF(md *gguf.Metadata) (Vocab, error) {
	v, _, err := vocabFromGGUF(md)
	return v, err
}

// vocabFromGGUF is VocabFromGGUF that also returns its text-to-id index of
// the tokens, which New would otherwise build again.
func vocabFromGGUF(md *gguf.Metadata) (Vocab, map[string]int, error) {
	model, ok := md.String(keyModel)
	if !ok {
		if _, present := md.Value(keyModel); present {
			return Vocab{}, nil, fmt.Errorf("%s is not a string", keyModel)
		}
		return Vocab{}, nil, fmt.Errorf("%s is missing", keyModel)
	}
	var v Vocab
	switch model {
	case ModelLlama:
		v = Vocab{Model: model, AddBOS: true, AddSpacePrefix: true}
	case ModelGPT2, ModelGemma4:
		pre, err := optionalString(md, keyPre)
		if err != nil {
			return Vocab{}, nil, err
		}
		if model == ModelGemma4 {
			pre = "gemma4" // llama.cpp ignores the key for this model
		}
		spec, err := lookupPre(pre)
		if err != nil {
			return Vocab{}, nil, err
		}
		merges, ok := md.Strings(keyMerges)
		if !ok {
			if _, present := md.Value(keyMerges); present {
				return Vocab{}, nil, fmt.Errorf("%s is not an array of strings", keyMerges)
			}
			return Vocab{}, nil, fmt.Errorf("%s is missing", keyMerges)
		}
		v = Vocab{Model: model, Pre: pre, Merges: merges, IgnoreMerges: spec.ignoreMerges, AddBOS: spec.addBOS}
	case ModelBERT:
		v = Vocab{Model: model, Lowercase: true}
		if err := optionalBool(md, keyLowercase, &v.Lowercase); err != nil {
			return Vocab{}, nil, err
		}
		v.StripAccents = v.Lowercase
		if err := optionalBool(md, keyStripAccents, &v.StripAccents); err != nil {
			return Vocab{}, nil, err
		}
	case ModelT5:
		v = Vocab{Model: model, AddEOS: true}
		cm, err := readCharsmap(md)
		if err != nil {
			return Vocab{}, nil, err
		}
		v.Charsmap = cm
		if err := optionalBool(md, keyRemoveExtraWS, &v.RemoveExtraWhitespaces); err != nil {
			return Vocab{}, nil, err
		}
	default:
		return Vocab{}, nil, fmt.Errorf("unsupported tokenizer model %q", model)
	}

	tokens, ok := md.Strings(keyTokens)
	if !ok {
		if _, present := md.Value(keyTokens); present {
			return Vocab{}, nil, fmt.Errorf("%s is not an array of strings", keyTokens)
		}
		return Vocab{}, nil, fmt.Errorf("%s is missing", keyTokens)
	}
	n := len(tokens)
	if n == 0 {
		return Vocab{}, nil, fmt.Errorf("%s is empty", keyTokens)
	}
	seen := make(map[string]int, n)
	for i, t := range tokens {
		if t == "" {
			t = "[EMPTY_" + strconv.Itoa(i) + "]"
			tokens[i] = t
		}
		if j, dup := seen[t]; dup {
			return Vocab{}, nil, fmt.Errorf("%s: tokens %d and %d are both %q", keyTokens, j, i, t)
		}
		seen[t] = i
	}
	v.Tokens = tokens

	scores, err := readScores(md, n)
	if err != nil {
		return Vocab{}, nil, err
	}
	v.Scores = scores
	types, err := readTypes(md, n)
	if err != nil {
		return Vocab{}, nil, err
	}
	v.Types = types

	for _, k := range []struct {
		key string
		dst *bool
	}{{keyAddSpacePrefix, &v.AddSpacePrefix}, {keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}} {
		if err := optionalBool(md, k.key, k.dst); err != nil {
			return Vocab{}, nil, err
		}
	}
	if v.Pre == "gemma4" {
		v.AddBOS = true // llama.cpp overrides add_bos_token=false for Gemma 4
	}
	if model == ModelBERT {
		// llama.cpp's WordPiece encoder adds [CLS] and [SEP] whatever
		// the keys say.
		v.AddBOS, v.AddEOS, v.AddSEP, v.AddSpacePrefix = true, false, true, false
	}

	ids, err := readRoles(md, model, n)
	if err != nil {
		return Vocab{}, nil, err
	}
	detectRoles(&v, &ids, seen)
	v.BOS, v.EOS, v.UNK, v.PAD, v.EOT, v.SEP = ids[roleBOS], ids[roleEOS], ids[roleUNK], ids[rolePAD], ids[roleEOT], ids[roleSEP]

	name, err := optionalString(md, keyName)
	if err != nil {
		return Vocab{}, nil, err
	}
	if lower := strings.ToLower(name); strings.Contains(lower, "phi-3") || strings.Contains(lower, "phi3") {
		setPhi3Strip(&v, seen)
	}
	return v, seen, nil
}

// readCharsmap reads tokenizer.ggml.precompiled_charsmap, an array of
// uint8 or int8; absent is nil. Its layout is checked by New.
func readCharsmap(md *gguf.Metadata) ([]byte, error) {
	val, present := md.Value(keyCharsmap)
	if !present {
		return nil, nil
	}
	switch x := val.Any().(type) {
	case []uint8:
		return x, nil
	case []int8:
		b := make([]byte, len(x))
		for i, c := range x {
			b[i] = byte(c)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s is not an array of uint8 or int8", keyCharsmap)
}

// optionalString reads a string key that may be absent ("").
func optionalString(md *gguf.Metadata, key string) (string, error) {
	s, ok := md.String(key)
	if !ok {
		if _, present := md.Value(key); present {
			return "", fmt.Errorf("%s is not a string", key)
		}
	}
	return s, nil
}

// optionalBool reads a bool key into *dst when it is present.
func optionalBool(md *gguf.Metadata, key string, dst *bool) error {
	if _, present := md.Value(key); !present {
		return nil
	}
	b, ok := md.Bool(key)
	if !ok {
		return fmt.Errorf("%s is not a bool", key)
	}
	*dst = b
	return nil
}

// setPhi3Strip gives v llama.cpp's Phi-3 strip attributes.
func setPhi3Strip(v *Vocab, byText map[string]int) {
	rstrip := map[int]bool{}
	for id, typ := range v.Types {
		switch typ {
		case Control, UserDefined, Unknown:
			rstrip[id] = true
		}
	}
	if id, ok := byText["</s>"]; ok {
		rstrip[id] = true
	}
	for _, text := range []string{"<unk>", "<s>", "<|endoftext|>"} {
		if id, ok := byText[text]; ok {
			delete(rstrip, id)
		}
	}
	v.RStrip = nil
	for id := range rstrip {
		v.RStrip = append(v.RStrip, id)
	}
	slices.Sort(v.RStrip)
}

func readScores(md *gguf.Metadata, n int) ([]float32, error) {
	val, present := md.Value(keyScores)
	if !present {
		return make([]float32, n), nil
	}
	scores, ok := md.Float32s(keyScores)
	if !ok && val.Type() == gguf.TypeArray && val.ElemType() == gguf.TypeInt32 {
		ints, _ := md.Int32s(keyScores)
		scores = make([]float32, len(ints))
		for i, s := range ints {
			scores[i] = float32(s)
		}
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("%s is not an array of float32 or int32", keyScores)
	}
	if len(scores) < n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", keyScores, len(scores), n)
	}
	return scores[:n:n], nil
}

func readTypes(md *gguf.Metadata, n int) ([]TokenType, error) {
	types := make([]TokenType, n)
	if _, present := md.Value(keyTypes); !present {
		for i := range types {
			types[i] = Normal
		}
		return types, nil
	}
	raw, ok := md.Int32s(keyTypes)
	if !ok {
		return nil, fmt.Errorf("%s is not an array of int32", keyTypes)
	}
	if len(raw) < n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", keyTypes, len(raw), n)
	}
	for i := range types {
		types[i] = TokenType(raw[i])
	}
	return types, nil
}

// readRoles returns the id of every role: the model's defaults, overridden
// by keys whose value lies in the vocabulary; -1 for none.
func readRoles(md *gguf.Metadata, model string, n int) ([nRoles]int, error) {
	var ids [nRoles]int
	for r := range ids {
		ids[r] = -1
	}
	switch model {
	case ModelGPT2:
		ids[roleBOS], ids[roleEOS] = 11, 11
	case ModelLlama:
		ids[roleBOS], ids[roleEOS], ids[roleUNK] = 1, 2, 0
	case ModelBERT:
		ids[roleBOS], ids[roleUNK], ids[roleSEP], ids[rolePAD] = 101, 100, 102, 0
	case ModelT5:
		ids[roleEOS], ids[roleUNK], ids[rolePAD] = 1, 2, 0
	}
	for r, id := range ids {
		if id >= n {
			ids[r] = -1
		}
	}
	for _, k := range roleKeys {
		if _, present := md.Value(k.key); !present {
			continue
		}
		id, ok := md.Int(k.key)
		if !ok {
			if _, big := md.Uint(k.key); !big {
				return ids, fmt.Errorf("%s is not an integer", k.key)
			}
			continue // above MaxInt64: out of range, keep the default
		}
		if id >= 0 && id < int64(n) {
			ids[k.role] = int(id)
		}
	}
	return ids, nil
}

// dropRole unsets the EOT role when id holds it: llama.cpp took id out of
// its end-of-generation set, and IsEOG counts EOT always. (EOS stays: it is
// also what templates and AddEOS use; llama.cpp's fixes never hit it.)
func dropRole(ids *[nRoles]int, id int) {
	if ids[roleEOT] == id {
		ids[roleEOT] = -1
	}
}

// detectRoles fills roles that no key named from token texts, collects the
// extra end-of-generation ids into v.EOG and marks every such token Control.
func detectRoles(v *Vocab, ids *[nRoles]int, byText map[string]int) {
	forceControl := func(id int) {
		if v.Types[id] != Control && v.Types[id] != Unknown {
			v.Types[id] = Control
		}
	}
	for r := role(0); r < nRoles; r++ {
		texts, ok := roleTexts[r]
		if !ok || ids[r] >= 0 {
			continue
		}
		best := ""
		for _, t := range texts {
			if _, present := byText[t]; present && (best == "" || t < best) {
				best = t
			}
		}
		if best != "" {
			ids[r] = byText[best]
			forceControl(ids[r])
		}
	}

	eog := map[int]bool{}
	for _, r := range []role{roleFIMPad, roleFIMRep, roleFIMSep, roleEOM} {
		if ids[r] >= 0 {
			eog[ids[r]] = true
		}
	}
	for _, t := range eogTexts {
		if id, ok := byText[t]; ok {
			eog[id] = true
			forceControl(id)
		}
	}
	// gpt-oss renders these markers as text.
	for _, t := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := byText[t]; ok {
			v.Types[id] = UserDefined
		}
	}
	for _, r := range []role{roleEOS, roleEOT, roleEOM} {
		if ids[r] >= 0 {
			eog[ids[r]] = true
		}
	}
	inEOG := func(text string) (int, bool) {
		id, ok := byText[text]
		return id, ok && eog[id]
	}
	// o200k_harmony and solar-open end a message with <|end|> but not the
	// generation.
	_, hasReturn := inEOG("<|return|>")
	_, hasCall := inEOG("<|call|>")
	_, hasCalls := inEOG("<|calls|>")
	_, hasFlush := inEOG("<|flush|>")
	if end, hasEnd := inEOG("<|end|>"); hasEnd && (hasCall || hasCalls) && (hasReturn || hasFlush) {
		delete(eog, end)
		v.Types[end] = UserDefined
		dropRole(ids, end)
	}
	// Gemma 4 and PaddleOCR: </s> is text.
	if _, hasToolResponse := inEOG("<|tool_response>"); hasToolResponse {
		if s, hasS := inEOG("</s>"); hasS {
			delete(eog, s)
			v.Types[s] = Normal
			dropRole(ids, s)
		}
	}
	delete(eog, ids[roleEOS])
	delete(eog, ids[roleEOT])
	v.EOG = nil
	for id := range eog {
		v.EOG = append(v.EOG, id)
	}
	slices.Sort(v.EOG)
}
