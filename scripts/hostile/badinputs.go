package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// badInput is one request that must be refused with a 4xx in OpenAI's
// error shape.
type badInput struct {
	name   string
	method string // POST when empty
	path   string // /v1/chat/completions when empty
	body   []byte
	header map[string]string // "Host" sets the request's Host
	// auth replaces the Authorization header ("-" drops it).
	auth string
	// status is the status wanted; 0 takes any 4xx.
	status int
	// code is the error code wanted, when set.
	code string
	// raw sends the request on a connection of its own and reads the
	// answer while the body is still going out, as curl does: a server
	// that answers a declared-too-large body at once closes the connection
	// under a client that only reads once it has written everything.
	raw bool
}

// Shapes of the requests the corpus bends.
const (
	model    = `"rill-tiny"`
	messages = `[{"role":"user","content":"Hi"}]`
)

// obj builds a JSON object from key, raw value pairs, in order.
func obj(kv ...string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", kv[i], kv[i+1])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// chat is a valid chat body (4 tokens) with kv set or replaced; a value
// "" drops the key.
func chat(kv ...string) []byte {
	return merge([]string{"model", model, "messages", messages, "max_tokens", "4"}, kv)
}

// completion is a valid completions body with kv set or replaced.
func completion(kv ...string) []byte {
	return merge([]string{"model", model, "prompt", `"Once upon a time"`, "max_tokens", "4"}, kv)
}

func merge(base, kv []string) []byte {
	out := append([]string(nil), base...)
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for j := 0; j+1 < len(out); j += 2 {
			if out[j] == kv[i] {
				out[j+1], found = kv[i+1], true
			}
		}
		if !found {
			out = append(out, kv[i], kv[i+1])
		}
	}
	var kept []string
	for j := 0; j+1 < len(out); j += 2 {
		if out[j+1] != "" {
			kept = append(kept, out[j], out[j+1])
		}
	}
	return obj(kept...)
}

// nested is depth arrays around 1: [[[1]]].
func nested(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

// repeatJoin is n copies of item joined by commas, in brackets.
func repeatJoin(item string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(item) + 1))
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	b.WriteByte(']')
	return b.String()
}

