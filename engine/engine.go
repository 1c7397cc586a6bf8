// Package engine defines the seam between the HTTP service and everything that
// generates tokens: the embedded native engine and engines behind HTTP.
//
// The service never sees tensors or token ids it has to interpret; an engine
// never sees HTTP. Wire types and these types meet in pure conversion
// functions in package service.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Engine serves one or more models. Implementations are safe for concurrent use.
type Engine interface {
	// Models lists the models this engine serves, in a stable order.
	Models() []ModelCard

	// Generate validates req and starts generating. Errors that can be known
	// before the first token (unknown model, prompt too long, bad parameters)
	// are returned here, as *RequestError or wrapped ErrUnknownModel, so that the
	// transport can answer with a plain HTTP error.
	//
	// An engine that cannot take more work now returns (a wrapped)
	// ErrOverloaded; a request it accepted runs to its end, except that an
	// engine that schedules by Request.Priority may shed a request still
	// waiting to start for one of higher priority: its stream then ends
	// with (a wrapped) ErrOverloaded before its first event.
	//
	// The returned Stream yields events in order until a final event for every
	// choice. Cancelling ctx stops generation of every choice and frees the
	// request's resources promptly; the stream then ends with ctx's error
	// (its Ready channel is signalled). ctx is used only for this request and
	// is not retained after the stream ends.
	Generate(ctx context.Context, req *Request) (Stream, error)
}

// Stream delivers the events of one request to one consumer goroutine,
// without a goroutine of the consumer's in between: the consumer takes
// what is ready with TryRecv and waits on Ready (together with its own
// timers and its context) when nothing is. Recv wraps the two for
// consumers that only wait.
type Stream interface {
	// TryRecv returns the next event if one is ready (ok true). With ok
	// false and a nil error nothing is ready yet: wait on Ready. io.EOF
	// follows the final event of the last choice; any other error is
	// terminal: the request failed mid-stream (or its context ended) and
	// no more events follow. Once TryRecv returned an error it returns the
	// same error again.
	TryRecv() (ev Event, ok bool, err error)

	// Ready returns the channel on which the stream signals that TryRecv
	// may have something new: an event or the end. It is the same channel
	// for the life of the stream. A signal may be spurious, but after
	// TryRecv reported nothing ready one always follows new events.
	Ready() <-chan struct{}
}

// Recv blocks until the next event of st: the event, or io.EOF after the
// last one, or the terminal error. It does not take a context because a
// stream ends by itself when its request's context ends.
func Recv(st Stream) (Event, error) {
	for {
		ev, ok, err := st.TryRecv()
		if ok || err != nil {
			return ev, err
		}
		<-st.Ready()
	}
}

// ReadyNotifier is implemented by a Stream that can run a function, as
// well as signal its Ready channel, when it may have something new. A
// consumer that waits for many streams at once (a server holding
// thousands of idle ones) then needs neither a goroutine nor a select
// case for each.
type ReadyNotifier interface {
	// OnReady arranges for f to run once, the next time the stream may
	// have something new, or at once when it has something already (an
	// event TryRecv has not taken, or its end): then f runs on the
	// caller's goroutine before OnReady returns. Otherwise it runs on the
	// goroutine that pushes or ends the stream, which may be an engine's
	// loop: f must not block. stop, called before f ran, keeps it from
	// running and reports true; after, it reports false. One f at a time:
	// the stream has one consumer.
	OnReady(f func()) (stop func() bool)
}

// OnReady is st's OnReady, found through the Unwrap() Stream methods of
// wrappers that embed a Stream (and so share its Ready channel); ok is
// false when no stream in the chain is a ReadyNotifier.
func OnReady(st Stream, f func()) (stop func() bool, ok bool) {
	for st != nil {
		if n, is := st.(ReadyNotifier); is {
			return n.OnReady(f), true
		}
		u, is := st.(interface{ Unwrap() Stream })
		if !is {
			break
		}
		st = u.Unwrap()
	}
	return nil, false
}

