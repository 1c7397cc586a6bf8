package conformance_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rill/conformance"
)

// envBroken turns the in-process rill into a deliberately broken one, to
// prove that the suite can fail. It exists only in the test binary.
const envBroken = "RILL_CONFORMANCE_SELFTEST_BROKEN"

// brokenModes are the breakages breakHandler knows, each the mistake of a
// real server:
//
//   - usage-everywhere: every chunk of every stream carries the request's
//     usage (the request is sent on with include_usage true to learn it),
//     so clients that sum usage over chunks count it many times.
//   - no-usage-chunk: the final "choices": [] usage chunk is dropped.
//   - one-choice: with n > 1, completion_tokens counts one choice only
//     (llama.cpp's server does this), total_tokens kept consistent.
//   - tool-calls-stop: a reply that calls tools ends with finish_reason
//     "stop", and streamed tool-call fragments carry no id (mistakes
//     early tool-calling servers made).
//   - cached-everything: every usage claims the whole prompt but its last
//     token as cached, cold or not (a cache count that is not measured).
//   - continuous-total: with continuous_usage_stats, every chunk with
//     choices carries the request's total instead of the running usage.
//   - messages-cache-in-input: on /v1/messages, input_tokens counts the
//     tokens read from the cache too (SGLang does this), so that input,
//     cache read and cache creation no longer add up to the prompt.
//   - embeddings-doubles: on /v1/embeddings, encoding_format base64
//     carries float64s instead of float32s (a server that encodes its
//     own float type), so clients decode twice as many wrong values.
//
// .ci/run runs the suite once per mode and requires it to fail;
// TestCIRunsEveryBrokenMode keeps its list and this one the same.
var brokenModes = []string{"usage-everywhere", "no-usage-chunk", "one-choice", "cached-everything", "continuous-total",
	"tool-calls-stop", "messages-cache-in-input", "embeddings-doubles"}

// breakHandler wraps h so that its POST answers are rewritten as mode says.
// It buffers each answer whole, which is fine for the suite (it reads
// streams to their end). WebSocket upgrades pass through untouched.
func breakHandler(mode string, h http.Handler) (http.Handler, error) {
	known := false
	for _, m := range brokenModes {
		known = known || m == mode
	}
	if !known {
		return nil, fmt.Errorf("%s=%q: want one of %s", envBroken, mode, strings.Join(brokenModes, ", "))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Upgrade") != "" {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if mode == "usage-everywhere" {
			body = forceIncludeUsage(body)
		}
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		rec := &bufferWriter{header: http.Header{}}
		h.ServeHTTP(rec, r2)
		out := rec.body.Bytes()
		switch {
		case rec.status != 0 && rec.status != http.StatusOK:
		case mode == "embeddings-doubles":
			// Embeddings only; every other answer passes untouched.
			if r.URL.Path == conformance.EmbeddingsPath {
				out = base64Float64(out)
			}
		case mode == "messages-cache-in-input":
			// Anthropic's answers only; OpenAI's pass untouched.
			if r.URL.Path == conformance.MessagesPath {
				out = countCacheInInput(out)
			}
		default:
			out = rewrite(mode, rec.header.Get("Content-Type"), out)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		if rec.status != 0 {
			w.WriteHeader(rec.status)
		}
		_, _ = w.Write(out)
	}), nil
}

// countCacheInInput adds cache_read_input_tokens to input_tokens in every
// usage of a Messages answer: the message object, or the data of an event
// stream's message_start and message_delta (the event lines kept).
func countCacheInInput(body []byte) []byte {
	fix := func(u any) {
		m, _ := u.(map[string]any)
		in, err1 := number(m["input_tokens"])
		read, err2 := number(m["cache_read_input_tokens"])
		if err1 == nil && err2 == nil {
			m["input_tokens"] = in + read
		}
	}
	if doc, err := decode(body); err == nil {
		fix(doc["usage"])
		return encode(doc)
	}
	lines := bytes.Split(body, []byte("\n"))
	for i, line := range lines {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		doc, err := decode(data)
		if err != nil {
			continue
		}
		switch doc["type"] {
		case "message_start":
			msg, _ := doc["message"].(map[string]any)
			fix(msg["usage"])
		case "message_delta":
			fix(doc["usage"])
		default:
			continue
		}
		lines[i] = append([]byte("data: "), encode(doc)...)
	}
	return bytes.Join(lines, []byte("\n"))
}

// base64Float64 re-encodes every base64 vector of an embeddings answer as
// little-endian float64s.
func base64Float64(body []byte) []byte {
	doc, err := decode(body)
	if err != nil {
		return body
	}
	data, _ := doc["data"].([]any)
	for _, d := range data {
		item, _ := d.(map[string]any)
		s, isString := item["embedding"].(string)
		if !isString {
			continue
		}
		v, err := conformance.DecodeEmbedding(json.RawMessage(strconv.Quote(s)))
		if err != nil {
			continue
		}
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(x)))
		}
		item["embedding"] = base64.StdEncoding.EncodeToString(b)
	}
	return encode(doc)
}

// bufferWriter is an http.ResponseWriter that keeps everything.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferWriter) Flush()                      {}

