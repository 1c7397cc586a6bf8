package service

import (
	"encoding/json"
	"fmt"
	"math"

	"rill/engine"
)

// kind tells chat completions from legacy completions; it picks the chunk
// and response shapes.
type kind int

const (
	kindChat kind = iota
	kindCompletion
)

// job is a validated client request ready to run: one engine request per
// prompt, plus what the wire needs to know to answer it.
type job struct {
	kind  kind
	model string
	// stream is the request's "stream"; includeUsage is
	// stream_options.include_usage and only ever true when stream is.
	// usageAsked is stream_options.include_usage as the body says it,
	// whatever stream says (see forceStream).
	stream       bool
	includeUsage bool
	usageAsked   bool
	// continuousUsage is stream_options.continuous_usage_stats, honoured
	// only with includeUsage: every chunk with choices carries the running
	// usage (the engine requests ask for running Stats). continuousAsked is
	// it as the body says it.
	continuousUsage bool
	continuousAsked bool
	// logprobs asks for logprobs in the response shape of kind.
	logprobs bool
	// timings asks for the timings object (timings.go) on the answer or
	// its last chunk; timingsPerToken for the running timings on every
	// chunk that carries choices too (only when streaming; the engine
	// requests then ask for running Stats). perTokenAsked and
	// progressAsked are timings_per_token and return_progress as the body
	// says them; the engine requests ask for progress only when the
	// answer streams.
	timings         bool
	timingsPerToken bool
	perTokenAsked   bool
	progressAsked   bool
	// n is the number of choices per prompt; choice j of prompt p has the
	// wire index p*n+j.
	n    int
	reqs []*engine.Request
	// resumable is stream_options.resumable (resumable.go), honoured only
	// when streamed: a stream that survives its connection.
	// resumableAsked is it as the body says it.
	resumable      bool
	resumableAsked bool
}

// forceStream makes p a streamed request whatever its body said about
// "stream", as a transport that only streams (WebSocket) implies;
// stream_options.include_usage then applies as it does on SSE.
func (p *job) forceStream() {
	p.stream = true
	p.resumable = p.resumableAsked
	p.includeUsage = p.usageAsked
	p.setContinuousUsage()
	for _, r := range p.reqs {
		r.Progress = p.progressAsked
	}
}

// setContinuousUsage applies continuous_usage_stats as the stream and
// include_usage allow, and timings_per_token as the stream allows, to p
// and to its engine requests: either needs running Stats.
func (p *job) setContinuousUsage() {
	p.continuousUsage = p.includeUsage && p.continuousAsked
	p.timingsPerToken = p.stream && p.perTokenAsked
	for _, r := range p.reqs {
		r.ContinuousUsage = p.continuousUsage || p.timingsPerToken
	}
}

// choices is the number of choices of the whole request.
func (p *job) choices() int { return p.n * len(p.reqs) }

// chatPlan converts a chat completion request. It checks what the schema
// cannot: content required on non-assistant messages, top_logprobs without
// logprobs, and the features rill does not support.
func chatPlan(r *chatRequest) (*job, *apiError) {
	req := &engine.Request{Model: r.Model}
	p := &job{kind: kindChat, model: r.Model, reqs: []*engine.Request{req}}
	if e := applyCommon(&r.commonRequest, req, p); e != nil {
		return nil, e
	}
	if r.MaxCompletionTokens != nil {
		req.MaxTokens = *r.MaxCompletionTokens
	}

	msgs, e := chatMessages(r.Messages)
	if e != nil {
		return nil, e
	}
	req.Messages = msgs
	req.ChatTemplateKwargs = templateKwargs(r.ChatTemplateKwargs)
	if r.ReasoningEffort != nil {
		req.ReasoningEffort = *r.ReasoningEffort
	}

	if r.TopLogprobs != nil && (r.Logprobs == nil || !*r.Logprobs) {
		return nil, invalid("top_logprobs", "invalid_value",
			"Invalid value for 'top_logprobs': logprobs must be true when top_logprobs is set.")
	}
	if r.Logprobs != nil && *r.Logprobs {
		p.logprobs = true
		req.Logprobs = true
		if r.TopLogprobs != nil {
			req.TopLogprobs = *r.TopLogprobs
		}
	}

	if r.Prediction != nil && !isNull(r.Prediction.Content) {
		// One predicted text, split by the client.
		text, e := textContent(r.Prediction.Content, "prediction.content", "")
		if e != nil {
			return nil, e
		}
		req.Prediction = text
	}

	if e := applyTools(r, req); e != nil {
		return nil, e
	}
	switch {
	case forcedChoice(r.FunctionCall, "none", "auto"):
		return nil, unsupported("function_call", "Forcing a function call")
	case !isNull(r.Audio):
		return nil, unsupported("audio", "Audio output")
	}
	for _, m := range r.Modalities {
		if m != "text" {
			return nil, unsupported("modalities", fmt.Sprintf("The '%s' modality", m))
		}
	}
	return p, nil
}

