package keys

import (
	"crypto/sha256"
	"math"
	"sync"
	"time"
)

// Set is the keys in effect: it resolves a presented key to its Client and
// takes a new list on a reload. Safe for concurrent use.
type Set struct {
	now func() time.Time

	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]*Client
	// byName keeps every client made so far, so that a reload keeps the
	// counts of the keys it keeps (by name): reloading never resets a
	// limit.
	byName map[string]*Client
}

// Options configure a Set. Zero values mean the defaults.
type Options struct {
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// NewSet returns a Set of ks.
func NewSet(ks []Key, opts Options) *Set {
	s := &Set{now: opts.Now, byName: make(map[string]*Client)}
	if s.now == nil {
		s.now = time.Now
	}
	s.Replace(ks)
	return s
}

// Replace puts ks in effect at once. A key whose name was there before
// keeps its counts, under its new limits (a bucket holds at most its new
// limit); a key no longer listed is refused from now on, and its requests
// in flight run to their end.
func (s *Set) Replace(ks []Key) {
	now := s.now()
	byHash := make(map[[sha256.Size]byte]*Client, len(ks))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range ks {
		c := s.byName[k.Name]
		if c == nil {
			c = &Client{name: k.Name, now: s.now}
			s.byName[k.Name] = c
		}
		c.set(k, now)
		byHash[k.Hash] = c
	}
	s.byHash = byHash
}

// Len is the number of keys in effect.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byHash)
}

// Lookup returns the client of the presented key, or nil when the key is
// not in effect. Keys are compared by their SHA-256, so the time a lookup
// takes says nothing about how much of a key was right.
func (s *Set) Lookup(key string) *Client {
	h := sha256.Sum256([]byte(key))
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byHash[h]
}

// Limit names a limit a request can run into.
type Limit string

// The limits, as OpenAI's 429 names them in its error's type (streams is
// rill's).
const (
	LimitRequests Limit = "requests"
	LimitTokens   Limit = "tokens"
	LimitStreams  Limit = "streams"
)

// Refusal says why a request was refused and when to retry.
type Refusal struct {
	Limit Limit
	// Max is the limit's value: per minute, or at once for streams.
	Max int
	// RetryAfter is how long until the request would be admitted (for
	// streams, 1s: a stream's end cannot be foreseen).
	RetryAfter time.Duration
}

// Client is one key's limits and counts. Safe for concurrent use.
type Client struct {
	name string
	now  func() time.Time

	mu       sync.Mutex
	key      Key
	requests bucket
	tokens   bucket
	streams  int
}

// Name is the key's name.
func (c *Client) Name() string { return c.name }

// Priority is the key's default priority; nil for none.
func (c *Client) Priority() *int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key.Priority
}

// Limited reports whether the key has any limit.
func (c *Client) Limited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key.Limited()
}

func (c *Client) set(k Key, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key = k
	c.requests.resize(k.RequestsPerMinute, now)
	c.tokens.resize(k.TokensPerMinute, now)
}

// Admit starts a generation request of the key: it takes one request from
// the requests bucket and a stream slot, or, at a limit, takes nothing and
// returns why. A request is admitted on tokens while the bucket is not
// empty: its size is known only from its usage (Charge). release gives the
// stream slot back; call it once, when the request ends.
func (c *Client) Admit() (release func(), refused *Refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.requests.refill(now)
	c.tokens.refill(now)
	k := &c.key
	switch {
	case k.RequestsPerMinute > 0 && c.requests.level < 1:
		return nil, &Refusal{Limit: LimitRequests, Max: k.RequestsPerMinute, RetryAfter: c.requests.until(1)}
	case k.TokensPerMinute > 0 && c.tokens.level < 1:
		return nil, &Refusal{Limit: LimitTokens, Max: k.TokensPerMinute, RetryAfter: c.tokens.until(1)}
	case k.MaxConcurrentStreams > 0 && c.streams >= k.MaxConcurrentStreams:
		return nil, &Refusal{Limit: LimitStreams, Max: k.MaxConcurrentStreams, RetryAfter: time.Second}
	}
	if k.RequestsPerMinute > 0 {
		c.requests.level--
	}
	c.streams++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.streams--
			c.mu.Unlock()
		})
	}, nil
}

// Charge takes a completed request's tokens (prompt + completion) from the
// tokens bucket, which may go below empty: the key then waits until it
// refills past it.
func (c *Client) Charge(tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key.TokensPerMinute <= 0 || tokens <= 0 {
		return
	}
	c.tokens.refill(c.now())
	c.tokens.level -= float64(tokens)
}

// State is a key's limits as OpenAI's x-ratelimit-* headers report them.
// A limit of 0 is no limit (its headers are left out).
type State struct {
	LimitRequests, RemainingRequests int
	// ResetRequests is how long until the requests bucket is full again.
	ResetRequests                time.Duration
	LimitTokens, RemainingTokens int
	ResetTokens                  time.Duration
}

// State returns the key's limits now.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.requests.refill(now)
	c.tokens.refill(now)
	return State{
		LimitRequests: c.key.RequestsPerMinute, RemainingRequests: c.requests.remaining(), ResetRequests: c.requests.until(c.requests.size),
		LimitTokens: c.key.TokensPerMinute, RemainingTokens: c.tokens.remaining(), ResetTokens: c.tokens.until(c.tokens.size),
	}
}

// bucket is a token bucket of size units refilled at size per minute,
// continuously. A size of 0 is no limit.
type bucket struct {
	size  float64
	level float64 // may go below 0 (tokens charged after the fact)
	last  time.Time
}

// resize makes the bucket hold perMinute, full when it is new, else with
// its level kept (and cut to the new size).
func (b *bucket) resize(perMinute int, now time.Time) {
	fresh := b.last.IsZero() || b.size == 0
	b.refill(now)
	b.size = float64(perMinute)
	if fresh {
		b.level = b.size
	}
	b.level = min(b.level, b.size)
	b.last = now
}

// refill adds what the time since the last refill earned.
func (b *bucket) refill(now time.Time) {
	if b.size > 0 && now.After(b.last) {
		b.level = min(b.size, b.level+b.size*now.Sub(b.last).Minutes())
	}
	if now.After(b.last) {
		b.last = now
	}
}

// until is how long until the bucket holds level, rounded up to the
// millisecond; 0 when it does, or when the bucket has no limit.
func (b *bucket) until(level float64) time.Duration {
	if b.size == 0 || b.level >= level {
		return 0
	}
	ms := (level - b.level) / b.size * float64(time.Minute/time.Millisecond)
	// Less a hair, so that float error never adds a millisecond to an
	// exact answer.
	return time.Duration(math.Ceil(ms-1e-6)) * time.Millisecond
}

// remaining is the whole units left, never below 0.
func (b *bucket) remaining() int {
	return max(0, int(math.Floor(b.level)))
}
