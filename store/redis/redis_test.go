package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"rill/store"
	"rill/store/storetest"
	"rill/store/testserver"
)

func open(t testing.TB, url string, keep store.Retention) *Store {
	s, err := Open(context.Background(), url, keep)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestContract runs the contract against one server with an append-only
// file; each test has a key prefix of its own, and Reopen kills the
// server (SIGKILL) and starts it again between Close and Open, so what was
// stored must come back from the server's disk.
func TestContract(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.RedisOptions{AppendOnly: true})
	var n atomic.Int64
	var mu sync.Mutex
	urls := map[store.Store]string{}
	keeps := map[store.Store]store.Retention{}
	remember := func(s store.Store, url string, keep store.Retention) store.Store {
		mu.Lock()
		defer mu.Unlock()
		urls[s], keeps[s] = url, keep
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, keep store.Retention) store.Store {
			url := fmt.Sprintf("%s?prefix=t%d:", srv.URL(0), n.Add(1))
			return remember(open(t, url, keep), url, keep)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			url, keep := urls[s], keeps[s]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			srv.Crash(t)
			return remember(open(t, url, keep), url, keep)
		},
	})
}

// TestPrefix checks that two stores under two prefixes of one database do
// not see each other's keys, and that every key is under its prefix.
func TestPrefix(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartRedis(t, testserver.RedisOptions{})
	a := open(t, srv.URL(0), store.Retention{})
	defer a.Close()
	b := open(t, srv.URL(0)+"?prefix=other:", store.Retention{})
	defer b.Close()
	if err := a.PutResponse(ctx, store.Response{ID: "r", Items: []string{"msg_r"}, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutStream(ctx, store.Stream{ID: "s", Status: "queued"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetResponse(ctx, "r"); err != store.ErrNotFound {
		t.Errorf("the other prefix's response: %v, want not found", err)
	}
	keys, err := a.c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if len(k) < len(DefaultPrefix) || k[:len(DefaultPrefix)] != DefaultPrefix {
			t.Errorf("key %q outside the prefix %q", k, DefaultPrefix)
		}
	}
	if len(keys) == 0 {
		t.Error("no keys written")
	}
}

func BenchmarkStore(b *testing.B) {
	srv := testserver.StartRedis(b, testserver.RedisOptions{})
	var n atomic.Int64
	storetest.Bench(b, func(b *testing.B) store.Store {
		return open(b, fmt.Sprintf("%s?prefix=b%d:", srv.URL(0), n.Add(1)), store.Retention{})
	})
}

// TestBytes checks the running count of Data that MaxBytes reads against
// the Data the keys hold, after writes of every kind.
func TestBytes(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartRedis(t, testserver.RedisOptions{})
	s := open(t, srv.URL(0), store.Retention{})
	defer s.Close()
	steps := []struct {
		name string
		do   func() error
	}{
		{"put a", func() error { return s.PutResponse(ctx, store.Response{ID: "a", Data: []byte("aaaa")}) }},
		{"put b on a", func() error { return s.PutResponse(ctx, store.Response{ID: "b", Parent: "a", Data: []byte("bbbbbb")}) }},
		{"replace a", func() error { return s.PutResponse(ctx, store.Response{ID: "a", Data: []byte("aa")}) }},
		{"delete a", func() error { return s.DeleteResponse(ctx, "a") }},
		{"put s", func() error { return s.PutStream(ctx, store.Stream{ID: "s", Data: []byte("sss")}) }},
		{"append", func() error {
			return s.AppendEvents(ctx, "s", []store.Event{{Seq: 0, Data: []byte("e0")}, {Seq: 1, Data: []byte("e11")}})
		}},
		{"append again", func() error {
			return s.AppendEvents(ctx, "s", []store.Event{{Seq: 1, Data: []byte("e11")}, {Seq: 2, Data: []byte("e222")}})
		}},
		{"update s", func() error { return s.PutStream(ctx, store.Stream{ID: "s", Data: []byte("s")}) }},
		{"delete b", func() error { return s.DeleteResponse(ctx, "b") }},
		{"delete s", func() error { return s.DeleteStream(ctx, "s") }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var held int64
		keys, err := s.c.Keys(ctx, DefaultPrefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			switch typ := s.c.Type(ctx, k).Val(); {
			case typ == "hash":
				held += s.c.HStrLen(ctx, k, "data").Val()
			case typ == "zset" && k[len(DefaultPrefix):len(DefaultPrefix)+2] == "e:":
				for _, m := range s.c.ZRange(ctx, k, 0, -1).Val() {
					_, data, _ := strings.Cut(m, ":")
					held += int64(len(data))
				}
			}
		}
		count, _ := s.c.Get(ctx, DefaultPrefix+"bytes").Int64()
		if count != held {
			t.Errorf("after %s: the count says %d bytes, the keys hold %d", st.name, count, held)
		}
	}
}

func TestShared(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.RedisOptions{})
	a, b := open(t, srv.URL(0), store.Retention{}), open(t, srv.URL(0), store.Retention{})
	defer a.Close()
	defer b.Close()
	storetest.RunShared(t, a, b)
}

// TestEviction: a server that evicts any key when full is refused; one
// that evicts only keys with a TTL (the store sets none) is not.
func TestEviction(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		wantErr bool
	}{
		{"noeviction", false},
		{"volatile-lru", false},
		{"allkeys-lru", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := testserver.StartRedis(t, testserver.RedisOptions{Args: []string{"--maxmemory-policy", tc.policy}})
			s, err := Open(context.Background(), srv.URL(0), store.Retention{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("open: %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "maxmemory-policy is "+tc.policy) {
				t.Errorf("error %q does not name the policy", err)
			}
			if s != nil {
				s.Close()
			}
		})
	}
}