// badInputs is the corpus: malformed JSON, wrong types, values out of
// range, huge numbers, invalid UTF-8, wrong methods and paths, bad
// authentication, oversized bodies, deep nesting, refused browsers.
func badInputs(port string) []badInput {
	c := func(name string, body []byte) badInput { return badInput{name: name, body: body, status: 400} }
	cmpl := func(name string, body []byte) badInput {
		return badInput{name: name, path: "/v1/completions", body: body, status: 400}
	}
	resp := func(name, body string) badInput {
		return badInput{name: "responses: " + name, path: "/v1/responses", body: []byte(body), status: 400}
	}
	invalidUTF8 := func(name, raw string) badInput {
		return c(name, []byte(`{"model":"rill-tiny","messages":[{"role":"user","content":"`+raw+`"}],"max_tokens":4}`))
	}
	in := []badInput{
		// Malformed JSON.
		c("empty body", nil),
		c("open brace", []byte(`{`)),
		c("close brace", []byte(`}`)),
		c("trailing comma", []byte(`{"model":"rill-tiny",}`)),
		c("missing colon", []byte(`{"model" "rill-tiny"}`)),
		c("single quotes", []byte(`{'model':'rill-tiny'}`)),
		c("trailing garbage", append(chat(), " trailing"...)),
		c("two objects", append(chat(), chat()...)),
		c("null body", []byte(`null`)),
		c("array body", []byte(`[]`)),
		c("string body", []byte(`"hello"`)),
		c("number body", []byte(`42`)),
		c("NaN", chat("temperature", "NaN")),
		c("Infinity", chat("temperature", "Infinity")),
		c("unterminated string", []byte(`{"model":"rill-ti`)),
		c("byte order mark", append([]byte("\xef\xbb\xbf"), chat()...)),
		c("comment", append([]byte(`/* x */`), chat()...)),
		c("control character in string", chat("messages", "[{\"role\":\"user\",\"content\":\"a\x01b\"}]")),
		c("invalid escape", chat("messages", `[{"role":"user","content":"\q"}]`)),
		c("bad unicode escape", chat("messages", `[{"role":"user","content":"\u12G4"}]`)),
		c("form-encoded body", []byte(`model=rill-tiny&messages=hi`)),
		// Invalid UTF-8.
		invalidUTF8("invalid UTF-8 byte 0xff", "a\xffb"),
		invalidUTF8("overlong UTF-8", "\xc0\xaf"),
		invalidUTF8("UTF-8 surrogate", "\xed\xa0\x80"),
		invalidUTF8("truncated UTF-8", "\xe2\x82"),
		c("invalid UTF-8 in a key", []byte("{\"model\":\"rill-tiny\",\"messages\":"+messages+",\"\xfe\":1}")),
		c("invalid UTF-8 in model", chat("model", "\"rill\xfe\"")),
		// Wrong types and missing fields.
		c("model a number", chat("model", "1")),
		c("model missing", chat("model", "")),
		c("model an array", chat("model", "[]")),
		c("messages missing", chat("messages", "")),
		c("messages a string", chat("messages", `"hi"`)),
		c("messages an object", chat("messages", `{}`)),
		c("messages empty", chat("messages", `[]`)),
		c("message a number", chat("messages", `[1]`)),
		c("message null", chat("messages", `[null]`)),
		c("role a number", chat("messages", `[{"role":5,"content":"Hi"}]`)),
		c("unknown role", chat("messages", `[{"role":"wizard","content":"Hi"}]`)),
		c("role missing", chat("messages", `[{"content":"Hi"}]`)),
		c("content a number", chat("messages", `[{"role":"user","content":5}]`)),
		c("content an object", chat("messages", `[{"role":"user","content":{"a":1}}]`)),
		c("image content part", chat("messages", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]`)),
		c("text part without text", chat("messages", `[{"role":"user","content":[{"type":"text"}]}]`)),
		c("max_tokens a string", chat("max_tokens", `"5"`)),
		c("max_tokens a fraction", chat("max_tokens", `1.5`)),
		c("max_tokens negative", chat("max_tokens", `-1`)),
		c("max_tokens a boolean", chat("max_tokens", `true`)),
		c("temperature a string", chat("temperature", `"hot"`)),
		c("temperature negative", chat("temperature", `-1`)),
		c("temperature 3", chat("temperature", `3`)),
		c("top_p 1.5", chat("top_p", `1.5`)),
		c("top_p negative", chat("top_p", `-0.1`)),
		c("n 0", chat("n", `0`)),
		c("n 129", chat("n", `129`)),
		c("n a string", chat("n", `"2"`)),
		c("stream a string", chat("stream", `"yes"`)),
		c("stream a number", chat("stream", `1`)),
		c("stop a number", chat("stop", `5`)),
		c("stop of numbers", chat("stop", `[1]`)),
		c("five stop strings", chat("stop", `["a","b","c","d","e"]`)),
		c("logprobs a string", chat("logprobs", `"true"`)),
		c("top_logprobs 21", chat("logprobs", `true`, "top_logprobs", `21`)),
		c("top_logprobs negative", chat("logprobs", `true`, "top_logprobs", `-1`)),
		c("presence_penalty 2.5", chat("presence_penalty", `2.5`)),
		c("frequency_penalty -3", chat("frequency_penalty", `-3`)),
		c("seed a string", chat("seed", `"x"`)),
		c("seed a fraction", chat("seed", `1.5`)),
		c("stream_options a string", chat("stream", "true", "stream_options", `"yes"`)),
		c("include_usage a string", chat("stream", "true", "stream_options", `{"include_usage":"yes"}`)),
		c("logit_bias value a string", chat("logit_bias", `{"1":"x"}`)),
		c("response_format unknown type", chat("response_format", `{"type":"bogus"}`)),
		c("tools a string", chat("tools", `"x"`)),
		c("tool without function", chat("tools", `[{"type":"function"}]`)),
		c("tool_choice a number", chat("tool_choice", `5`)),
		c("prediction content a number", chat("prediction", `{"type":"content","content":5}`)),
		c("tool message without tool_call_id", chat("messages", `[{"role":"user","content":"Hi"},{"role":"tool","content":"42"}]`)),
		// Huge numbers.
		c("max_tokens 1e400", chat("max_tokens", `1e400`)),
		c("max_tokens beyond int64", chat("max_tokens", `99999999999999999999`)),
		c("max_tokens beyond the context", chat("max_tokens", `3000`)),
		c("seed 1e30", chat("seed", `1e30`)),
		c("seed below int64", chat("seed", `-9223372036854775809`)),
		c("temperature 1e308", chat("temperature", `1e308`)),
		c("n 1e10", chat("n", `1e10`)),
		c("top_logprobs beyond uint64", chat("logprobs", "true", "top_logprobs", `99999999999999999999`)),
		// Legacy completions.
		cmpl("prompt a number", completion("prompt", `5`)),
		cmpl("prompt an object", completion("prompt", `{}`)),
		cmpl("prompt empty array", completion("prompt", `[]`)),
		cmpl("prompt token -1", completion("prompt", `[-1]`)),
		cmpl("prompt token beyond the vocabulary", completion("prompt", `[99999999]`)),
		cmpl("prompt token a fraction", completion("prompt", `[1.5]`)),
		cmpl("prompt of arrays of strings", completion("prompt", `[["a"]]`)),
		cmpl("prompt mixed", completion("prompt", `["a",1]`)),
		cmpl("logprobs 6", completion("logprobs", `6`)),
		cmpl("best_of 2 with n 1", completion("best_of", `2`)),
		cmpl("echo a string", completion("echo", `"yes"`)),
		cmpl("suffix a number", completion("suffix", `5`)),
		cmpl("prompt missing", completion("prompt", "")),
		cmpl("choices over --max-choices", completion("prompt", `["a","b","c"]`, "n", `100`)),
		// The Responses API.
		resp("input a number", `{"model":"rill-tiny","input":5}`),
		resp("input empty", `{"model":"rill-tiny","input":[]}`),
		resp("input_text without text", `{"model":"rill-tiny","input":[{"role":"user","content":[{"type":"input_text"}]}]}`),
		resp("unknown input item", `{"model":"rill-tiny","input":[{"type":"bogus"}]}`),
		resp("unknown item reference", `{"model":"rill-tiny","input":[{"type":"item_reference","id":"msg_nope"}]}`),
		resp("unknown previous_response_id", `{"model":"rill-tiny","input":"hi","previous_response_id":"resp_nope"}`),
		resp("1 MiB previous_response_id", `{"model":"rill-tiny","input":"hi","previous_response_id":"`+strings.Repeat("r", 1<<20)+`"}`),
		resp("max_output_tokens -1", `{"model":"rill-tiny","input":"hi","max_output_tokens":-1}`),
		resp("metadata value a number", `{"model":"rill-tiny","input":"hi","metadata":{"a":5}}`),
		resp("invalid UTF-8 input", "{\"model\":\"rill-tiny\",\"input\":\"a\xffb\"}"),
		resp("background without the store", `{"model":"rill-tiny","input":"hi","background":true,"store":false}`),
		{name: "responses unknown model", path: "/v1/responses", body: []byte(`{"model":"nope","input":"hi"}`), status: 404, code: "model_not_found"},
		{name: "GET an unknown response", method: "GET", path: "/v1/responses/resp_nope", status: 404},
		{name: "GET a 64 KiB response id", method: "GET", path: "/v1/responses/" + strings.Repeat("r", 64<<10), status: 404},
		{name: "DELETE an unknown response", method: "DELETE", path: "/v1/responses/resp_nope", status: 404},
		{name: "PUT responses", method: "PUT", path: "/v1/responses", body: []byte(`{}`), status: 405},
		// Unknown models.
		{name: "unknown model", body: chat("model", `"nope"`), status: 404, code: "model_not_found"},
		{name: "1 MiB model name", body: chat("model", `"`+strings.Repeat("m", 1<<20)+`"`), status: 404, code: "model_not_found"},
		// Methods and paths.
		{name: "GET chat without upgrade", method: "GET", status: 405},
		{name: "PUT chat", method: "PUT", body: chat(), status: 405},
		{name: "DELETE completions", method: "DELETE", path: "/v1/completions", status: 405},
		{name: "PATCH models", method: "PATCH", path: "/v1/models", status: 405},
		{name: "POST models", path: "/v1/models", body: chat(), status: 405},
		{name: "POST health", path: "/health", body: chat(), status: 405},
		{name: "unknown method", method: "FROB", status: 405},
		{name: "unknown path", method: "GET", path: "/v1/nope", status: 404},
		{name: "v2 path", path: "/v2/chat/completions", body: chat(), status: 404},
		{name: "trailing slash", path: "/v1/chat/completions/", body: chat(), status: 404},
		{name: "dot-dot path", method: "GET", path: "/v1/../../etc/passwd", status: 404},
		{name: "unknown model path", method: "GET", path: "/v1/models/nope", status: 404, code: "model_not_found"},
		{name: "64 KiB path", method: "GET", path: "/v1/" + strings.Repeat("p", 64<<10), status: 404},
		{name: "64 KiB page path", method: "GET", path: "/page/" + strings.Repeat("p", 64<<10), status: 404},
		{name: "64 KiB model path", method: "GET", path: "/v1/models/" + strings.Repeat("p", 64<<10), status: 404},
		{name: "upgrade without key", method: "GET", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}, status: 400},
		{name: "upgrade of version 8", method: "GET", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}},
		{name: "upgrade on models", method: "GET", path: "/v1/models/x", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, status: 404},
		// Authentication.
		{name: "no key", auth: "-", body: chat(), status: 401},
		{name: "wrong key", auth: "Bearer sk-wrong", body: chat(), status: 401},
		{name: "Basic scheme", auth: "Basic c2s6c2s=", body: chat(), status: 401},
		{name: "empty bearer", auth: "Bearer ", body: chat(), status: 401},
		{name: "bearer without space", auth: "Bearer" + hostileKey, body: chat(), status: 401},
		{name: "key with a suffix", auth: "Bearer " + hostileKey + "x", body: chat(), status: 401},
		{name: "key prefix", auth: "Bearer " + hostileKey[:len(hostileKey)-1], body: chat(), status: 401},
		{name: "metrics without key", method: "GET", path: "/metrics", auth: "-", status: 401},
		{name: "models without key", method: "GET", path: "/v1/models", auth: "-", status: 401},
		{name: "upgrade with a wrong key protocol", method: "GET", auth: "-", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "openai-insecure-api-key.sk-wrong"}, status: 401},
		// Sizes and nesting.
		{name: "17 MiB body", raw: true, body: chat("messages", `[{"role":"user","content":"`+strings.Repeat("a", 17<<20)+`"}]`), status: 413},
		{name: "17 MiB chunked body", body: chat("messages", `[{"role":"user","content":"`+strings.Repeat("a", 17<<20)+`"}]`), header: map[string]string{"Transfer-Encoding": "chunked"}, status: 413},
		c("65 deep", chat("stop", nested(65))),
		c("100,000 deep", chat("stop", nested(100000))),
		c("300,000 values", []byte(`{"model":"rill-tiny","prompt":`+repeatJoin("1", 300000)+`}`)),
		c("129 tools", chat("tools", repeatJoin(`{"type":"function","function":{"name":"f"}}`, 129))),
		c("300,000 logit_bias keys", chat("logit_bias", logitBias(300000))),
		{name: "gzip-encoded body", body: gzipped(chat()), header: map[string]string{"Content-Encoding": "gzip"}},
		// Browsers.
		{name: "cross-site text/plain POST", body: chat(), header: map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, status: 403, code: "origin_not_allowed"},
		{name: "Origin null", body: chat(), header: map[string]string{"Origin": "null"}, status: 403, code: "origin_not_allowed"},
		{name: "DNS rebinding Host", body: chat(), header: map[string]string{"Host": "attacker.example:" + port, "Origin": "http://attacker.example:" + port}, status: 403, code: "host_not_allowed"},
		{name: "foreign Host", method: "GET", path: "/v1/models", header: map[string]string{"Host": "evil.example"}, status: 403, code: "host_not_allowed"},
		{name: "nip.io Host", method: "GET", path: "/v1/models", header: map[string]string{"Host": "127.0.0.1.nip.io:" + port}, status: 403, code: "host_not_allowed"},
		{name: "cross-site WebSocket", method: "GET", header: map[string]string{"Origin": "http://evil.example", "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, status: 403, code: "origin_not_allowed"},
		{name: "cross-site preflight", method: "OPTIONS", auth: "-", header: map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, status: 403},
	}
	return in
}

// gzipped is b compressed: rill does not decode request bodies, so this is
// not JSON to it (a 400, or a 415 would say it as well).
func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// hostileKey is the API key of the shared server.
const hostileKey = "sk-hostile-0123456789"

func logitBias(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":1`, i)
	}
	b.WriteByte('}')
	return b.String()
}

