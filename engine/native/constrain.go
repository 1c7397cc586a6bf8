package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"rill/engine"
	"rill/engine/grammar"
	"rill/engine/tokenizer"
	"rill/engine/toolcall"
)

// Constrained decoding: response_format, forced tool calls and logit_bias
// shape the logits a choice samples from.
//
// Per step and choice the order is:
//
//  1. logprobs are taken from the model's raw row (they report the model's
//     distribution, as OpenAI has done since 2024 and vLLM does by
//     default: neither the bias nor the grammar shows in them);
//  2. the logit bias is added to a copy of the row;
//  3. the grammar's mask sets every token it does not allow to -Inf (after
//     the bias, so that no bias can bring a token back); the mask also
//     keeps the output able to end within max_tokens (see below);
//  4. the sampler applies penalties, temperature, top-k, top-p and min-p to
//     what is left and draws with the choice's seeded generator.
//
// So a constrained choice is reproducible with a seed like any other, and
// speculative decoding stays lossless: drafts are cut at the first token the
// grammar refuses (spec.Verify then samples that position from the target),
// and every verified position is shaped the same way from the matcher
// advanced over the drafts before it.
//
// Budget-aware closing: a grammar may allow output without end (json_object
// lets a model that never writes "}" fill any budget with members), and a
// choice cut by max_tokens ends with finish_reason "length" and broken
// JSON. So the mask is grammar.Matcher.MaskBudget with the tokens the
// choice may still emit, its end token included (max_tokens, or the
// context's room when unset, less the tokens emitted and the drafts before
// the position): a token after which the shortest completion and the end
// token no longer fit is taken out. Output that would run out is steered
// to close its strings, arrays and objects (adding the least values and the
// required properties still due) and end with the end token. The distance
// is counted in single-byte tokens, an upper bound, so the closing may
// begin a little earlier than the shortest tokenisation would need: output
// that ends in time on its own is never changed if it had room for its
// byte-counted completion at every token (on stories260K a reply of 38
// tokens needs max_tokens 39 for that). When the budget is too small from
// the start, the plain mask applies and the choice ends with "length" as
// before. Drafts verify under the same masks (each position's budget
// counts the drafts before it), so drafting stays lossless.

// toolMarkers are the texts that open and delimit tool calls in the formats
// of engine/toolcall. Vocabularies often make them control tokens, which
// decode as nothing; the grammar vocabulary spells them with their text, and
// choices that are constrained or parse tool calls decode them as that text
// too, so that the grammar, the parser and the client see the same output.
var toolMarkers = toolcall.Markers()

// markerTokens returns the control (or unknown, or unused) tokens of tok
// whose text is a tool marker, by id. Other token types decode as their
// text already.
func markerTokens(tok *tokenizer.Tokenizer) map[int]string {
	v := tok.Vocab()
	out := map[int]string{}
	for id, text := range v.Tokens {
		switch v.Types[id] {
		case tokenizer.Normal, tokenizer.UserDefined, tokenizer.Byte:
			continue
		}
		if slices.Contains(toolMarkers, text) {
			out[id] = text
		}
	}
	return out
}

// grammarVocab builds the grammar's view of the model's vocabulary once, on
// the first request that needs it (a 150k vocabulary takes tens of
// milliseconds and megabytes, which models serving no constrained request
// never pay). Safe for concurrent use.
func (e *Engine) grammarVocab() (*grammar.Vocab, error) {
	e.gvocabOnce.Do(func() {
		n := e.tok.Size()
		tokens := make([][]byte, n)
		var eog []int
		for id := range n {
			if e.tok.IsEOG(id) {
				eog = append(eog, id)
				continue
			}
			if text, ok := e.markers[id]; ok {
				tokens[id] = []byte(text)
				continue
			}
			// Control, unknown and unused tokens have no piece: never
			// allowed inside constrained text.
			tokens[id] = e.tok.Piece(id)
		}
		if len(eog) == 0 {
			e.gvocabErr = errors.New("the model's vocabulary has no end-of-generation token, which constrained decoding needs")
			return
		}
		e.gvocab, e.gvocabErr = grammar.NewVocab(tokens, eog)
	})
	return e.gvocab, e.gvocabErr
}

