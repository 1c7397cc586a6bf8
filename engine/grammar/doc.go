// Package grammar constrains generation to a grammar: a token mask, applied
// before sampling, that lets through exactly the tokens whose bytes keep the
// output a prefix of some string of the grammar. It compiles JSON Schemas
// (response_format json_schema, tool arguments), "any JSON object"
// (response_format json_object), and grammars built from combinators (Lit,
// Seq, Alt, Repeat, Ref, and JSONSchema as a piece), which engine/toolcall
// uses to force a chat template's tool-call wrapper around JSON arguments.
//
// # Contract for the engine
//
// Once per model: build a Vocab with NewVocab from each token's raw bytes
// (nil for control, unknown and unused tokens; added tokens that stand for
// text, such as Qwen's <tool_call>, with their text) and the
// end-of-generation ids. A Vocab is immutable apart from its internally
// synchronised mask cache, and shared by all requests.
//
// Per request: compile the grammar (FromJSONSchema, AnyJSONObject, or a
// Builder); schema problems are a *SchemaError, a client error (HTTP 400)
// naming the JSON pointer of the offending schema. A *Grammar is immutable
// and may be shared between the choices of the request and cached across
// requests.
//
// Per choice (sequence): NewMatcher(g, vocab). A Matcher is owned by one
// sequence and not safe for concurrent use. At each step:
//
//  1. compute log-probabilities for logprobs from the raw distribution (they
//     report the model's distribution, not the constrained one);
//  2. Mask(dst), or MaskBudget(dst, n) when the sequence may emit at most
//     n more tokens (see Budgets), and MaskLogits(logits, dst): disallowed
//     tokens get -Inf; then penalties, logit_bias, temperature,
//     top-k/top-p/min-p and the seeded draw as usual (a logit_bias cannot
//     resurrect a masked token if it is applied before masking, which is
//     the safe order);
//  3. Accept(token) with the sampled token.
//
// End-of-generation tokens are allowed exactly when the grammar is complete
// (Done); no token is allowed after one is accepted. The grammar never
// allows other special tokens.
//
// Speculative decoding: check a draft with AcceptPrefix (it stops at the
// first token the grammar refuses; the draft is cut there), compute the
// target's masked distribution at each drafted position from the matcher
// advanced to it (with a budget, less the drafts before the position), and
// Rollback(n) the tokens the verifier rejects. The output is then lossless:
// it follows the constrained target distribution exactly as without
// drafting. Rollback costs nothing (the matcher keeps the parse state after
// every token); Clone copies a matcher when two continuations must live at
// once.
//
// # Budgets
//
// A grammar may allow output without end (an object with any members, an
// array without maxItems, a string), and a model that never closes it
// runs out of max_tokens with incomplete JSON. MaskBudget(dst, n) is Mask
// for a sequence that may emit n more tokens, its end-of-generation token
// included: it also takes out every token after which the grammar could no
// longer be completed, and the end token emitted, within the budget.
// Distance says how far the end is: the shortest completion in bytes (close
// the open string, add the least value where one is due, the required
// properties still missing with their least values, close the arrays and
// objects), counting only bytes that are tokens on their own, so that it is
// an upper bound on tokens (every byte is a token in byte-level BPE and in
// SentencePiece with byte fallback; a vocabulary that lacks some may make
// the distance larger, or -1). Consequences for the caller:
//
//   - a sequence masked so from a point where it could finish in time
//     always can (the first byte of a shortest completion is a token that
//     keeps it so), and ends with an end token within its budget;
//   - output that ends in time on its own is never changed, provided it
//     had room for its byte-counted completion at every token; a budget
//     tighter than that makes it close a little earlier than the shortest
//     tokenisation would need;
//   - when no token fits (the budget was too small from the start),
//     MaskBudget returns false and dst is the plain mask: the caller's
//     max_tokens then cuts the output short, as without a budget.
//
// Distances are computed once per grammar (a shortest-path pass over its
// states, for the vocabulary's single-byte tokens); mask entries keep each
// inside token's distance to the end of its rule, so a budget mask costs
// about what a plain one does.
//
// # How masks are computed
//
// A grammar is a set of rules, each a deterministic automaton over bytes
// whose edges consume a byte or call another rule; a Matcher holds the set
// of parse stacks that the text so far allows (usually one). Tokens are
// found by walking a trie of the vocabulary's byte strings while stepping
// the stacks, pruning every subtree no stack survives. For speed each
// automaton state has a mask entry, computed once per vocabulary on first
// use and cached in the Vocab under a fingerprint of its rule (so requests
// with equal schemas, and all JSON strings and numbers, share them): the
// tokens allowed whatever lies below the state on the stack (inside a JSON
// string, nearly all of them) as a bitset, and a small trie of the
// remainders of tokens that run past the end of the rule, walked at run time
// from the caller's frame. A warm mask costs a few bitset ORs and a short
// walk; see the benchmarks in bench_test.go.
//
// JSON is compact by default: no whitespace between JSON tokens or around
// the value (whitespace inside strings is text like any other), as OpenAI
// writes it. Room for whitespace lets a small model spend most of its
// max_tokens on newlines between tokens (a budget then cuts its values
// short to close the document); JSONOptions.MaxWhitespace opts into runs
// of a bounded length (BoundedWhitespace for models that pretty-print).
//
// Numbers have at most 16 integer and 16 fraction digits and a two-digit
// exponent. Object properties come in the schema's order.
package grammar

import "math"

// MaskLogits sets logits[id] to -Inf for every token id the mask does not
// allow, ids at or beyond the mask's vocabulary included (models often pad
// their output row past the tokenizer's vocabulary).
func MaskLogits(logits []float32, mask []uint64) {
	inf := float32(math.Inf(-1))
	for id := range logits {
		w := id >> 6
		if w >= len(mask) || mask[w]&(1<<(id&63)) == 0 {
			logits[id] = inf
		}
	}
}