// errorShape checks that body is exactly {"error":{"message","type","param","code"}}
// with a non-empty message, a string type and param and code strings or null.
func errorShape(body []byte) error {
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(body, &outer); err != nil {
		return fmt.Errorf("not JSON: %q", clipQ(body))
	}
	if len(outer) != 1 || outer["error"] == nil {
		return fmt.Errorf("not {\"error\":{…}}: %q", clipQ(body))
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &inner); err != nil {
		return fmt.Errorf("error is not an object: %q", clipQ(body))
	}
	keys := make([]string, 0, len(inner))
	for k := range inner {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "code,message,param,type" {
		return fmt.Errorf("error keys %v, want code, message, param, type", keys)
	}
	var msg, typ string
	if json.Unmarshal(inner["message"], &msg) != nil || msg == "" {
		return fmt.Errorf("message is not a non-empty string: %s", inner["message"])
	}
	if json.Unmarshal(inner["type"], &typ) != nil || typ == "" {
		return fmt.Errorf("type is not a non-empty string: %s", inner["type"])
	}
	for _, k := range []string{"param", "code"} {
		v := inner[k]
		var s *string
		if json.Unmarshal(v, &s) != nil {
			return fmt.Errorf("%s is neither a string nor null: %s", k, v)
		}
	}
	return nil
}

// errorCode reads the code of an error body ("" when null or absent).
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code *string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == nil {
		return ""
	}
	return *e.Error.Code
}