// constraint is what a request asks of its output beyond sampling: a
// grammar, tool-call parsing, a logit bias. It is immutable and shared by
// the request's choices; nil means none of it.
type constraint struct {
	// grammar holds the output to a response format or to tool calls; nil
	// means free text.
	grammar *grammar.Grammar
	vocab   *grammar.Vocab // set with grammar
	// parse says that tool calls are read out of the output (tools were
	// given and tool_choice is not "none"), written in format; tools are
	// the declared names.
	parse  bool
	format toolcall.Format
	tools  []string
	// params are the tools' parameter schemas by name, which the XML
	// formats type their argument values by.
	params map[string]json.RawMessage
	// forced: tool_choice required or named; the grammar makes the whole
	// reply calls, so the parser's leftovers (the start of a call cut
	// short by max_tokens before its name) are not content.
	forced bool
	// instructions is the system-prompt text that teaches the generic tool
	// format to a model whose template has none; empty otherwise.
	instructions string
	bias         []logitBias // by ascending id
}

type logitBias struct {
	id    int32
	value float32
}

// shapes reports whether the logits a choice samples from differ from the
// model's: a grammar or a bias applies.
func (k *constraint) shapes() bool { return k != nil && (k.grammar != nil || len(k.bias) > 0) }

// maxLogitBias bounds a logit_bias value, as OpenAI does.
const maxLogitBias = 100

// constraintFor validates and compiles what req asks of its output. Errors
// are *engine.RequestError naming the offending field. A request that asks
// for nothing gets nil.
func (e *Engine) constraintFor(req *engine.Request) (*constraint, error) {
	k := &constraint{}
	bias, err := e.logitBias(req.LogitBias)
	if err != nil {
		return nil, err
	}
	k.bias = bias

	rf, err := responseGrammar(req.ResponseFormat, e.opts.JSON)
	if err != nil {
		return nil, err
	}
	if rf != nil && req.Messages != nil && e.toolFormat == toolcall.Harmony {
		// The schema compiled above; on a harmony model the reply is
		// the final channel's (HarmonyResponseGrammar).
		if rf, err = toolcall.HarmonyResponseGrammar(req.ResponseFormat.Schema, e.opts.JSON); err != nil {
			return nil, engine.Errorf("invalid_value", "response_format", "Invalid schema for response_format '%s': %v", req.ResponseFormat.Name, err)
		}
	}
	k.grammar = rf
	if err := e.toolConstraint(req, k); err != nil {
		return nil, err
	}
	if k.grammar == nil && !k.parse && len(k.bias) == 0 {
		return nil, nil
	}
	if k.grammar != nil {
		if k.vocab, err = e.grammarVocab(); err != nil {
			param := "response_format"
			if len(req.Tools) > 0 {
				param = "tool_choice"
			}
			return nil, engine.Errorf("unsupported_parameter", param, "Constrained output is not available for this model: %v.", err)
		}
	}
	return k, nil
}

// logitBias checks and sorts a request's logit_bias.
func (e *Engine) logitBias(m map[int]float64) ([]logitBias, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make([]logitBias, 0, len(m))
	for id, v := range m {
		if !e.tok.Valid(id) {
			return nil, engine.Errorf("invalid_value", "logit_bias",
				"Invalid key in 'logit_bias': token id %d is outside this model's vocabulary of %d tokens (0 to %d).", id, e.tok.Size(), e.tok.Size()-1)
		}
		if math.IsNaN(v) || v < -maxLogitBias || v > maxLogitBias {
			return nil, engine.Errorf("invalid_value", "logit_bias",
				"Invalid value for 'logit_bias' of token %d: %v; biases must be between -100 and 100.", id, v)
		}
		if v != 0 {
			out = append(out, logitBias{id: int32(id), value: float32(v)})
		}
	}
	slices.SortFunc(out, func(a, b logitBias) int { return int(a.id - b.id) })
	return out, nil
}

