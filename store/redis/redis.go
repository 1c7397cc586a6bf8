// Package redis is a shared store.Store in Redis, for several rill
// replicas: every write is one Lua script (atomic for all of them), reads
// are single commands. Keys live under a prefix ("rill:" unless the URL's
// prefix parameter says otherwise); scripts.go lists them. One server (or a
// primary with its replicas), not Redis Cluster.
//
// Durability is the server's: with appendonly yes what a call stored
// survives a restart of Redis (appendfsync says how much an OS crash may
// take); with Redis's defaults, a snapshot now and then.
//
// Retention applies when Sweep runs, in one script; no TTLs, since a key's
// expiry would leave the indexes that name it behind.
package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"rill/store"
)

// DefaultPrefix starts every key the store writes, unless the URL names
// another.
const DefaultPrefix = "rill:"

// Store is the Redis store.
type Store struct {
	c      *redis.Client
	prefix string
	keep   store.Retention
}

// Open connects to the server at rawURL (redis://[user:password@]host:port/db,
// or rediss:// for TLS; a prefix=… parameter sets the key prefix) and
// returns a store that keeps keep.
func Open(ctx context.Context, rawURL string, keep store.Retention) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	q := u.Query()
	prefix := DefaultPrefix
	if q.Has("prefix") {
		prefix = q.Get("prefix")
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis store: %s: %w", u.Redacted(), err)
	}
	if err := checkEviction(ctx, c); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis store: %s: %w", u.Redacted(), err)
	}
	return &Store{c: c, prefix: prefix, keep: keep}, nil
}

// checkEviction refuses a server that evicts keys without a TTL when it
// is full (maxmemory-policy allkeys-*): an evicted key would tear the
// store's indexes apart (a response gone but its items left, a log gone
// under its stream). The store sets no TTLs, so noeviction (Redis's
// default) and the volatile-* policies never evict its keys. A server
// that refuses CONFIG GET (managed services often do) is taken on trust.
func checkEviction(ctx context.Context, c *redis.Client) error {
	v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return nil
	}
	if p := v["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
		return fmt.Errorf("maxmemory-policy is %s, which would evict the store's keys when memory is full: use noeviction (the default)", p)
	}
	return nil
}

func (s *Store) wrap(op string, err error) error {
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return err
	}
	return fmt.Errorf("redis store: %s: %w", op, err)
}

func (s *Store) run(ctx context.Context, op string, sc *redis.Script, args ...any) (any, error) {
	v, err := sc.Run(ctx, s.c, nil, append([]any{s.prefix}, args...)...).Result()
	return v, s.wrap(op, err)
}

// micros is t's score in the sorted sets: microseconds, which a float64
// holds exactly.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func parseNanos(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

// PutResponse implements store.Store.
func (s *Store) PutResponse(ctx context.Context, r store.Response) error {
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	items := ""
	if len(r.Items) > 0 {
		b, err := json.Marshal(r.Items)
		if err != nil {
			return err
		}
		items = string(b)
	}
	_, err := s.run(ctx, "put response", putResponse, r.ID, r.Parent, items, r.Data, nanos(r.Created), micros(r.Created))
	return err
}

// GetResponse implements store.Store.
func (s *Store) GetResponse(ctx context.Context, id string) (store.Response, error) {
	v, err := s.c.HMGet(ctx, s.prefix+"r:"+id, "parent", "items", "data", "created", "visible").Result()
	if err != nil {
		return store.Response{}, s.wrap("get response", err)
	}
	if vis, _ := v[4].(string); vis != "1" {
		return store.Response{}, store.ErrNotFound
	}
	return response(id, v[0], v[1], v[2], v[3])
}

func response(id string, parent, items, data, created any) (store.Response, error) {
	str := func(v any) string { s, _ := v.(string); return s }
	r := store.Response{ID: id, Parent: str(parent), Data: []byte(str(data)), Created: parseNanos(str(created))}
	if it := str(items); it != "" {
		if err := json.Unmarshal([]byte(it), &r.Items); err != nil {
			return store.Response{}, fmt.Errorf("redis store: response %s: items: %w", id, err)
		}
	}
	return r, nil
}

// ResponseByItem implements store.Store.
func (s *Store) ResponseByItem(ctx context.Context, itemID string) (store.Response, error) {
	id, err := s.c.Get(ctx, s.prefix+"item:"+itemID).Result()
	if errors.Is(err, redis.Nil) {
		return store.Response{}, store.ErrNotFound
	}
	if err != nil {
		return store.Response{}, s.wrap("response by item", err)
	}
	return s.GetResponse(ctx, id)
}