func clipQ(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// maxErrorBytes bounds an error response: echoes are capped (256 bytes a
// value, 2 KiB a message).
const maxErrorBytes = 4 << 10

// sendBad sends one bad input and judges the answer.
func sendBad(ctx context.Context, h *harness, in badInput) (status int, took time.Duration, err error) {
	method, path := in.method, in.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/chat/completions"
	}
	var body io.Reader
	if in.body != nil {
		body = bytes.NewReader(in.body)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.srv.url(path), body)
	if err != nil {
		return 0, 0, err
	}
	if in.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch in.auth {
	case "":
		h.srv.auth(req.Header)
	case "-":
	default:
		req.Header.Set("Authorization", in.auth)
	}
	for k, v := range in.header {
		switch k {
		case "Host":
			req.Host = v
		case "Transfer-Encoding":
			req.ContentLength = -1
			req.Body = io.NopCloser(body) // hides the length: chunked
		default:
			req.Header.Set(k, v)
		}
	}
	start := time.Now()
	var resp *http.Response
	if in.raw {
		resp, err = doRaw(h, req, in.body)
	} else {
		resp, err = h.noKeep.Do(req)
	}
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	took = time.Since(start)
	if err != nil {
		return resp.StatusCode, took, err
	}
	switch {
	case resp.StatusCode >= 500:
		return resp.StatusCode, took, fmt.Errorf("%d, a server error: %s", resp.StatusCode, clipQ(got))
	case resp.StatusCode < 400:
		return resp.StatusCode, took, fmt.Errorf("%d, accepted: %s", resp.StatusCode, clipQ(got))
	case in.status != 0 && resp.StatusCode != in.status:
		return resp.StatusCode, took, fmt.Errorf("%d, want %d: %s", resp.StatusCode, in.status, clipQ(got))
	}
	if err := errorShape(got); err != nil {
		return resp.StatusCode, took, fmt.Errorf("%d: %w", resp.StatusCode, err)
	}
	if in.code != "" && errorCode(got) != in.code {
		return resp.StatusCode, took, fmt.Errorf("%d with code %q, want %q", resp.StatusCode, errorCode(got), in.code)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return resp.StatusCode, took, fmt.Errorf("Content-Type %q", ct)
	}
	if len(got) > maxErrorBytes {
		return resp.StatusCode, took, fmt.Errorf("%d: the error is %d bytes (echo not capped)", resp.StatusCode, len(got))
	}
	return resp.StatusCode, took, nil
}