// responseGrammar compiles response_format with the server's JSON options:
// nil for free text.
func responseGrammar(rf *engine.ResponseFormat, opts grammar.JSONOptions) (*grammar.Grammar, error) {
	if rf == nil {
		return nil, nil
	}
	switch rf.Type {
	case "", engine.FormatText:
		return nil, nil
	case engine.FormatJSONObject:
		return grammar.AnyJSONObject(opts), nil
	case engine.FormatJSONSchema:
		if len(rf.Schema) == 0 {
			// A json_schema without a schema promises no more than an object.
			return grammar.AnyJSONObject(opts), nil
		}
		g, err := grammar.FromJSONSchema(rf.Schema, opts)
		if err != nil {
			return nil, engine.Errorf("invalid_value", "response_format",
				"Invalid schema for response_format '%s': %v", rf.Name, err)
		}
		return g, nil
	}
	return nil, engine.Errorf("invalid_value", "response_format.type",
		"Invalid value for 'response_format.type': '%s' (want text, json_object or json_schema).", rf.Type)
}

// toolConstraint adds what req's tools and tool_choice ask for to k:
//
//   - "required" or a named function: the format's tool-call grammar over
//     every tool, or the named one (it replaces a response_format grammar:
//     the reply is the calls);
//   - "auto": parsing, and for the generic format the grammar that allows
//     calls or an answer ({"content": ...}), which holds the arguments of a
//     tool that is not strict as far as its schema allows (a schema beyond
//     a grammar is no error there); with a response_format grammar
//     the reply is that format and no call can be written, so auto then
//     acts as "none";
//   - "none": nothing (the template still shows the tools).
func (e *Engine) toolConstraint(req *engine.Request, k *constraint) error {
	choice := req.ToolChoice
	switch choice.Mode {
	case engine.ToolChoiceAuto, engine.ToolChoiceNone, engine.ToolChoiceRequired, engine.ToolChoiceFunction:
	default:
		return engine.Errorf("invalid_value", "tool_choice", "Invalid value for 'tool_choice': '%s'.", choice.Mode)
	}
	if len(req.Tools) == 0 {
		if choice.Mode == engine.ToolChoiceRequired || choice.Mode == engine.ToolChoiceFunction {
			return engine.Errorf("invalid_value", "tool_choice",
				"Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
		}
		return nil
	}
	if req.Messages == nil {
		return engine.Errorf("unsupported_parameter", "tools", "tools are only supported on chat completions.")
	}
	tools := make([]toolcall.Tool, len(req.Tools))
	names := make([]string, len(req.Tools))
	params := make(map[string]json.RawMessage, len(req.Tools))
	for i, t := range req.Tools {
		tools[i] = toolcall.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}
		names[i] = t.Name
		params[t.Name] = t.Parameters
	}
	index := make([]int, len(tools)) // the grammar's tool i is the request's index[i]
	for i := range index {
		index[i] = i
	}
	if choice.Mode == engine.ToolChoiceFunction {
		i := slices.Index(names, choice.Name)
		if i < 0 {
			return engine.Errorf("invalid_value", "tool_choice",
				"Invalid value for 'tool_choice': no function named '%s' is among the tools.", choice.Name)
		}
		tools, index = tools[i:i+1], []int{i}
	}
	format := e.toolFormat
	opts := toolcall.GrammarOptions{Parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls, JSON: e.opts.JSON}
	switch {
	case choice.Mode == engine.ToolChoiceNone:
		return nil
	case choice.Mode == engine.ToolChoiceAuto && k.grammar != nil:
		return nil // the response format holds the reply; no call fits in it
	case choice.Mode == engine.ToolChoiceAuto && format != toolcall.Generic:
		// The model decides; its calls are parsed out of free text.
		k.parse, k.format, k.tools, k.params = true, format, names, params
		return nil
	case choice.Mode == engine.ToolChoiceAuto:
		opts.AllowContent = true
	}
	g, err := toolcall.Grammar(format, tools, opts)
	if err != nil {
		return toolError(err, index)
	}
	k.grammar, k.parse, k.format, k.tools, k.params = g, true, format, names, params
	k.forced = !opts.AllowContent
	if format == toolcall.Generic {
		k.instructions = toolcall.GenericInstructions(tools, opts.AllowContent)
	}
	return nil
}

// toolError turns a tool-call grammar's error into the client's 400;
// index maps the grammar's tools to the request's.
func toolError(err error, index []int) error {
	var te *toolcall.ToolError
	if !errors.As(err, &te) {
		return fmt.Errorf("tool-call grammar: %w", err)
	}
	i := index[te.Index]
	var se *grammar.SchemaError
	if errors.As(te.Err, &se) {
		return engine.Errorf("invalid_value", fmt.Sprintf("tools[%d].function.parameters", i),
			"Invalid schema for function '%s': %v", te.Name, se)
	}
	return engine.Errorf("invalid_value", fmt.Sprintf("tools[%d].function.name", i),
		"Invalid function '%s': %v", te.Name, te.Err)
}

