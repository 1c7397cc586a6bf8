package upstream

import (
	"fmt"
	"math"
	"strings"
	"time"

	"rill/engine"
)

// Kind names the software behind an upstream URL. It decides which request
// fields the upstream accepts and how its counters become engine.Stats.
type Kind string

// The kinds rill knows.
const (
	// LlamaCpp is llama.cpp's llama-server. Its counters are in the
	// `timings` object of the last chunk: cache_n (prompt tokens served
	// from its cache), draft_n and draft_n_accepted (speculative decoding).
	LlamaCpp Kind = "llamacpp"
	// VLLM reports usage.prompt_tokens_details.cached_tokens when started
	// with --enable-prompt-tokens-details.
	VLLM Kind = "vllm"
	// SGLang reports usage.prompt_tokens_details.cached_tokens when started
	// with --enable-cache-report.
	SGLang Kind = "sglang"
	// TabbyAPI may send fractional cached counts; they are kept as floats
	// and the service rounds them.
	TabbyAPI Kind = "tabbyapi"
	// OpenAI is any other OpenAI-compatible server: usage as OpenAI defines it.
	OpenAI Kind = "openai"
	// Rill is another rill: usage in rill's own shape, and rill's request
	// extensions (top_k, min_p, ignore_eos, no_draft) pass through.
	Rill Kind = "rill"
)

// Kinds lists every known kind, in documentation order.
var Kinds = []Kind{LlamaCpp, VLLM, SGLang, TabbyAPI, OpenAI, Rill}

