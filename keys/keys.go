// Package keys holds the API keys of a keys file and what each may use:
// requests and tokens per minute, concurrent requests, and a default
// request priority. It decides admission and keeps the counts; it knows no
// HTTP (package service asks it about a request's key and answers the
// client) and no engine.
//
// The file is YAML (JSON is YAML too):
//
//	keys:
//	  - name: alice                  # required, unique: logs and /metrics show it, never the key
//	    key: sk-alice-7f3e…          # the key itself, or instead:
//	    # sha256: 9f86d08…           # the hex SHA-256 of the key, so that the file holds no secret
//	    requests_per_minute: 60      # optional: 0 or absent is unlimited
//	    tokens_per_minute: 40000     # optional: prompt + completion tokens
//	    max_concurrent_streams: 4    # optional: generation requests in flight at once
//	    priority: -1                 # optional: the default of requests that send none
//
// Limits are token buckets refilled continuously, OpenAI's model: a limit
// of 60 requests per minute holds 60 and gains one a second.
package keys

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Key is one API key of a keys file and its limits; a zero limit is no
// limit.
type Key struct {
	// Name identifies the key in logs and metrics.
	Name string
	// Hash is the SHA-256 of the key: only the hash is kept.
	Hash [sha256.Size]byte
	// RequestsPerMinute bounds the generation requests started per minute.
	RequestsPerMinute int
	// TokensPerMinute bounds the tokens (prompt + completion, as usage
	// reports them) per minute: a request is admitted while the budget is
	// not spent, and its usage is taken from it when it completes.
	TokensPerMinute int
	// MaxConcurrentStreams bounds the generation requests in flight at once.
	MaxConcurrentStreams int
	// Priority is the priority of the key's requests that send none; nil
	// leaves them at the default.
	Priority *int
}

// Limited reports whether k has any limit.
func (k *Key) Limited() bool {
	return k.RequestsPerMinute > 0 || k.TokensPerMinute > 0 || k.MaxConcurrentStreams > 0
}

// fileKey is one entry of the file as written.
type fileKey struct {
	Name                 string `yaml:"name"`
	Key                  string `yaml:"key"`
	SHA256               string `yaml:"sha256"`
	RequestsPerMinute    int    `yaml:"requests_per_minute"`
	TokensPerMinute      int    `yaml:"tokens_per_minute"`
	MaxConcurrentStreams int    `yaml:"max_concurrent_streams"`
	Priority             *int   `yaml:"priority"`
}

// Parse reads a keys file. Every problem is an error that names the entry:
// unknown fields, a missing or repeated name, neither or both of key and
// sha256, a malformed hash, a key given twice, a negative limit.
func Parse(data []byte) ([]Key, error) {
	var f struct {
		Keys []fileKey `yaml:"keys"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("keys file: no keys (want a list under \"keys:\")")
	}
	names := make(map[string]bool, len(f.Keys))
	hashes := make(map[[sha256.Size]byte]string, len(f.Keys))
	out := make([]Key, 0, len(f.Keys))
	for i, fk := range f.Keys {
		k, err := fk.key()
		if err != nil {
			return nil, fmt.Errorf("keys file: entry %d (%q): %w", i+1, fk.Name, err)
		}
		if names[k.Name] {
			return nil, fmt.Errorf("keys file: entry %d: the name %q is used twice", i+1, k.Name)
		}
		if other, ok := hashes[k.Hash]; ok {
			return nil, fmt.Errorf("keys file: entry %d (%q): the same key as %q", i+1, k.Name, other)
		}
		names[k.Name], hashes[k.Hash] = true, k.Name
		out = append(out, k)
	}
	return out, nil
}

func (fk *fileKey) key() (Key, error) {
	k := Key{Name: strings.TrimSpace(fk.Name), RequestsPerMinute: fk.RequestsPerMinute,
		TokensPerMinute: fk.TokensPerMinute, MaxConcurrentStreams: fk.MaxConcurrentStreams, Priority: fk.Priority}
	if k.Name == "" {
		return k, errors.New("name is required")
	}
	switch {
	case fk.Key != "" && fk.SHA256 != "":
		return k, errors.New("give key or sha256, not both")
	case fk.Key != "":
		k.Hash = sha256.Sum256([]byte(fk.Key))
	case fk.SHA256 != "":
		b, err := hex.DecodeString(strings.TrimSpace(fk.SHA256))
		if err != nil || len(b) != sha256.Size {
			return k, errors.New("sha256 must be 64 hex digits")
		}
		copy(k.Hash[:], b)
	default:
		return k, errors.New("key or sha256 is required")
	}
	if k.RequestsPerMinute < 0 || k.TokensPerMinute < 0 || k.MaxConcurrentStreams < 0 {
		return k, errors.New("limits must not be negative")
	}
	return k, nil
}

// Load reads and parses the keys file at path.
func Load(path string) ([]Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}
