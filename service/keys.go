package service

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rill/keys"
)

// KeyRing resolves the API keys of a keys file (Options.Keys): the client
// of a presented key, or nil when it is not in effect. A *keys.Set is one;
// it may change its keys at any time (a reload).
type KeyRing interface {
	Lookup(key string) *keys.Client
}

// clientKey is the context key of a request's *keys.Client.
type clientKey struct{}

// withClient returns ctx carrying c, the key the request authenticated with.
func withClient(ctx context.Context, c *keys.Client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

// clientFrom returns the key the request of ctx authenticated with; nil
// for none (no keys file, or the single --api-key).
func clientFrom(ctx context.Context) *keys.Client {
	c, _ := ctx.Value(clientKey{}).(*keys.Client)
	return c
}

// admitKey starts a generation request of the key ctx carries, if any: it
// takes the request from the key's limits or refuses it with a 429, and
// gives the job's engine requests the key's default priority where they
// ask for none. The key's stream slot is released when ctx ends (the
// generation's context, cancelled when the generation ends however it
// does). It returns the key for charging the usage, nil when none.
func (s *Server) admitKey(ctx context.Context, p *job) (*keys.Client, *apiError) {
	c := clientFrom(ctx)
	if c == nil {
		return nil, nil
	}
	km := s.metrics.key(c.Name())
	release, refused := c.Admit()
	if refused != nil {
		km.limited(refused.Limit).Inc()
		return nil, rateLimited(c.Name(), refused)
	}
	context.AfterFunc(ctx, release)
	km.requests.Inc()
	if prio := c.Priority(); prio != nil {
		for _, r := range p.reqs {
			if r.Priority == nil {
				v := *prio
				r.Priority = &v
			}
		}
	}
	return c, nil
}

// codeRateLimited is OpenAI's code of a 429 for a rate limit.
const codeRateLimited = "rate_limit_exceeded"

// rateLimited is the 429 of a request refused at a key's limit, in
// OpenAI's shape: the error's type names the limit ("requests", "tokens"),
// the code is rate_limit_exceeded, and Retry-After says when to retry.
func rateLimited(name string, r *keys.Refusal) *apiError {
	wait := max(1, int(math.Ceil(r.RetryAfter.Seconds())))
	e := &apiError{Status: http.StatusTooManyRequests, Type: string(r.Limit), Code: codeRateLimited, RetryAfter: wait}
	switch r.Limit {
	case keys.LimitStreams:
		e.Type = string(keys.LimitRequests) // OpenAI has no such type
		e.Message = fmt.Sprintf("Rate limit reached for key %q on concurrent requests: Limit %d. Please try again when one of them has finished.", name, r.Max)
	case keys.LimitTokens:
		e.Message = fmt.Sprintf("Rate limit reached for key %q on tokens per min (TPM): Limit %d. Please try again in %s.", name, r.Max, resetString(r.RetryAfter))
	default:
		e.Message = fmt.Sprintf("Rate limit reached for key %q on requests per min (RPM): Limit %d. Please try again in %s.", name, r.Max, resetString(r.RetryAfter))
	}
	return e
}

// resetString formats a wait as OpenAI's x-ratelimit-reset-* headers do
// ("1s", "6m0s", "20ms"): Go's duration format, to the millisecond.
func resetString(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// setRateLimitHeaders sets the headers of a response to a limited key
// (every response to it, a 429 too): OpenAI's x-ratelimit-* or, on the
// Messages API (anthropic), Anthropic's anthropic-ratelimit-*, whose reset
// is a time (RFC 3339) rather than a wait. A limit the key does not have
// gets no headers.
func setRateLimitHeaders(h http.Header, c *keys.Client, anthropic bool) {
	if !c.Limited() {
		return
	}
	st := c.State()
	now := time.Now()
	set := func(kind string, limit, remaining int, reset time.Duration) {
		if limit <= 0 {
			return
		}
		if anthropic {
			h.Set("Anthropic-Ratelimit-"+kind+"-Limit", strconv.Itoa(limit))
			h.Set("Anthropic-Ratelimit-"+kind+"-Remaining", strconv.Itoa(remaining))
			h.Set("Anthropic-Ratelimit-"+kind+"-Reset", now.Add(reset).UTC().Format(time.RFC3339))
			return
		}
		h.Set("X-Ratelimit-Limit-"+kind, strconv.Itoa(limit))
		h.Set("X-Ratelimit-Remaining-"+kind, strconv.Itoa(remaining))
		h.Set("X-Ratelimit-Reset-"+kind, resetString(reset))
	}
	set("Requests", st.LimitRequests, st.RemainingRequests, st.ResetRequests)
	set("Tokens", st.LimitTokens, st.RemainingTokens, st.ResetTokens)
}

// Per-key metrics: labelled by the key's name, never the key.
const (
	labelKey           = "key"
	labelLimit         = "limit"
	labelKind          = "kind"
	metricKeyRequests  = metricsPrefix + "key_requests_total"
	metricKeyTokens    = metricsPrefix + "key_tokens_total"
	metricKeyRateLimit = metricsPrefix + "key_rate_limited_total"
)

// keyVecs are the per-key series of a registry.
type keyVecs struct {
	requests, tokens, limited *prometheus.CounterVec

	mu    sync.Mutex
	byKey map[string]*keyMetrics
}

func newKeyVecs(reg *prometheus.Registry) *keyVecs {
	v := &keyVecs{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricKeyRequests,
			Help: "Generation requests admitted per API key of the keys file (by its name)."}, []string{labelKey}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricKeyTokens,
			Help: "Tokens of completed requests per API key of the keys file, by kind (prompt, completion), as usage reported them."}, []string{labelKey, labelKind}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricKeyRateLimit,
			Help: "Requests refused with a 429 per API key of the keys file, by the limit they ran into (requests, tokens, streams)."}, []string{labelKey, labelLimit}),
		byKey: make(map[string]*keyMetrics),
	}
	reg.MustRegister(v.requests, v.tokens, v.limited)
	return v
}

// keyMetrics are one key's series.
type keyMetrics struct {
	vecs                         *keyVecs
	name                         string
	requests                     prometheus.Counter
	promptTokens, completionToks prometheus.Counter
}

// key returns the series of the key named name, making them on first use.
func (m *metrics) key(name string) *keyMetrics {
	v := m.keys
	v.mu.Lock()
	defer v.mu.Unlock()
	km := v.byKey[name]
	if km == nil {
		km = &keyMetrics{vecs: v, name: name,
			requests:       v.requests.WithLabelValues(name),
			promptTokens:   v.tokens.WithLabelValues(name, "prompt"),
			completionToks: v.tokens.WithLabelValues(name, "completion"),
		}
		v.byKey[name] = km
	}
	return km
}

func (km *keyMetrics) limited(l keys.Limit) prometheus.Counter {
	return km.vecs.limited.WithLabelValues(km.name, string(l))
}

// keyUse charges a completed request's usage to its key.
type keyUse struct {
	client *keys.Client
	m      *keyMetrics
}

// charge takes u's tokens from the key's budget and counts them.
func (k *keyUse) charge(u *Usage) {
	if k == nil {
		return
	}
	k.client.Charge(u.PromptTokens + u.CompletionTokens)
	k.m.promptTokens.Add(float64(u.PromptTokens))
	k.m.completionToks.Add(float64(u.CompletionTokens))
}