// ParseKind reads a kind name, case-insensitively; "llama.cpp" and
// "llama-server" also name LlamaCpp.
func ParseKind(s string) (Kind, error) {
	k := Kind(strings.ToLower(strings.TrimSpace(s)))
	switch k {
	case "llama.cpp", "llama-server", "llama_cpp":
		return LlamaCpp, nil
	case "tabby":
		return TabbyAPI, nil
	}
	for _, known := range Kinds {
		if k == known {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, known := range Kinds {
		names[i] = string(known)
	}
	return "", fmt.Errorf("unknown kind %q (want one of %s)", s, strings.Join(names, ", "))
}

// caps are the request fields a kind accepts beyond OpenAI's.
type caps struct {
	topK, minP bool
	// priority is how the kind reads a request's priority.
	priority priorityField
	// eosField is the name of the "keep generating past EOS" field, or ""
	// when the kind has none.
	eosField   string
	prediction bool // OpenAI Predicted Outputs
	noDraft    bool // rill's no_draft
	// splitChoices sends a request for n choices as n requests of one
	// choice: llama.cpp's server counts only one choice's tokens in
	// completion_tokens when n > 1, and its timings describe one slot.
	splitChoices bool
	// prefixCache: the kind reports a prefix cache (for /v1/models).
	prefixCache bool
	// running is where the kind's running counts come from when a request
	// asks for continuous usage.
	running runningSource
	// templateKwargs: the kind reads chat_template_kwargs.
	templateKwargs bool
	// responses: the kind's server has the Responses API (responses.go).
	responses bool
	// messages: what the kind's server carries on Anthropic's Messages
	// API, if it has it (messages.go).
	messages messagesCaps
	// progress: the kind's server sends llama.cpp's prompt_progress chunks
	// when a request asks with return_progress.
	progress bool
	// forcedTools: the kind enforces tool_choice "required" and named
	// functions. tabbyAPI treats every tool_choice as "auto", so a forced
	// one is refused rather than silently not forced. Tools,
	// response_format and logit_bias go to every kind.
	forcedTools bool
	// clampsBudget: the kind's server generates until its context is full
	// when max_tokens asks for more (llama.cpp); its context errors are
	// about the prompt alone.
	clampsBudget bool
	// cacheKey: the kind reads prompt_cache_key (OpenAI's own, and rill,
	// which routes its replicas by it); others would ignore it with a
	// warning in their log.
	cacheKey bool
}

// priorityField is how a kind reads engine.Request.Priority.
type priorityField int

const (
	// priorityNone: the kind has no request priority; it is not sent.
	priorityNone priorityField = iota
	// priorityLowFirst: a "priority" field where a lower value is served
	// earlier, as rill's own (vLLM, with --scheduling-policy priority;
	// without it vLLM refuses a priority other than 0).
	priorityLowFirst
	// priorityHighFirst: a "priority" field where a higher value is served
	// earlier: SGLang's default (with --enable-priority-scheduling, and
	// without --schedule-low-priority-values-first), so rill sends the
	// value negated.
	priorityHighFirst
)

// wire is p as a kind reading priorities as f takes it; nil: not sent.
func (f priorityField) wire(p *int) *int {
	switch {
	case p == nil || f == priorityNone:
		return nil
	case f == priorityHighFirst:
		v := -*p
		return &v
	}
	v := *p
	return &v
}

// runningSource is how rill learns a request's counts while it streams
// (engine.Request.ContinuousUsage).
type runningSource int

const (
	// runningCounted: the upstream reports nothing before the end; rill
	// counts the tokens it passes on (one per logprob entry, else one per
	// chunk with text) and knows no prompt count until the end.
	runningCounted runningSource = iota
	// runningTimings: llama.cpp's timings_per_token puts its counters
	// (cache_n, prompt_n, predicted_n, draft_n, draft_n_accepted) on every
	// chunk; rill splits n > 1 into single-choice requests, so they are
	// each choice's own.
	runningTimings
	// runningChoiceUsage: stream_options.continuous_usage_stats puts a usage
	// on every chunk that counts the chunk's choice (vLLM, SGLang).
	runningChoiceUsage
	// runningRequestUsage: as runningChoiceUsage, but the usage counts the
	// whole request (another rill): a choice's own completion count is only
	// known when it is the request's only choice.
	runningRequestUsage
)

func (k Kind) caps() caps {
	switch k {
	case LlamaCpp:
		return caps{topK: true, minP: true, eosField: "ignore_eos", splitChoices: true, prefixCache: true, forcedTools: true,
			running: runningTimings, templateKwargs: true, clampsBudget: true, progress: true,
			messages: messagesCaps{ok: true, templateKwargs: true}}
	case VLLM:
		return caps{topK: true, minP: true, eosField: "ignore_eos", prefixCache: true, responses: true, forcedTools: true,
			running: runningChoiceUsage, templateKwargs: true, priority: priorityLowFirst,
			messages: messagesCaps{ok: true, toolChoice: true, strict: true, format: true, templateKwargs: true}}
	case SGLang:
		return caps{topK: true, minP: true, eosField: "ignore_eos", prefixCache: true, forcedTools: true,
			running: runningChoiceUsage, templateKwargs: true, priority: priorityHighFirst,
			messages: messagesCaps{ok: true, toolChoice: true}}
	case TabbyAPI:
		return caps{topK: true, minP: true, eosField: "ban_eos_token", prefixCache: true}
	case Rill:
		return caps{topK: true, minP: true, eosField: "ignore_eos", prediction: true, noDraft: true, prefixCache: true, responses: true, forcedTools: true,
			running: runningRequestUsage, templateKwargs: true, cacheKey: true, progress: true, priority: priorityLowFirst,
			messages: messagesCaps{ok: true, toolChoice: true, noParallel: true, strict: true, format: true, thinkingOff: true, extensions: true}}
	}
	return caps{prediction: true, prefixCache: true, responses: true, forcedTools: true, cacheKey: true}
}

// stats maps what the upstream reported for a whole request into the Stats
// of one choice. u and t may be nil (not sent). predicted tells whether the
// client sent a prediction, which is when OpenAI's prediction counters mean
// that drafting was active.
func (k Kind) stats(u *wireUsage, t *wireTimings, predicted bool) engine.Stats {
	var st engine.Stats
	if u != nil {
		st.PromptTokens = count(u.PromptTokens)
		st.CompletionTokens = count(u.CompletionTokens)
	} else if t != nil && k == LlamaCpp {
		st.PromptTokens = count(t.CacheN) + count(t.PromptN)
		st.CompletionTokens = count(t.PredictedN)
	}
	var cached, written, accepted, rejected, reasoning *float64
	if u != nil {
		if d := u.PromptTokensDetails; d != nil {
			cached, written = d.CachedTokens, d.CacheWriteTokens
		}
		if d := u.CompletionTokensDetails; d != nil {
			accepted, rejected, reasoning = d.AcceptedPredictionTokens, d.RejectedPredictionTokens, d.ReasoningTokens
		}
	}
	switch k {
	case LlamaCpp:
		if t != nil {
			if t.CacheN != nil {
				cached = t.CacheN
			}
			// llama.cpp keeps every prompt token it processed in its
			// slot, where the next request that starts the same way reuses
			// it (token by token): the request wrote the prompt tokens it
			// did not read, prompt_n.
			if t.PromptN != nil {
				written = t.PromptN
			}
			// The draft counters are present only when the slot drafted.
			if t.DraftN != nil {
				n := count(t.DraftN)
				a := min(count(t.DraftNAccepted), n)
				st.DraftAccepted, st.DraftRejected = &a, ptr(n-a)
			}
			if t.PromptMS != nil {
				st.PromptTime = millis(*t.PromptMS)
			}
			if t.PredictedMS != nil {
				st.GenerationTime = millis(*t.PredictedMS)
			}
		}
	case TabbyAPI:
		if cached == nil && u != nil {
			cached = u.CachedTokens
		}
	case OpenAI:
		// OpenAI sends the prediction counters on every response, as zeros
		// when there was no prediction; rill shows them only when drafting
		// was active (docs/design.md §3 rule 4).
		if !predicted {
			accepted, rejected = nil, nil
		}
	}
	if cached != nil && !math.IsNaN(*cached) {
		c := *cached
		st.CachedTokens = &c
	}
	// Where the upstream reports no write count (vLLM, SGLang and
	// tabbyAPI never do, and chat's usage has no such field) written stays
	// nil, "not measured", rather than a guess at their cache's grain.
	if written != nil && !math.IsNaN(*written) {
		st.CacheWriteTokens = ptr(count(written))
	}
	if st.DraftAccepted == nil && (accepted != nil || rejected != nil) {
		st.DraftAccepted, st.DraftRejected = ptr(count(accepted)), ptr(count(rejected))
	}
	if reasoning != nil {
		st.ReasoningTokens = ptr(count(reasoning))
	}
	return st
}

// count reads a reported count: absent, NaN or negative is 0, a fraction is
// rounded half to even.
func count(v *float64) int {
	if v == nil || math.IsNaN(*v) || *v <= 0 {
		return 0
	}
	if *v >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.RoundToEven(*v))
}

func millis(ms float64) time.Duration {
	if math.IsNaN(ms) || ms < 0 || ms > 1e12 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func ptr[T any](v T) *T { return &v }
