package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("sk-bob"))
	bobHash := hex.EncodeToString(sum[:])
	tests := []struct {
		name    string
		file    string
		check   func(t *testing.T, ks []Key)
		wantErr string
	}{
		{"key and limits", `
keys:
  - name: alice
    key: sk-alice
    requests_per_minute: 60
    tokens_per_minute: 1000
    max_concurrent_streams: 2
    priority: -1
  - name: bob
    sha256: ` + bobHash + `
`, func(t *testing.T, ks []Key) {
			if len(ks) != 2 {
				t.Fatalf("%d keys", len(ks))
			}
			a, b := ks[0], ks[1]
			if a.Name != "alice" || a.Hash != sha256.Sum256([]byte("sk-alice")) || a.RequestsPerMinute != 60 ||
				a.TokensPerMinute != 1000 || a.MaxConcurrentStreams != 2 || a.Priority == nil || *a.Priority != -1 || !a.Limited() {
				t.Errorf("alice %+v", a)
			}
			if b.Name != "bob" || b.Hash != sha256.Sum256([]byte("sk-bob")) || b.Limited() || b.Priority != nil {
				t.Errorf("bob %+v", b)
			}
		}, ""},
		{"json", `{"keys":[{"name":"j","key":"k1","requests_per_minute":3}]}`, func(t *testing.T, ks []Key) {
			if len(ks) != 1 || ks[0].RequestsPerMinute != 3 {
				t.Errorf("%+v", ks)
			}
		}, ""},
		{"no keys", "keys: []\n", nil, "no keys"},
		{"empty file", "", nil, "keys file"},
		{"unknown field", "keys:\n  - name: a\n    key: k\n    rpm: 3\n", nil, "rpm"},
		{"no name", "keys:\n  - key: k\n", nil, "name is required"},
		{"no key", "keys:\n  - name: a\n", nil, "key or sha256 is required"},
		{"both", "keys:\n  - name: a\n    key: k\n    sha256: " + bobHash + "\n", nil, "not both"},
		{"bad hash", "keys:\n  - name: a\n    sha256: abc\n", nil, "64 hex digits"},
		{"name twice", "keys:\n  - name: a\n    key: k1\n  - name: a\n    key: k2\n", nil, "used twice"},
		{"key twice", "keys:\n  - name: a\n    key: sk-bob\n  - name: b\n    sha256: " + bobHash + "\n", nil, "the same key"},
		{"negative", "keys:\n  - name: a\n    key: k\n    tokens_per_minute: -1\n", nil, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ks, err := Parse([]byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, ks)
		})
	}
}

// clock is a settable clock for a Set.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func key(name, secret string, rpm, tpm, streams int) Key {
	return Key{Name: name, Hash: sha256.Sum256([]byte(secret)), RequestsPerMinute: rpm, TokensPerMinute: tpm, MaxConcurrentStreams: streams}
}