// forcedChoice reports whether a tool_choice or function_call value forces
// a call: anything but null or one of the free string values.
func forcedChoice(raw json.RawMessage, free ...string) bool {
	if isNull(raw) {
		return false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return true // an object naming a tool or function
	}
	for _, f := range free {
		if s == f {
			return false
		}
	}
	return true
}

// completionPlan converts a legacy completion request: one engine request
// per prompt.
func completionPlan(r *completionRequest) (*job, *apiError) {
	base := &engine.Request{Model: r.Model}
	p := &job{kind: kindCompletion, model: r.Model}
	if e := applyCommon(&r.commonRequest, base, p); e != nil {
		return nil, e
	}
	switch {
	case r.Echo != nil && *r.Echo:
		return nil, unsupported("echo", "echo")
	case r.Suffix != nil && *r.Suffix != "":
		return nil, unsupported("suffix", "suffix")
	case r.BestOf != nil && *r.BestOf != p.n:
		if *r.BestOf < p.n {
			return nil, invalid("best_of", "invalid_value",
				"Invalid value for 'best_of': it must be greater than or equal to n (%d).", p.n)
		}
		return nil, unsupported("best_of", "best_of greater than n")
	}
	if r.Logprobs != nil {
		p.logprobs = true
		base.Logprobs = true
		base.TopLogprobs = *r.Logprobs
	}

	texts, tokens, e := prompts(r.Prompt)
	if e != nil {
		return nil, e
	}
	for _, t := range texts {
		req := *base
		req.Prompt = t
		p.reqs = append(p.reqs, &req)
	}
	for _, ids := range tokens {
		req := *base
		req.PromptTokens = ids
		p.reqs = append(p.reqs, &req)
	}
	return p, nil
}

// applyCommon converts the fields chat and completions share into req and p.
// Absent sampling fields take OpenAI's defaults (temperature 1, top_p 1).
func applyCommon(c *commonRequest, req *engine.Request, p *job) *apiError {
	bias, e := logitBias(c.LogitBias)
	if e != nil {
		return e
	}
	req.LogitBias = bias
	if e := applyResponseFormat(c.ResponseFormat, req); e != nil {
		return e
	}
	stops, e := stopStrings(c.Stop)
	if e != nil {
		return e
	}
	req.Stop = stops

	p.n = 1
	if c.N != nil {
		p.n = *c.N
	}
	req.N = p.n
	if c.MaxTokens != nil {
		req.MaxTokens = *c.MaxTokens
	}
	p.stream = c.Stream != nil && *c.Stream
	// stream_options is honoured only when streaming; {} means false.
	p.usageAsked = c.StreamOptions != nil && c.StreamOptions.IncludeUsage != nil && *c.StreamOptions.IncludeUsage
	p.includeUsage = p.stream && p.usageAsked
	o := c.StreamOptions
	p.continuousAsked = o != nil && o.ContinuousUsageStats != nil && *o.ContinuousUsageStats
	p.perTokenAsked = c.TimingsPerToken != nil && *c.TimingsPerToken
	p.timings = c.Timings != nil && *c.Timings || p.perTokenAsked
	p.continuousUsage = p.includeUsage && p.continuousAsked
	p.timingsPerToken = p.stream && p.perTokenAsked
	req.ContinuousUsage = p.continuousUsage || p.timingsPerToken
	p.progressAsked = c.ReturnProgress != nil && *c.ReturnProgress
	req.Progress = p.stream && p.progressAsked
	p.resumableAsked = o != nil && o.Resumable != nil && *o.Resumable
	p.resumable = p.stream && p.resumableAsked

	s := engine.Sampling{Temperature: 1, TopP: 1}
	if c.Temperature != nil {
		s.Temperature = *c.Temperature
	}
	if c.TopP != nil {
		s.TopP = *c.TopP
		if s.TopP == 0 {
			// The engine reads 0 as "off"; a client asking for top_p 0 wants
			// the smallest nucleus, which is the most likely token alone.
			s.TopP = math.SmallestNonzeroFloat64
		}
	}
	if c.PresencePenalty != nil {
		s.PresencePenalty = *c.PresencePenalty
	}
	if c.FrequencyPenalty != nil {
		s.FrequencyPenalty = *c.FrequencyPenalty
	}
	c.extensions.apply(req, &s)
	req.Sampling = s
	return nil
}
