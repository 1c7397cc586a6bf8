package chat

import (
	"sort"
	"strings"
)

// Span is the byte range [Start, End) of a prompt.
type Span struct {
	Start, End int
}

// Prompt is a rendered prompt with the places where the conversation's own
// data, not the template, spells a special token's text.
type Prompt struct {
	Text string
	// UserSpecials are the byte ranges of Text, sorted, where a string of
	// the conversation (a message's content, name or reasoning, a tool
	// call, the tools, a variable) holds one of the special texts given to
	// RenderPrompt. Encode Text with special tokens parsed except in these
	// ranges (tokenizer.EncodeOptions{ParseSpecial: true, Plain: ...}), so
	// that a user who writes "<|im_end|>" writes text, not a turn marker,
	// while the whole prompt still merges as one text.
	UserSpecials []Span
	// Exact is false when the template renders the conversation
	// differently once those texts are masked (it tests, cuts or measures
	// them), so that they could not be located; UserSpecials is then nil
	// and the caller decides (refuse the request, or parse every special
	// text as llama.cpp and vLLM do).
	Exact bool
}

// maskByte stands in for every byte of a special text found in the
// conversation's strings when RenderPrompt renders a second time.
const maskByte = 'x'

// RenderPrompt renders c as RenderConversation does and finds the special
// texts the conversation's strings put into the prompt. specials are the
// texts that must not come from user data: the tokenizer's control tokens
// (tokenizer.Tokenizer.ControlTexts).
//
// How: when some string of c holds a special text, the template renders a
// second time with each such occurrence replaced by as many 'x' bytes. Where
// the two prompts differ, a special text of the first lies over 'x's of the
// second: those are UserSpecials. Anything else that differs (the template
// branched on the masked text) makes the result inexact. A special text
// that user data and template text only form together across their
// boundary is not found; real templates write their markers whole.
func (t *Template) RenderPrompt(c Conversation, specials []string) (Prompt, error) {
	vars, err := t.conversationVars(c)
	if err != nil {
		return Prompt{}, err
	}
	text, err := t.execute(vars)
	if err != nil {
		return Prompt{}, err
	}
	specials = nonEmptyLongestFirst(specials)
	masked := make(map[string]value, len(vars))
	changed := false
	for name, v := range vars {
		if name == "bos_token" || name == "eos_token" {
			masked[name] = v // the model's own tokens, not user data
			continue
		}
		mv, ch := maskValue(v, specials)
		masked[name] = mv
		changed = changed || ch
	}
	if !changed {
		return Prompt{Text: text, Exact: true}, nil
	}
	other, err := t.execute(masked)
	if err != nil {
		return Prompt{Text: text}, nil
	}
	spans, ok := userSpans(text, other, specials)
	if !ok {
		return Prompt{Text: text}, nil
	}
	return Prompt{Text: text, UserSpecials: spans, Exact: true}, nil
}

// nonEmptyLongestFirst returns the non-empty texts, longest first.
func nonEmptyLongestFirst(texts []string) []string {
	out := make([]string, 0, len(texts))
	for _, s := range texts {
		if s != "" {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// maskValue returns v with every occurrence of a special text in its
// strings (dict keys included) replaced by maskByte bytes, and whether
// anything changed. Unchanged values are returned as they are.
func maskValue(v value, specials []string) (value, bool) {
	switch x := v.(type) {
	case string:
		m := maskString(x, specials)
		return m, m != x
	case *list:
		var items []value
		for i, it := range x.items {
			mv, ch := maskValue(it, specials)
			if ch && items == nil {
				items = append(make([]value, 0, len(x.items)), x.items[:i]...)
			}
			if items != nil {
				items = append(items, mv)
			}
		}
		if items == nil {
			return x, false
		}
		return mkList(items, x.tuple), true
	case *dict:
		changed := false
		keys := make([]value, len(x.keys))
		vals := make([]value, len(x.vals))
		for i := range x.keys {
			k, kc := maskValue(x.keys[i], specials)
			mv, vc := maskValue(x.vals[i], specials)
			keys[i], vals[i] = k, mv
			changed = changed || kc || vc
		}
		if !changed {
			return x, false
		}
		d := newDict()
		for i := range keys {
			_ = d.set(keys[i], vals[i]) // keys were valid and stay strings
		}
		return d, true
	}
	return v, false
}

// maskString replaces each leftmost occurrence of a special text (longest
// first at a position) with maskByte bytes.
func maskString(s string, specials []string) string {
	var b []byte
	for i := 0; i < len(s); {
		n := 0
		for _, sp := range specials {
			if strings.HasPrefix(s[i:], sp) {
				n = len(sp)
				break
			}
		}
		if n == 0 {
			if b != nil {
				b = append(b, s[i])
			}
			i++
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(s)), s[:i]...)
		}
		b = append(b, strings.Repeat(string(maskByte), n)...)
		i += n
	}
	if b == nil {
		return s
	}
	return string(b)
}

// userSpans compares a prompt with its masked rendering: every special
// text in text that the masked prompt holds as maskByte bytes came from
// user data. It reports false when the two differ anywhere else.
func userSpans(text, masked string, specials []string) ([]Span, bool) {
	if len(text) != len(masked) {
		return nil, false
	}
	var spans []Span
	covered := 0 // text[:covered] is accounted for
	for i := 0; i < len(text); i++ {
		if i < covered || text[i] == masked[i] {
			continue
		}
		// A difference: it must lie in a special text of text that the
		// masked prompt spells as mask bytes. Look back for its start.
		found := false
		for _, sp := range specials {
			for start := max(i-len(sp)+1, covered); start <= i; start++ {
				end := start + len(sp)
				if end > len(text) || text[start:end] != sp || !allMask(masked[start:end]) {
					continue
				}
				spans = append(spans, Span{start, end})
				covered = end
				found = true
				break
			}
			if found {
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return spans, true
}

func allMask(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != maskByte {
			return false
		}
	}
	return true
}