// TestLimits drives one key through a script of admissions, charges,
// releases and clock advances.
func TestLimits(t *testing.T) {
	t.Parallel()
	type op struct {
		advance time.Duration
		charge  int  // tokens charged before admitting
		release bool // release the oldest admitted request first
		admit   bool
		refused Limit // "" admitted
		retry   time.Duration
		state   *State // checked after the op
	}
	tests := []struct {
		name string
		key  Key
		ops  []op
	}{
		{"requests per minute", key("a", "k", 2, 0, 0), []op{
			{admit: true, state: &State{LimitRequests: 2, RemainingRequests: 1, ResetRequests: 30 * time.Second}},
			{admit: true, state: &State{LimitRequests: 2, RemainingRequests: 0, ResetRequests: time.Minute}},
			{admit: true, refused: LimitRequests, retry: 30 * time.Second},
			{advance: 29 * time.Second, admit: true, refused: LimitRequests, retry: time.Second},
			{advance: time.Second, admit: true, state: &State{LimitRequests: 2, RemainingRequests: 0, ResetRequests: time.Minute}},
			{advance: 10 * time.Minute, state: &State{LimitRequests: 2, RemainingRequests: 2}},
		}},
		{"tokens per minute: admitted while the budget lasts, charged after", key("a", "k", 0, 600, 0), []op{
			{admit: true, state: &State{LimitTokens: 600, RemainingTokens: 600}},
			{charge: 500, state: &State{LimitTokens: 600, RemainingTokens: 100, ResetTokens: 50 * time.Second}},
			{admit: true},
			{charge: 400, state: &State{LimitTokens: 600, RemainingTokens: 0, ResetTokens: 90 * time.Second}},
			{admit: true, refused: LimitTokens, retry: 30*time.Second + 100*time.Millisecond},
			{advance: 31 * time.Second, admit: true, state: &State{LimitTokens: 600, RemainingTokens: 10, ResetTokens: 59 * time.Second}},
		}},
		{"concurrent streams", key("a", "k", 0, 0, 2), []op{
			{admit: true},
			{admit: true},
			{admit: true, refused: LimitStreams, retry: time.Second},
			{release: true, admit: true},
			{admit: true, refused: LimitStreams, retry: time.Second},
			{release: true, state: &State{}},
		}},
		{"a refusal takes nothing", key("a", "k", 1, 0, 1), []op{
			{admit: true},
			{advance: time.Minute, admit: true, refused: LimitStreams, retry: time.Second,
				state: &State{LimitRequests: 1, RemainingRequests: 1}},
		}},
		{"no limits", key("a", "k", 0, 0, 0), []op{
			{admit: true}, {admit: true}, {charge: 1 << 30, admit: true, state: &State{}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Unix(1e9, 0)}
			s := NewSet([]Key{tc.key}, Options{Now: clk.now})
			c := s.Lookup("k")
			if c == nil || s.Lookup("other") != nil {
				t.Fatal("lookup")
			}
			var held []func()
			for i, o := range tc.ops {
				clk.t = clk.t.Add(o.advance)
				c.Charge(o.charge)
				if o.release {
					held[0]()
					held[0]() // twice: once counts
					held = held[1:]
				}
				if o.admit {
					release, r := c.Admit()
					switch {
					case o.refused == "" && r != nil:
						t.Fatalf("op %d: refused %+v", i, *r)
					case o.refused != "" && (r == nil || r.Limit != o.refused || r.RetryAfter != o.retry):
						t.Fatalf("op %d: refusal %+v, want %s after %v", i, r, o.refused, o.retry)
					case r == nil:
						held = append(held, release)
					}
				}
				if o.state != nil {
					if got := c.State(); got != *o.state {
						t.Fatalf("op %d: state %+v, want %+v", i, got, *o.state)
					}
				}
			}
		})
	}
}

// TestReplace: a reload keeps the counts of the keys it keeps (by name),
// under their new limits; a dropped key is refused; a new one starts full.
func TestReplace(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Unix(1e9, 0)}
	s := NewSet([]Key{key("a", "ka", 10, 0, 0), key("b", "kb", 1, 0, 0)}, Options{Now: clk.now})
	a := s.Lookup("ka")
	for range 4 {
		if _, r := a.Admit(); r != nil {
			t.Fatal(r)
		}
	}
	s.Replace([]Key{key("a", "ka2", 5, 0, 0), key("c", "kc", 3, 0, 0)})
	tests := []struct {
		secret    string
		want      *Client
		remaining int
	}{
		{"ka", nil, 0},
		{"kb", nil, 0},
		{"ka2", a, 5},  // 6 left, cut to the new limit of 5
		{"kc", nil, 3}, // new: full
	}
	for _, tc := range tests {
		c := s.Lookup(tc.secret)
		switch {
		case tc.want != nil && c != tc.want:
			t.Errorf("%s: a different client after the reload", tc.secret)
		case tc.remaining == 0 && c != nil:
			t.Errorf("%s: still in effect", tc.secret)
		case tc.remaining > 0 && (c == nil || c.State().RemainingRequests != tc.remaining):
			t.Errorf("%s: %+v, want %d remaining", tc.secret, c, tc.remaining)
		}
	}
	if s.Len() != 2 {
		t.Errorf("%d keys", s.Len())
	}
}
