package upstream_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"rill/engine/upstream"
	"rill/service"
)

// recorder keeps a copy of every response body its handler writes to a
// POST (health checks are not kept).
type recorder struct {
	h      http.Handler
	mu     sync.Mutex
	bodies []*bytes.Buffer
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rec.h.ServeHTTP(w, r)
		return
	}
	buf := &bytes.Buffer{}
	rec.mu.Lock()
	rec.bodies = append(rec.bodies, buf)
	rec.mu.Unlock()
	rec.h.ServeHTTP(&teeWriter{ResponseWriter: w, buf: buf}, r)
}

func (rec *recorder) last() []byte {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.bodies[len(rec.bodies)-1].Bytes()
}

type teeWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.buf.Write(p)
	return t.ResponseWriter.Write(p)
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// toolFragments returns every delta.tool_calls element of a stream's
// chunks, per choice, in order.
func toolFragments(t *testing.T, events [][]byte) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, e := range events {
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(e, &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			out = append(out, ch.Delta.ToolCalls...)
		}
	}
	return out
}

// TestToolsBehindRill: tools, tool_choice, response_format and logit_bias
// pass through to an upstream rill, whose tool-call fragments come back
// unchanged (ids and indices as it sent them), with finish_reason
// tool_calls; its refusals reach the client as 400s.
func TestToolsBehindRill(t *testing.T) {
	t.Parallel()
	inner := &recorder{h: service.New(service.Options{Engine: nativeEngine(t, "tiny"), Logger: discard})}
	innerURL, _ := serve(t, inner)
	url := front(t, newUpstream(t, "tiny", upstream.Rill, innerURL))

	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}}]`
	body := `{"model":"tiny","messages":[{"role":"user","content":"Weather in Oslo?"}],` + tools +
		`,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,"temperature":0,"max_tokens":300`

	got := post(t, url, "/v1/chat/completions", body+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if got.status != http.StatusOK || !got.done {
		t.Fatalf("status %d, done %v: %s", got.status, got.done, got.body)
	}
	innerEvents, _ := readSSE(t, bytes.NewReader(inner.last()))
	front, back := toolFragments(t, got.events), toolFragments(t, innerEvents)
	if len(front) == 0 || !reflect.DeepEqual(front, back) {
		t.Fatalf("tool-call fragments relayed as\n%s\nthe upstream sent\n%s", front, back)
	}
	var header struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(front[0], &header); err != nil || !strings.HasPrefix(header.ID, "call_") {
		t.Fatalf("first fragment %s", front[0])
	}
	last := decode(t, got.events[len(got.events)-2]) // before the usage chunk
	if fr := last.Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Fatalf("finish_reason %v in %s", fr, got.events[len(got.events)-2])
	}

	whole := post(t, url, "/v1/chat/completions", body+`}`)
	var res struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(whole.body, &res); err != nil {
		t.Fatal(err)
	}
	calls := res.Choices[0].Message.ToolCalls
	if whole.status != http.StatusOK || len(calls) != 1 || calls[0].Function.Name != "get_weather" ||
		res.Choices[0].Message.Content != nil || res.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("status %d: %s", whole.status, whole.body)
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(calls[0].Function.Arguments), &args); err != nil || len(args["city"]) > 12 {
		t.Fatalf("arguments %q: %v", calls[0].Function.Arguments, err)
	}

	obj := post(t, url, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"JSON please"}],"response_format":{"type":"json_schema","json_schema":{"name":"ok","schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}},"temperature":1,"seed":2,"max_tokens":800}`)
	var parsed map[string]bool
	if err := json.Unmarshal([]byte(texts(t, obj)[0]), &parsed); obj.status != http.StatusOK || err != nil || len(parsed) != 1 {
		t.Fatalf("json_schema through the upstream: status %d, %v: %s", obj.status, err, obj.body)
	}

	refused := post(t, url, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"logit_bias":{"100000":5}}`)
	if refused.status != http.StatusBadRequest || !strings.Contains(string(refused.body), "512") {
		t.Fatalf("a bias the upstream refuses: status %d: %s", refused.status, refused.body)
	}
}