// shaper is a choice's part of a constraint: its grammar matcher, the
// buffers its shaped rows live in, and its tool-call parser. It is owned by
// the loop, like the rest of the choice. Its methods accept a nil shaper
// where a choice without a constraint may call them.
type shaper struct {
	k       *constraint
	matcher *grammar.Matcher // nil without a grammar
	// maxTokens is the choice's budget, the end token included: the
	// matcher's length (tokens emitted and drafts accepted) counts against
	// it.
	maxTokens int
	mask      []uint64         // nil until needed, and after release
	rows      []float32        // shaped rows; nil until needed, and after release
	parser    *toolcall.Parser // nil unless tool calls are parsed
	calls     int              // tool calls begun
}

// newShaper returns the shaper of a choice of k that may emit maxTokens
// tokens; nil for a nil k.
func newShaper(k *constraint, maxTokens int) *shaper {
	if k == nil {
		return nil
	}
	s := &shaper{k: k, maxTokens: maxTokens}
	if k.grammar != nil {
		s.matcher = grammar.NewMatcher(k.grammar, k.vocab)
	}
	if k.parse && k.format != toolcall.Harmony { // a harmonySplit reads those
		s.parser = toolcall.NewParser(k.format, toolcall.Options{Tools: k.tools, Parameters: k.params})
	}
	return s
}

// release drops the vocabulary-sized buffers; they come back when needed.
func (s *shaper) release() {
	if s != nil {
		s.mask, s.rows = nil, nil
	}
}

// shape returns the logits to sample from at the matcher's position: row
// itself when nothing shapes it, else a copy in slot (one row of the
// shaper's buffer per drafted position) with the mask applied and the bias
// added (a masked logit stays -Inf whatever its bias). The mask keeps the
// output able to end within the tokens left at the matcher's position
// (MaskBudget). ok is false when the grammar allows no token at all (a
// dead end: the grammar wants bytes no token spells).
func (s *shaper) shape(row []float32, slot int) (out []float32, ok bool) {
	if !s.k.shapes() {
		return row, true
	}
	vocab := len(row)
	if need := (slot + 1) * vocab; len(s.rows) < need {
		s.rows = append(s.rows, make([]float32, need-len(s.rows))...)
	}
	out = s.rows[slot*vocab : (slot+1)*vocab]
	ok = true
	if s.matcher == nil {
		copy(out, row)
	} else {
		if s.mask == nil {
			s.mask = make([]uint64, grammar.MaskWords(s.k.vocab.Size()))
		}
		s.matcher.MaskBudget(s.mask, s.maxTokens-s.matcher.Len())
		ok = maskedCopy(out, row, s.mask)
	}
	for _, b := range s.k.bias {
		if int(b.id) < vocab {
			out[b.id] += b.value
		}
	}
	return out, ok
}

// negInf is a run of -Inf to copy from: filling with copy is a vectorised
// memmove, much faster than a loop of stores.
var negInf = func() []float32 {
	v := make([]float32, 4096)
	for i := range v {
		v[i] = float32(math.Inf(-1))
	}
	return v
}()

// maskedCopy writes src to dst (equal lengths) with every logit the mask
// does not allow set to -Inf (ids past the mask included), and reports
// whether any token is allowed. It goes by runs of whole words: between
// JSON tokens nearly every word is zero (a fill), inside a JSON string
// nearly every word is all ones (a copy), and only the few mixed words are
// handled bit by bit.
func maskedCopy(dst, src []float32, mask []uint64) bool {
	n := len(src)
	word := func(w int) uint64 {
		if w < len(mask) {
			return mask[w]
		}
		return 0
	}
	full := n &^ 63 // ids below full are in whole words
	allowed := false
	for lo := 0; lo < n; {
		m := word(lo >> 6)
		if lo < full && (m == 0 || m == ^uint64(0)) {
			end := lo + 64
			for end < full && word(end>>6) == m {
				end += 64
			}
			if m == 0 {
				for i := lo; i < end; i += len(negInf) {
					copy(dst[i:end], negInf)
				}
			} else {
				copy(dst[lo:end], src[lo:end])
				allowed = true
			}
			lo = end
			continue
		}
		hi := min(lo+64, n)
		valid := ^uint64(0) >> (64 - (hi - lo))
		copy(dst[lo:hi], src[lo:hi])
		if m&valid != 0 {
			allowed = true
		}
		for z := ^m & valid; z != 0; z &= z - 1 {
			dst[lo+bits.TrailingZeros64(z)] = negInf[0]
		}
		lo = hi
	}
	return allowed
}

