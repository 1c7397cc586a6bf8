package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rill/engine"
)

// replica is one upstream server of a model. Its counters are atomics:
// requests pick replicas concurrently with the health checker.
type replica struct {
	idx  int
	base string // scheme://host[:port][/prefix], without a trailing "/v1"
	key  string // API key, "" for none
	seed uint64 // its identity in rendezvous hashing

	inflight atomic.Int64
	down     atomic.Bool
	// modelsProbe: /health answered 404, so /v1/models is the health check.
	modelsProbe atomic.Bool
	// noMetrics: the replica serves no Prometheus /metrics.
	noMetrics atomic.Bool
	// noMessages: POST /v1/messages answered 404 (and chat completions
	// did not), so Messages requests go to chat completions there.
	noMessages atomic.Bool
	// kvUsage and waiting are the float64 bits of what its /metrics said
	// at the last health check (replica_metrics.go); NaN: nothing.
	kvUsage, waiting atomic.Uint64

	mu      sync.Mutex
	lastErr string
}

// ReplicaStatus is a snapshot of one replica, for logs and tests.
type ReplicaStatus struct {
	URL      string
	Healthy  bool
	InFlight int
	// LastError is why the replica was last marked down; "" if never.
	LastError string
}

// newReplica checks and normalises a replica's base URL: http or https,
// with a host; a trailing "/" or "/v1" is dropped, since rill appends the
// API paths itself.
func newReplica(idx int, raw, key string) (*replica, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("replica url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("replica url %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("replica url %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("replica url %q: no query or fragment allowed", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path, u.RawPath = p, ""
	base := u.String()
	r := &replica{idx: idx, base: base, key: key, seed: mix(hashBytes(fnvOffset, []byte(base)))}
	r.storeGauges(noGauges)
	return r, nil
}

func (r *replica) status() ReplicaStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReplicaStatus{URL: r.base, Healthy: !r.down.Load(), InFlight: int(r.inflight.Load()), LastError: r.lastErr}
}

// markDown takes r out of rotation until a health check passes. It reports
// whether r was up before.
func (r *replica) markDown(why string) bool {
	r.mu.Lock()
	r.lastErr = why
	r.mu.Unlock()
	return !r.down.Swap(true)
}

// pick chooses a replica for a request whose prompt prefix hashes to key
// (haveKey false: no affinity), among those not yet tried by it.
//
// Candidates are the healthy replicas; only when none is left are replicas
// marked down tried, in case the health checker is behind. Among the
// candidates, the affinity target is the one with the highest rendezvous
// score mix(key ^ seed): every request with the same prefix prefers the same
// replica, and when it leaves, only its share of prefixes moves. The target
// is chosen unless it has more than maxImbalance requests in flight beyond
// the least-loaded candidate; then (or without affinity) the least-loaded
// candidate is, ties broken by rotation. It returns nil when every replica
// was tried.
func pick(replicas []*replica, tried []bool, key uint64, haveKey bool, maxImbalance int64, rot uint64) *replica {
	var best, least *replica
	var bestScore uint64
	var leastLoad int64
	for pass := 0; pass < 2 && least == nil; pass++ {
		n := len(replicas)
		for i := range n {
			// Start at a rotating index so that ties in load spread out.
			r := replicas[(int(rot%uint64(n))+i)%n]
			if tried[r.idx] || r.down.Load() != (pass == 1) {
				continue
			}
			load := r.inflight.Load()
			if least == nil || load < leastLoad {
				least, leastLoad = r, load
			}
			if haveKey {
				if s := mix(key ^ r.seed); best == nil || s > bestScore {
					best, bestScore = r, s
				}
			}
		}
	}
	if best != nil && best.inflight.Load()-leastLoad <= maxImbalance {
		return best
	}
	return least
}

// affinityKey is the hash of the request's CacheKey (the client's
// prompt_cache_key) when it has one: the client knows which requests share
// a prefix, also when their first n bytes differ (a system prompt that
// names the date) or agree by chance. Without one it hashes the first n
// bytes of the request's rendered prompt: for chat, each message as its
// role, a NUL, its content and a record separator (0x1e), in order; for
// text prompts the text; for token prompts each id as 4 little-endian
// bytes. Prompts shorter than n bytes are keyed whole. ok is false when
// n <= 0 (affinity off).
func affinityKey(req *engine.Request, n int) (key uint64, ok bool) {
	if n <= 0 {
		return 0, false
	}
	if req.CacheKey != "" {
		// The leading 0x1f keeps a key from hashing like a prompt.
		h := &prefixHash{h: fnvOffset, left: 1 + len(req.CacheKey)}
		h.write("\x1f")
		h.write(req.CacheKey)
		return mix(h.h), true
	}
	h := &prefixHash{h: fnvOffset, left: n}
	switch {
	case req.Messages != nil:
		for _, m := range req.Messages {
			h.write(string(m.Role))
			h.write("\x00")
			h.write(m.Content)
			h.write("\x1e")
			if h.left == 0 {
				break
			}
		}
	case req.PromptTokens != nil:
		var b [4]byte
		for _, id := range req.PromptTokens {
			b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
			h.write(string(b[:]))
			if h.left == 0 {
				break
			}
		}
	default:
		h.write(req.Prompt)
	}
	return mix(h.h), true
}

// prefixHash is FNV-1a over at most left more bytes.
type prefixHash struct {
	h    uint64
	left int
}

func (p *prefixHash) write(s string) {
	if len(s) > p.left {
		s = s[:p.left]
	}
	p.left -= len(s)
	for i := 0; i < len(s); i++ {
		p.h = (p.h ^ uint64(s[i])) * fnvPrime
	}
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// mix is the splitmix64 finaliser: it spreads FNV's weak high bits so that
// rendezvous scores of nearby keys are independent.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// healthLoop checks r every interval until quit closes: immediately, then
// on a timer. It is one of the Engine's goroutines.
func (e *Engine) healthLoop(r *replica) {
	defer e.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-e.quit:
			return
		case <-t.C:
		}
		e.check(r)
		t.Reset(e.opts.HealthInterval)
	}
}