// ModelCard describes a model as /v1/models shows it.
type ModelCard struct {
	ID      string
	OwnedBy string
	Created int64 // unix seconds
	// ContextLength is the largest prompt+completion length in tokens; 0 if unknown.
	ContextLength int
	// Description says what the model is, plainly (for example that it is the
	// embedded random-weight test model). rill's extension on /v1/models.
	Description string
	// PrefixCache reports whether Stats.CachedTokens is measured for this model.
	PrefixCache bool
	// Drafting reports whether speculative decoding is configured for this model.
	Drafting bool
	// Params is the number of the model's parameters, and ActiveParams
	// how many of them one token computes with (fewer in a mixture of
	// experts, where a token uses some of the experts); 0 if unknown.
	// rill's extension on /v1/models.
	Params, ActiveParams int64
	// State is StateUnloaded, StateLoading or StateLoaded for a model
	// that a catalogue loads on demand; empty for a model that is always
	// loaded. rill's extension on /v1/models.
	State string
	// LoadError is, for a catalogued model whose last load failed, why;
	// empty otherwise.
	LoadError string
}

// Role of a chat message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleDeveloper Role = "developer"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message with its content flattened to text.
type Message struct {
	Role    Role
	Content string
	// NullContent marks an assistant message whose content was null (it
	// carries only tool calls); Content is then empty.
	NullContent bool
	Name        string
	// ReasoningContent is an assistant message's earlier reasoning, for
	// templates that render it; empty for none.
	ReasoningContent string
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolCallID names the call a tool message answers.
	ToolCallID string
}

// Request is one generation request. Exactly one of Messages (chat), Prompt
// or PromptTokens (completion) is set.
type Request struct {
	Model string

	Messages     []Message
	Prompt       string
	PromptTokens []int

	// MaxTokens caps completion tokens per choice; 0 means up to the context length.
	MaxTokens int
	// N is the number of choices; 0 means 1.
	N int
	// Stop strings end a choice; the matched text is not emitted.
	Stop []string
	// IgnoreEOS keeps generating past the end-of-sequence token (benchmarks).
	IgnoreEOS bool

	Sampling Sampling

	// Logprobs asks for the log-probability of every emitted token and
	// TopLogprobs of the most likely alternatives at each position (0..20).
	Logprobs    bool
	TopLogprobs int

	// Prediction is the client's predicted output (OpenAI Predicted Outputs),
	// used as a draft by engines that draft. Empty means none.
	Prediction string
	// NoDraft turns speculative decoding off for this request (rill extension).
	NoDraft bool

	// ContinuousUsage asks for running Stats on every event that carries
	// output: every non-final event with Text or Logprobs then carries the
	// Stats of its choice so far (PromptTokens, CachedTokens,
	// CompletionTokens, DraftAccepted/DraftRejected when drafting, and the
	// times so far where the engine measures them).
	// Final events carry the totals either way; without ContinuousUsage
	// non-final events carry no Stats.
	ContinuousUsage bool

	// Tools the model may call (chat only); ToolChoice says whether and
	// which it must. See tools.go.
	Tools      []Tool
	ToolChoice ToolChoice
	// ParallelToolCalls nil means the engine's default (allowed).
	ParallelToolCalls *bool
	// ResponseFormat constrains the output; nil means free text.
	ResponseFormat *ResponseFormat
	// LogitBias adds a bias (-100..100, OpenAI's scale) to the logits of
	// token ids before sampling; -100 bans a token, 100 all but forces it.
	LogitBias map[int]float64
	// ChatTemplateKwargs are extra variables for the chat template, such
	// as {"enable_thinking": false} (vLLM's chat_template_kwargs). A value
	// is a Go value (bool, string, number, []any, map[string]any, nil) or
	// a json.RawMessage, which keeps integers and key order as the client
	// wrote them (the service passes each value so).
	ChatTemplateKwargs map[string]any
	// ReasoningEffort is the client's reasoning_effort ("none", "minimal",
	// "low", "medium", "high", ...); "" when it sent none. The embedded
	// engine gives it to the chat template as reasoning_effort (gpt-oss's
	// prints it), over what ChatTemplateKwargs set, as llama.cpp's server
	// does; "none" and "minimal" turn a reasoning model's thinking off
	// instead (enable_thinking false, unless ChatTemplateKwargs set it).
	ReasoningEffort string

	// CacheKey groups requests that share a long prompt prefix, as the
	// client's prompt_cache_key says; an engine that routes among replicas
	// sends requests with the same key to the same one, where that prefix
	// is cached. Empty: the engine keys by the prompt itself.
	CacheKey string

	// Priority orders requests competing for an engine's capacity, as
	// vLLM's priority does: a lower value is served earlier (admitted
	// first, preempted last, shed last when the engine is overloaded);
	// equal priorities go by arrival. Nil means the default, 0. An engine
	// behind HTTP passes it to servers that schedule by priority.
	Priority *int

	// Responses marks a chat request that came through the Responses API:
	// an engine behind HTTP whose server has that API may send it there, so
	// that the server counts it as that API does. Others treat it as chat.
	Responses bool
	// Progress asks for prompt-processing progress: an event with
	// Progress set after each step that computes part of the prompt,
	// before the first token (see Progress). Engines that cannot tell
	// send none.
	Progress bool

	// MessagesAPI marks a chat request that came through Anthropic's
	// Messages API, as Responses marks the Responses API's: an engine
	// behind HTTP whose server has that API may send it there. Others
	// treat it as chat.
	MessagesAPI bool
}