// accept advances the matcher past an emitted token. The token was drawn
// from a row the mask shaped, so the grammar allows it; an error is a bug
// (the loop fails the running requests and logs it).
func (s *shaper) accept(tok int) {
	if s == nil || s.matcher == nil {
		return
	}
	if err := s.matcher.Accept(tok); err != nil {
		panic(fmt.Sprintf("native: a sampled token broke the grammar: %v", err))
	}
}

// rollback undoes the last n tokens the matcher accepted.
func (s *shaper) rollback(n int) {
	if err := s.matcher.Rollback(n); err != nil {
		panic(fmt.Sprintf("native: %v", err))
	}
}

// ended reports whether the grammar accepted its end: nothing may follow.
func (s *shaper) ended() bool { return s != nil && s.matcher != nil && s.matcher.Ended() }

// checkDrafts cuts drafts at the first token the grammar refuses, and
// before an end-of-generation token (it would end the choice anyway, and
// nothing may be verified after it), leaving the matcher where it was. It
// returns the kept prefix.
func (s *shaper) checkDrafts(drafts []int32) []int32 {
	if s == nil || s.matcher == nil || len(drafts) == 0 {
		return drafts
	}
	accepted, keep := 0, 0
	for _, d := range drafts {
		if s.matcher.Accept(int(d)) != nil {
			break
		}
		accepted++
		if s.matcher.Ended() {
			break
		}
		keep++
	}
	s.rollback(accepted)
	return drafts[:keep]
}

// shapeDrafted shapes the verification rows of a draft: row j from the
// matcher advanced over drafts[:j]. The drafts were checked already. It
// returns the shaped rows and the drafts they cover: all of them, unless
// the grammar allows nothing after one (a dead end, where the draft stops
// before that token so that it is sampled, and its choice then cut, like
// any other). The matcher ends where it began.
func (s *shaper) shapeDrafted(rows []float32, vocab int, drafts []int32) ([]float32, []int32) {
	if !s.k.shapes() {
		return rows, drafts
	}
	n, accepted := len(drafts), 0
	for j := 0; j <= n; j++ {
		if _, ok := s.shape(rows[j*vocab:(j+1)*vocab], j); !ok && j > 0 {
			n = j - 1
			break
		}
		if j < n {
			s.accept(int(drafts[j]))
			if s.matcher != nil {
				accepted++
			}
		}
	}
	if accepted > 0 {
		s.rollback(accepted)
	}
	return s.rows[:(n+1)*vocab], drafts[:n]
}

// parse feeds out to the tool-call parser (and flushes it when final) and
// returns the content and the call deltas it decided.
func (s *shaper) parse(out string, final bool) (string, []engine.ToolCallDelta) {
	var content strings.Builder
	var calls []engine.ToolCallDelta
	add := func(ds []toolcall.Delta) {
		for _, d := range ds {
			if d.Call == nil {
				if !s.k.forced {
					content.WriteString(d.Content)
				}
				continue
			}
			if d.Call.ID != "" {
				s.calls++ // the first delta of a call carries its id
			} else if n := len(calls); n > 0 && calls[n-1].Index == d.Call.Index {
				// One fragment per call and event: Feed's and Flush's
				// pieces of the same call join.
				calls[n-1].Arguments += d.Call.Arguments
				continue
			}
			calls = append(calls, engine.ToolCallDelta{Index: d.Call.Index, ID: d.Call.ID, Name: d.Call.Name, Arguments: d.Call.Arguments})
		}
	}
	if out != "" {
		add(s.parser.Feed(out))
	}
	if final {
		add(s.parser.Flush())
	}
	return content.String(), calls
}
