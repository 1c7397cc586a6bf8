package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables that configure the suite.
const (
	EnvURL       = "RILL_CONFORMANCE_URL"        // base URL of the server under test; empty: start rill in-process
	EnvModel     = "RILL_CONFORMANCE_MODEL"      // model id; empty: the first of GET /v1/models
	EnvAPIKey    = "RILL_CONFORMANCE_API_KEY"    // Bearer key, if the server wants one
	EnvBlockSize = "RILL_CONFORMANCE_BLOCK_SIZE" // prefix-cache block size in tokens; 0: unknown
	EnvDraftK    = "RILL_CONFORMANCE_DRAFT_K"    // most draft tokens proposed per verification step
	// EnvReasoningModel names a model of the target that reasons (a
	// thinking block streamed as reasoning_content); empty: the main model
	// if it reports reasoning_tokens.
	EnvReasoningModel = "RILL_CONFORMANCE_REASONING_MODEL"
)

// Defaults of Config.
const (
	// DefaultBlockSize is rill's KV block size, assumed when the suite starts
	// rill itself and RILL_CONFORMANCE_BLOCK_SIZE is unset.
	DefaultBlockSize = 16
	// DefaultDraftK is the draft length assumed when RILL_CONFORMANCE_DRAFT_K is unset.
	DefaultDraftK = 4
	// RequestTimeout bounds every request the helpers make.
	RequestTimeout = time.Minute
)

// Config is how the suite was asked to run.
type Config struct {
	// URL is the server under test ("http://host:port", with or without a
	// trailing /v1); empty means the suite starts rill itself.
	URL    string
	Model  string
	APIKey string
	// BlockSize is the prefix-cache granularity in tokens: a repeated prompt
	// of P tokens must report floor((P-1)/BlockSize)*BlockSize cached tokens.
	// 0 means unknown: the suite then only asserts 0 < cached <= P.
	BlockSize int
	// DraftK bounds the draft tokens per verification step (docs/design.md §3 rule 5).
	DraftK int
	// ReasoningModel is a model of the target that reasons; empty: see
	// EnvReasoningModel.
	ReasoningModel string
	// EmbeddingModel is a model of the target that embeds; empty: see
	// EnvEmbeddingModel.
	EmbeddingModel string
}

// InProcess reports whether the suite starts rill itself.
func (c Config) InProcess() bool { return c.URL == "" }