// doRaw sends req with body on a new connection, reading the answer while
// the body is written.
func doRaw(h *harness, req *http.Request, body []byte) (*http.Response, error) {
	conn, err := dial(h)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", req.Method, req.URL.RequestURI(), req.Host, len(body))
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	go func() {
		_, _ = conn.Write(head.Bytes())
		_, _ = conn.Write(body) // fails once the server has answered and closed
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{resp.Body, conn}
	return resp, nil
}

// checkBadInputs sends the corpus, a few at a time, and wants each one
// refused alone: a 4xx in OpenAI's shape, within seconds.
func checkBadInputs(ctx context.Context, h *harness) (string, error) {
	_, port, _ := strings.Cut(h.srv.addr, ":")
	corpus := badInputs(port)
	type result struct {
		status int
		took   time.Duration
		err    error
	}
	results := make([]result, len(corpus))
	sem := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range corpus {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				s, t, err := sendBad(ctx, h, corpus[i])
				results[i] = result{s, t, err}
			}()
		}
		for range cap(sem) {
			sem <- struct{}{}
		}
	}()
	<-done
	var fails []string
	statuses := map[int]int{}
	var slowest time.Duration
	slowName := ""
	for i, r := range results {
		statuses[r.status]++
		if r.took > slowest {
			slowest, slowName = r.took, corpus[i].name
		}
		if r.err != nil {
			fails = append(fails, corpus[i].name+": "+r.err.Error())
		} else if r.took > 5*time.Second {
			fails = append(fails, fmt.Sprintf("%s: answered after %v", corpus[i].name, r.took))
		}
	}
	var hist []string
	for _, s := range sortedKeys(statuses) {
		hist = append(hist, fmt.Sprintf("%d×%d", statuses[s], s))
	}
	figures := fmt.Sprintf("%d inputs: %s; slowest %v (%s)", len(corpus), strings.Join(hist, " "), slowest.Round(time.Millisecond), slowName)
	if len(fails) > 0 {
		return figures, fmt.Errorf("%d of %d inputs not refused in OpenAI's shape:\n%s", len(fails), len(corpus), strings.Join(fails, "\n"))
	}
	return figures, nil
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