// forceIncludeUsage sets stream_options.include_usage on a streaming body.
func forceIncludeUsage(body []byte) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["stream"] != true {
		return body
	}
	if _, isObject := m["stream_options"].(map[string]any); !isObject && m["stream_options"] != nil {
		return body // leave bad input bad
	}
	m["stream_options"] = map[string]any{"include_usage": true}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

func rewrite(mode, contentType string, body []byte) []byte {
	if !strings.HasPrefix(contentType, "text/event-stream") {
		doc, err := decode(body)
		if err != nil {
			return body
		}
		switch mode {
		case "one-choice":
			if choices, _ := doc["choices"].([]any); len(choices) > 1 {
				countOneChoice(doc["usage"], len(choices))
			}
		case "cached-everything":
			cacheEverything(doc["usage"])
		}
		if mode == "tool-calls-stop" {
			breakToolCalls(doc)
		}
		return encode(doc)
	}
	tr := &conformance.Transcript{}
	if conformance.ReadSSE(bytes.NewReader(body), tr) != nil {
		return body
	}
	docs := make([]map[string]any, 0, len(tr.Chunks))
	var usage any
	choices := 1
	for _, c := range tr.Chunks {
		doc, err := decode(c)
		if err != nil {
			return body
		}
		if u, ok := doc["usage"]; ok && u != nil {
			usage = u
		}
		cs, _ := doc["choices"].([]any)
		for _, ch := range cs {
			m, _ := ch.(map[string]any)
			if i, err := number(m["index"]); err == nil {
				choices = max(choices, int(i)+1)
			}
		}
		docs = append(docs, doc)
	}
	var out bytes.Buffer
	for _, doc := range docs {
		cs, _ := doc["choices"].([]any)
		switch mode {
		case "usage-everywhere":
			doc["usage"] = usage
		case "no-usage-chunk":
			if len(cs) == 0 {
				continue
			}
		case "one-choice":
			countOneChoice(doc["usage"], choices)
		case "tool-calls-stop":
			breakToolCalls(doc)
		case "cached-everything":
			cacheEverything(doc["usage"])
		case "continuous-total":
			if len(cs) > 0 && doc["usage"] != nil {
				doc["usage"] = usage
			}
		}
		fmt.Fprintf(&out, "data: %s\n\n", encode(doc))
	}
	if tr.Error != nil {
		fmt.Fprintf(&out, "data: %s\n\n", tr.Error)
	}
	if tr.Done {
		out.WriteString("data: [DONE]\n\n")
	}
	return out.Bytes()
}

// breakToolCalls turns finish_reason tool_calls into stop and drops the id
// of every streamed tool-call fragment.
func breakToolCalls(doc map[string]any) {
	cs, _ := doc["choices"].([]any)
	for _, ch := range cs {
		m, _ := ch.(map[string]any)
		if m == nil {
			continue
		}
		if m["finish_reason"] == "tool_calls" {
			m["finish_reason"] = "stop"
		}
		delta, _ := m["delta"].(map[string]any)
		calls, _ := delta["tool_calls"].([]any)
		for _, c := range calls {
			if cm, ok := c.(map[string]any); ok {
				delete(cm, "id")
			}
		}
	}
}

// countOneChoice rewrites a usage object to count one of n choices.
func countOneChoice(usage any, n int) {
	u, ok := usage.(map[string]any)
	if !ok || n < 2 {
		return
	}
	p, err1 := number(u["prompt_tokens"])
	c, err2 := number(u["completion_tokens"])
	if err1 != nil || err2 != nil {
		return
	}
	c /= int64(n)
	u["completion_tokens"] = json.Number(strconv.FormatInt(c, 10))
	u["total_tokens"] = json.Number(strconv.FormatInt(p+c, 10))
}

// cacheEverything rewrites a usage object to claim all but the last prompt
// token as cached.
func cacheEverything(usage any) {
	u, ok := usage.(map[string]any)
	if !ok {
		return
	}
	p, err := number(u["prompt_tokens"])
	if err != nil || p < 2 {
		return
	}
	u["prompt_tokens_details"] = map[string]any{"cached_tokens": json.Number(strconv.FormatInt(p-1, 10))}
}

func decode(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// number reads a decoded JSON integer.
func number(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%v is not a number", v)
	}
	return n.Int64()
}

// encode re-encodes a decoded document; one that came from JSON always
// encodes, so an error leaves an empty object rather than a panic.
func encode(m map[string]any) []byte {
	out, err := json.Marshal(m)
	if err != nil {
		return []byte("{}")
	}
	return out
}

// TestCIRunsEveryBrokenMode checks that .ci/run's self-test runs the suite
// against every broken mode, and only against modes that exist.
func TestCIRunsEveryBrokenMode(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`(?s)\nbroken_modes=\((.*?)\n\)`).FindSubmatch(data)
	if list == nil {
		t.Fatal(".ci/run has no broken_modes=( ... ) list")
	}
	var ci []string
	for _, m := range regexp.MustCompile(`"([a-z-]+)\|[^"]+"`).FindAllSubmatch(list[1], -1) {
		ci = append(ci, string(m[1]))
	}
	want := slices.Clone(brokenModes)
	slices.Sort(ci)
	slices.Sort(want)
	if !slices.Equal(ci, want) {
		t.Errorf(".ci/run's broken_modes are %v; broken_test.go's are %v", ci, want)
	}
}