// ConfigFromEnv reads the RILL_CONFORMANCE_* variables. The block size
// defaults to DefaultBlockSize only in-process; against another server it is
// unknown unless set.
func ConfigFromEnv() (Config, error) {
	c := Config{
		URL:    strings.TrimSpace(os.Getenv(EnvURL)),
		Model:  strings.TrimSpace(os.Getenv(EnvModel)),
		APIKey: os.Getenv(EnvAPIKey),
		DraftK: DefaultDraftK,

		ReasoningModel: strings.TrimSpace(os.Getenv(EnvReasoningModel)),
		EmbeddingModel: strings.TrimSpace(os.Getenv(EnvEmbeddingModel)),
	}
	if c.InProcess() {
		c.BlockSize = DefaultBlockSize
	}
	for _, v := range []struct {
		name string
		dst  *int
		min  int
	}{{EnvBlockSize, &c.BlockSize, 0}, {EnvDraftK, &c.DraftK, 1}} {
		s := strings.TrimSpace(os.Getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.min {
			return Config{}, fmt.Errorf("%s=%q: want an integer >= %d", v.name, s, v.min)
		}
		*v.dst = n
	}
	return c, nil
}

// Target is a server under test. Its fields are set once, before use.
type Target struct {
	// BaseURL is "scheme://host:port" (plus any path prefix) without /v1.
	BaseURL string
	Model   string
	APIKey  string
	// Client makes every HTTP request; nil means one with RequestTimeout.
	Client *http.Client
}

// NewTarget returns a Target for url, which may end in "/v1" or "/".
func NewTarget(url, model, apiKey string) *Target {
	u := strings.TrimRight(strings.TrimSpace(url), "/")
	u = strings.TrimSuffix(u, "/v1")
	return &Target{BaseURL: u, Model: model, APIKey: apiKey,
		Client: &http.Client{Timeout: RequestTimeout}}
}

// URL returns the absolute URL of path ("/v1/models").
func (t *Target) URL(path string) string { return t.BaseURL + path }

func (t *Target) client() *http.Client {
	if t.Client != nil {
		return t.Client
	}
	return &http.Client{Timeout: RequestTimeout}
}

// authorize adds the API key to h, when there is one.
func (t *Target) authorize(h http.Header) {
	if t.APIKey != "" {
		h.Set("Authorization", "Bearer "+t.APIKey)
	}
}

// Do sends one request with the API key and returns the response, whose
// body the caller must close.
func (t *Target) Do(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	resp, err := t.do(ctx, method, path, body, contentType)
	if errors.Is(err, io.EOF) && ctx.Err() == nil {
		// A server may close a kept-alive connection just as the next
		// request goes out on it (llama.cpp's does after a stream), and
		// net/http sends a POST again by itself only when it is sure the
		// server saw none of it: once more, on a new connection.
		resp, err = t.do(ctx, method, path, body, contentType)
	}
	return resp, err
}

func (t *Target) do(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.URL(path), rd)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	t.authorize(req.Header)
	resp, err := t.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// Response is a complete, non-streamed HTTP response.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Send sends method path with a raw body (nil for none) and reads the whole
// response.
func (t *Target) Send(ctx context.Context, method, path string, body []byte) (*Response, error) {
	resp, err := t.Do(ctx, method, path, body, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: data}, nil
}

// Post sends body, encoded as JSON, to path and reads the whole response.
func (t *Target) Post(ctx context.Context, path string, body any) (*Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode body for %s: %w", path, err)
	}
	return t.Send(ctx, http.MethodPost, path, data)
}

// Models returns the ids GET /v1/models lists, in its order.
func (t *Target) Models(ctx context.Context) ([]string, error) {
	r, err := t.Send(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, err
	}
	if r.Status != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: status %d: %s", r.Status, clip(r.Body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// ResolveModel sets t.Model to the first model the target lists when it is
// empty, and checks that a given one is listed.
func (t *Target) ResolveModel(ctx context.Context) error {
	ids, err := t.Models(ctx)
	if err != nil {
		return err
	}
	if t.Model == "" {
		if len(ids) == 0 {
			return errors.New("GET /v1/models lists no model; set " + EnvModel)
		}
		t.Model = ids[0]
		return nil
	}
	for _, id := range ids {
		if id == t.Model {
			return nil
		}
	}
	return fmt.Errorf("model %q is not among the %d models GET /v1/models lists (%s)",
		t.Model, len(ids), strings.Join(ids, ", "))
}

// Nonce returns a fresh random word of 12 letters and digits, for prompts
// that must be cold in any cache. Its first character is a random letter,
// not a fixed one: a fixed first letter would be a token every prompt
// shares, or not, depending on how a tokenizer merges it with the next
// character, and the suite could not tell how many tokens fresh prompts
// share. Mixed case keeps chance matches rare even against the thousands
// of earlier prompts a server's prompt cache may compare a new one with
// (llama.cpp keeps them in RAM): a fresh nonce matches the first k
// characters of a given earlier one with probability 1/52 × 1/62^(k-1).
func Nonce() string {
	const (
		letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		alnum   = letters + "0123456789"
	)
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	out := make([]byte, len(b))
	// 256 is not a multiple of 52 or 62: the bias of b % n is under 2%, which
	// only changes the chance of a match by as much.
	out[0] = letters[int(b[0])%len(letters)]
	for i := 1; i < len(b); i++ {
		out[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(out)
}

// clip shortens a response body for an error message.
func clip(b []byte) string {
	const limit = 300
	s := strings.TrimSpace(string(b))
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