// Choices returns the number of choices the request asks for (at least 1).
func (r *Request) Choices() int {
	if r.N < 1 {
		return 1
	}
	return r.N
}

// Sampling parameters. The zero value is greedy decoding.
type Sampling struct {
	// Temperature 0 means greedy (argmax).
	Temperature float64
	// TopK 0 means off.
	TopK int
	// TopP 1 or 0 means off.
	TopP float64
	// MinP 0 means off.
	MinP float64
	// PresencePenalty and FrequencyPenalty follow OpenAI's definitions, over
	// the tokens generated so far in this choice.
	PresencePenalty  float64
	FrequencyPenalty float64
	// Seed makes sampling reproducible: the same seed, parameters and prompt
	// give the same tokens. Nil means a random seed.
	Seed *int64
}

// FinishReason says why a choice ended.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // end-of-sequence token or a stop string
	FinishLength FinishReason = "length" // max tokens or the context window
	// FinishToolCalls: the choice ended with one or more tool calls.
	FinishToolCalls FinishReason = "tool_calls"
)

// Event is one step of one choice's output.
type Event struct {
	// Choice is the index of the choice this event belongs to.
	Choice int
	// Text is the next piece of output text. It is always valid UTF-8 and never
	// contains a stop string or a part of one that could still complete.
	Text string
	// Reasoning is the next piece of the model's reasoning (a thinking
	// block), streamed apart from Text as delta.reasoning_content.
	Reasoning string
	// ToolCalls are the next fragments of the choice's tool calls, in
	// OpenAI's streaming shape (see ToolCallDelta).
	ToolCalls []ToolCallDelta
	// Logprobs holds one entry per token whose text is (completed) in this
	// event, when the request asked for logprobs.
	Logprobs []TokenLogprob
	// Final marks the last event of the choice; FinishReason and Stats are set.
	Final        bool
	FinishReason FinishReason
	// StopSequence is, on a final event that a stop string ended
	// (FinishStop), that string. Empty: the choice ended otherwise, or the
	// engine does not say which stop string matched (engines behind Chat
	// Completions, whose wire has no such field).
	StopSequence string
	// Progress, when set, makes this a progress event and nothing else:
	// it belongs to no choice (Choice is 0, every other field is empty)
	// and is sent only when the request asked for Progress.
	Progress *Progress
	// Stats are the choice's totals on its final event. On a non-final event
	// they are set only when the request asked for ContinuousUsage: the
	// choice's counts so far (prompt and cached tokens, the completion tokens
	// emitted up to and including this event, draft counters so far when
	// drafting), never more than its final totals.
	Stats *Stats
}

// TokenLogprob is the log-probability of one emitted token and its most
// likely alternatives, from the model's distribution before sampling filters.
type TokenLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float64
	Top     []TopLogprob
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float64
}