// DeleteResponse implements store.Store.
func (s *Store) DeleteResponse(ctx context.Context, id string) error {
	v, err := s.run(ctx, "delete response", deleteResponse, id)
	if err == nil && v == int64(0) {
		err = store.ErrNotFound
	}
	return err
}

// Lineage implements store.Store.
func (s *Store) Lineage(ctx context.Context, id string, max int) ([]store.Response, error) {
	v, err := s.run(ctx, "lineage", lineage, id, max)
	if err != nil {
		return nil, err
	}
	rows, _ := v.([]any)
	if len(rows) == 0 {
		return nil, store.ErrNotFound
	}
	out := make([]store.Response, 0, len(rows))
	for _, row := range rows {
		f, _ := row.([]any)
		if len(f) != 5 {
			return nil, fmt.Errorf("redis store: lineage: a row of %d fields", len(f))
		}
		id, _ := f[0].(string)
		r, err := response(id, f[1], f[2], f[3], f[4])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// PutStream implements store.Store.
func (s *Store) PutStream(ctx context.Context, st store.Stream) error {
	if st.Updated.IsZero() {
		st.Updated = time.Now()
	}
	if st.Created.IsZero() {
		st.Created = st.Updated
	}
	_, err := s.run(ctx, "put stream", putStream, st.ID, st.Status, st.Data, nanos(st.Created), nanos(st.Updated), micros(st.Updated))
	return err
}

// GetStream implements store.Store.
func (s *Store) GetStream(ctx context.Context, id string) (store.Stream, error) {
	v, err := s.c.HMGet(ctx, s.prefix+"s:"+id, "status", "data", "created", "updated").Result()
	if err != nil {
		return store.Stream{}, s.wrap("get stream", err)
	}
	if v[0] == nil {
		return store.Stream{}, store.ErrNotFound
	}
	str := func(v any) string { s, _ := v.(string); return s }
	return store.Stream{ID: id, Status: str(v[0]), Data: []byte(str(v[1])),
		Created: parseNanos(str(v[2])), Updated: parseNanos(str(v[3]))}, nil
}

// AppendEvents implements store.Store.
func (s *Store) AppendEvents(ctx context.Context, id string, events []store.Event) error {
	args := make([]any, 0, 1+2*len(events))
	args = append(args, id)
	for _, ev := range events {
		args = append(args, strconv.FormatInt(ev.Seq, 10), ev.Data)
	}
	v, err := s.run(ctx, "append events", appendEvents, args...)
	if err == nil && v == int64(0) {
		err = store.ErrNotFound
	}
	return err
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, id string, after int64, limit int) ([]store.Event, error) {
	members, err := s.c.ZRangeByScore(ctx, s.prefix+"e:"+id, &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(after, 10), Max: "+inf", Count: int64(max(limit, 0)),
	}).Result()
	if err != nil {
		return nil, s.wrap("events", err)
	}
	if len(members) == 0 {
		// An empty answer is either an empty tail or no stream at all.
		n, err := s.c.Exists(ctx, s.prefix+"s:"+id).Result()
		if err != nil {
			return nil, s.wrap("events", err)
		}
		if n == 0 {
			return nil, store.ErrNotFound
		}
		return nil, nil
	}
	out := make([]store.Event, len(members))
	for i, m := range members {
		seq, data, ok := strings.Cut(m, ":")
		n, err := strconv.ParseInt(seq, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("redis store: events of %s: a member without its seq", id)
		}
		out[i] = store.Event{Seq: n, Data: []byte(data)}
	}
	return out, nil
}

// DeleteStream implements store.Store.
func (s *Store) DeleteStream(ctx context.Context, id string) error {
	v, err := s.run(ctx, "delete stream", deleteStream, id)
	if err == nil && v == int64(0) {
		err = store.ErrNotFound
	}
	return err
}

// Sweep implements store.Store.
func (s *Store) Sweep(ctx context.Context, now time.Time) (responses, streams int, err error) {
	cut := ""
	if s.keep.MaxAge > 0 {
		cut = micros(now.Add(-s.keep.MaxAge))
	}
	v, err := s.run(ctx, "sweep", sweep, cut, s.keep.MaxResponses, s.keep.MaxBytes)
	if err != nil {
		return 0, 0, err
	}
	n, _ := v.([]any)
	if len(n) != 2 {
		return 0, 0, fmt.Errorf("redis store: sweep answered %v", v)
	}
	r, _ := n[0].(int64)
	st, _ := n[1].(int64)
	return int(r), int(st), nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	err := s.c.Close()
	if errors.Is(err, redis.ErrClosed) {
		return nil // a second Close is harmless
	}
	return err
}