// check probes r once and updates its state, logging transitions.
func (e *Engine) check(r *replica) {
	ctx, cancel := context.WithTimeout(e.base, e.opts.HealthTimeout)
	defer cancel()
	err := e.probe(ctx, r)
	if e.base.Err() != nil {
		return // closing: the error is ours, not the replica's
	}
	if err != nil {
		r.storeGauges(noGauges)
		if r.markDown(err.Error()) {
			e.log.Warn("upstream replica down", slog.String("model", e.info.ID),
				slog.String("replica", r.base), slog.String("err", err.Error()))
		}
		return
	}
	if r.down.Swap(false) {
		e.log.Info("upstream replica up", slog.String("model", e.info.ID), slog.String("replica", r.base))
	}
	if !r.noMetrics.Load() {
		e.scrape(ctx, r)
	}
}

// probe asks GET /health, or GET /v1/models where /health does not exist
// (404, 405 or 501: the replica is up but serves no health route; rill then
// uses /v1/models for it from now on). Any 2xx is healthy; llama.cpp
// answers 503 while it loads a model.
func (e *Engine) probe(ctx context.Context, r *replica) error {
	path := "/health"
	if r.modelsProbe.Load() {
		path = "/v1/models"
	}
	status, err := e.get(ctx, r, path)
	if err == nil && path == "/health" &&
		(status == http.StatusNotFound || status == http.StatusMethodNotAllowed || status == http.StatusNotImplemented) {
		r.modelsProbe.Store(true)
		path = "/v1/models"
		status, err = e.get(ctx, r, path)
	}
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("health check: GET %s answered %d", path, status)
	}
	return nil
}

func (e *Engine) get(ctx context.Context, r *replica, path string) (int, error) {
	resp, err := e.getResponse(ctx, r, path, "")
	if err != nil {
		return 0, err
	}
	// Read a little of the body so that the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// getResponse sends GET path to r with r's key and, unless "", an Accept
// header; the caller closes the body.
func (e *Engine) getResponse(ctx context.Context, r *replica, path, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return nil, err
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return e.client.Do(req)
}