// Stats are the measured counts of one choice, carried on its final event
// (and, with Request.ContinuousUsage, its running counts on the others).
// The service, not the engine, turns them into the wire usage.
type Stats struct {
	// PromptTokens is the number of prompt tokens after templating, BOS included.
	PromptTokens int
	// CachedTokens is how many prompt tokens were served from a prefix cache.
	// Nil: this engine does not measure a prefix cache. It is a float because
	// some upstream engines report averages.
	CachedTokens *float64
	// CacheWriteTokens is how many prompt tokens this request newly wrote
	// into the prefix cache: what a later request starting with the same
	// prompt reads instead of computing (a later identical request reads
	// all of it but a last whole block, whose last token it must compute
	// again). A block-grained cache counts only whole blocks, and never a
	// block it held already. Like CachedTokens it is the prompt's count,
	// shared by all choices of the request, and CachedTokens +
	// CacheWriteTokens <= PromptTokens. Nil: not measured.
	CacheWriteTokens *int
	// CompletionTokens counts emitted tokens of this choice.
	CompletionTokens int
	// DraftAccepted and DraftRejected count draft tokens (docs/design.md §3 rule 5).
	// Nil: no drafting was active for this request.
	DraftAccepted *int
	DraftRejected *int
	// ReasoningTokens is nil when the model does not mark reasoning.
	ReasoningTokens *int

	// PromptTime is how long the prompt took to process: from the first
	// forward pass that computed part of it (after any wait for
	// admission) to the first token. GenerationTime runs from the first
	// token to the last (to now, in running Stats). Zero: not measured
	// (no token came yet).
	PromptTime     time.Duration
	GenerationTime time.Duration
}

// Progress is how far the processing of a request's prompt has come,
// in llama.cpp's terms (its prompt_progress): of Total prompt tokens,
// Cached came from a prefix cache and Processed are in the KV cache
// now, the cached ones included, so that Processed runs from Cached to
// Total. Elapsed is the time since processing began.
type Progress struct {
	Total, Cached, Processed int
	Elapsed                  time.Duration
}

// ErrUnknownModel is returned (wrapped) by Generate for a model it does not serve.
var ErrUnknownModel = errors.New("unknown model")

// ErrOverloaded is returned (wrapped) when an engine cannot take more work now.
var ErrOverloaded = errors.New("engine overloaded")

// ErrUpstream is returned (wrapped) when an engine behind HTTP failed: no
// replica could be reached, the upstream answered with a server error, or it
// broke off a stream. Transports answer it with a 502.
var ErrUpstream = errors.New("upstream failed")

// RequestError is a problem with the request that only the engine can see,
// such as a prompt longer than the context window. Transports answer it with
// a 400 in the OpenAI error shape.
type RequestError struct {
	Code    string // OpenAI error code, e.g. "context_length_exceeded"; may be empty
	Param   string // the offending request field, e.g. "messages"; may be empty
	Message string
}

func (e *RequestError) Error() string { return e.Message }

// Errorf returns a *RequestError with the given code and param.
func Errorf(code, param, format string, args ...any) *RequestError {
	return &RequestError{Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// CodeContextLengthExceeded is the OpenAI error code for prompts that do not fit.
const CodeContextLengthExceeded = "context_length_exceeded"

// LoadReporter is implemented by engines that can say how busy they are
// now. It is optional: the service asks for it with a type assertion and
// reads it when metrics are scraped, never on the per-token path.
type LoadReporter interface {
	// Load returns one entry per model the engine serves, in the order of
	// Models. Implementations are safe for concurrent use and cheap: a
	// snapshot of counters the engine keeps anyway, no I/O.
	Load() []ModelLoad
}

// ModelLoad is how busy one model is at an instant.
type ModelLoad struct {
	Model string
	// Running is the number of choices being generated now (for an engine
	// behind HTTP: the requests rill has in flight there).
	Running int
	// Waiting is the number of choices queued in rill for a slot; engines
	// behind HTTP queue nothing in rill and report 0.
	Waiting int
	// KVCacheUsage is the fraction of KV cache blocks in use, 0..1 (cached
	// blocks that no sequence holds count as free, as in vLLM). Nil: not
	// measured (engines behind HTTP).
	KVCacheUsage *float64
	// PromptCacheDisk counts the blocks of the prompt cache's disk tier
	// since the engine started; nil without a disk tier.
	PromptCacheDisk *DiskCacheCounts
	// Replicas holds the state of each replica of a model behind HTTP, in
	// configuration order; nil for native models.
	Replicas []ReplicaLoad
}

// DiskCacheCounts are cumulative block counts of a prompt cache's disk
// tier: blocks loaded instead of computed, files refused (corrupt,
// truncated or foreign, then deleted), blocks written, and blocks not
// written (the write queue was full, or a write failed).
type DiskCacheCounts struct {
	Loaded, Refused, Saved, Dropped int64
}

// ReplicaLoad is the state of one replica of a model behind HTTP.
type ReplicaLoad struct {
	URL      string
	Healthy  bool
	InFlight int
}
