package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheckResponseStreamFunctionCalls: a stream whose function_call
// events add up passes; arguments that do not, deltas of an item that is
// not open, and an output that moved an item are each a problem.
func TestCheckResponseStreamFunctionCalls(t *testing.T) {
	t.Parallel()
	response := func(status, output, usage string) string {
		return `{"id":"resp_1","object":"response","created_at":1,"status":"` + status + `","error":null,"incomplete_details":null,` +
			`"model":"m","output":[` + output + `],"usage":` + usage + `}`
	}
	const (
		msg     = `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Hi"}]}`
		callNew = `{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"f","arguments":""}`
		call    = `{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}`
		usage   = `{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`
	)
	good := []string{
		`{"type":"response.created","sequence_number":0,"response":` + response("in_progress", "", "null") + `}`,
		`{"type":"response.in_progress","sequence_number":1,"response":` + response("in_progress", "", "null") + `}`,
		`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
		`{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`,
		`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}`,
		`{"type":"response.output_text.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hi"}`,
		`{"type":"response.content_part.done","sequence_number":6,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"Hi"}}`,
		`{"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":` + msg + `}`,
		`{"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":` + callNew + `}`,
		`{"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":1,"delta":"{\"a\":"}`,
		`{"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_1","output_index":1,"delta":"1}"}`,
		`{"type":"response.function_call_arguments.done","sequence_number":11,"item_id":"fc_1","output_index":1,"name":"f","arguments":"{\"a\":1}"}`,
		`{"type":"response.output_item.done","sequence_number":12,"output_index":1,"item":` + call + `}`,
		`{"type":"response.completed","sequence_number":13,"response":` + response("completed", msg+","+call, usage) + `}`,
	}
	transcript := func(evs []string) *ResponseTranscript {
		tr := &ResponseTranscript{Transport: "SSE", Status: 200}
		for _, raw := range evs {
			e, err := parseResponseEvent([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			tr.Events = append(tr.Events, e)
		}
		return tr
	}
	if p := CheckResponseStream(transcript(good)); len(p) != 0 {
		t.Fatalf("a good stream has problems: %q", p)
	}
	with := func(i int, ev string) []string {
		evs := append([]string(nil), good...)
		evs[i] = ev
		return evs
	}
	tests := []struct {
		name string
		evs  []string
		want string
	}{
		{"done differs from the deltas", with(11, `{"type":"response.function_call_arguments.done","sequence_number":11,"item_id":"fc_1","output_index":1,"name":"f","arguments":"{\"a\":2}"}`),
			"deltas add up to"},
		{"a delta of another item", with(10, `{"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_9","output_index":1,"delta":"1}"}`),
			"not an open function_call"},
		{"arguments in the added item", with(8, `{"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":`+strings.Replace(callNew, `"arguments":""`, `"arguments":"{}"`, 1)+`}`),
			"they come in deltas"},
		{"the final output moved the call", with(13, `{"type":"response.completed","sequence_number":13,"response":`+response("completed", call+","+msg, usage)+`}`),
			"at index 0, where the stream added item msg_1"},
	}
	for _, tt := range tests {
		p := CheckResponseStream(transcript(tt.evs))
		if !strings.Contains(strings.Join(p, "\n"), tt.want) {
			t.Errorf("%s: problems %q, want one saying %q", tt.name, p, tt.want)
		}
	}
}

// TestCheckResponseStreamReasoning: a stream with a reasoning item before
// its message passes; reasoning deltas outside their part, a done text that
// is not the deltas' and a final item that is not either are problems.
func TestCheckResponseStreamReasoning(t *testing.T) {
	t.Parallel()
	response := func(status, output, usage string) string {
		return `{"id":"resp_1","object":"response","created_at":1,"status":"` + status + `","error":null,"incomplete_details":null,` +
			`"model":"m","output":[` + output + `],"usage":` + usage + `}`
	}
	const (
		rs    = `{"id":"rs_1","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"Hm."}]}`
		msg   = `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Hi"}]}`
		usage = `{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":2}}`
	)
	good := []string{
		`{"type":"response.created","sequence_number":0,"response":` + response("in_progress", "", "null") + `}`,
		`{"type":"response.in_progress","sequence_number":1,"response":` + response("in_progress", "", "null") + `}`,
		`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","status":"in_progress","summary":[],"content":[]}}`,
		`{"type":"response.content_part.added","sequence_number":3,"item_id":"rs_1","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":""}}`,
		`{"type":"response.reasoning_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"Hm"}`,
		`{"type":"response.reasoning_text.delta","sequence_number":5,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"."}`,
		`{"type":"response.reasoning_text.done","sequence_number":6,"item_id":"rs_1","output_index":0,"content_index":0,"text":"Hm."}`,
		`{"type":"response.content_part.done","sequence_number":7,"item_id":"rs_1","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":"Hm."}}`,
		`{"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":` + rs + `}`,
		`{"type":"response.output_item.added","sequence_number":9,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
		`{"type":"response.content_part.added","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`,
		`{"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hi"}`,
		`{"type":"response.output_text.done","sequence_number":12,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Hi"}`,
		`{"type":"response.content_part.done","sequence_number":13,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"Hi"}}`,
		`{"type":"response.output_item.done","sequence_number":14,"output_index":1,"item":` + msg + `}`,
		`{"type":"response.completed","sequence_number":15,"response":` + response("completed", rs+","+msg, usage) + `}`,
	}
	transcript := func(evs []string) *ResponseTranscript {
		tr := &ResponseTranscript{Transport: "SSE", Status: 200}
		for _, raw := range evs {
			e, err := parseResponseEvent([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			tr.Events = append(tr.Events, e)
		}
		return tr
	}
	if p := CheckResponseStream(transcript(good)); len(p) != 0 {
		t.Fatalf("a good stream has problems: %q", p)
	}
	final, _, err := transcript(good).Final()
	if err != nil || final.ReasoningText() != "Hm." || final.OutputText() != "Hi" {
		t.Fatalf("final: reasoning %q, output %q, %v", final.ReasoningText(), final.OutputText(), err)
	}
	with := func(i int, ev string) []string {
		evs := append([]string(nil), good...)
		evs[i] = ev
		return evs
	}
	tests := []struct {
		name string
		evs  []string
		want string
	}{
		{"done differs from the deltas", with(6, `{"type":"response.reasoning_text.done","sequence_number":6,"item_id":"rs_1","output_index":0,"content_index":0,"text":"Hmm."}`),
			"reasoning_text.done of item rs_1"},
		{"a delta of a part not open", with(5, `{"type":"response.reasoning_text.delta","sequence_number":5,"item_id":"rs_9","output_index":0,"content_index":0,"delta":"."}`),
			"reasoning delta of part 0 of item rs_9"},
		{"the final item differs", with(15, `{"type":"response.completed","sequence_number":15,"response":`+
			response("completed", strings.Replace(rs, `"Hm."`, `"Hum."`, 1)+","+msg, usage)+`}`),
			"reasoning item rs_1 has text"},
	}
	for _, tt := range tests {
		p := CheckResponseStream(transcript(tt.evs))
		if !strings.Contains(strings.Join(p, "\n"), tt.want) {
			t.Errorf("%s: problems %q, want one saying %q", tt.name, p, tt.want)
		}
	}
}

// TestCheckResponsesUsage: the three counts OpenAI's schema requires must
// be there, numbers, and add up (docs/design.md §3 rule 12).
func TestCheckResponsesUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, usage string
		// problem is a substring one of the problems must contain; "" means none.
		problem string
	}{
		{"every count", `{"input_tokens":40,"output_tokens":4,"total_tokens":44,"input_tokens_details":{"cached_tokens":16,"cache_write_tokens":16},"output_tokens_details":{"reasoning_tokens":0}}`, ""},
		{"no details (llama.cpp's shape without cache counts)", `{"input_tokens":3,"output_tokens":4,"total_tokens":7}`,
			"input_tokens_details.cached_tokens is absent or null; OpenAI's schema requires it"},
		{"no cache_write_tokens (llama.cpp's shape)", `{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0}}`,
			"input_tokens_details.cache_write_tokens is absent or null"},
		{"no output details (a model that does not reason, as chat)", `{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0}}`,
			"output_tokens_details.reasoning_tokens is absent or null"},
		{"null reasoning_tokens", `{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":null}}`,
			"output_tokens_details.reasoning_tokens is absent or null"},
		{"read and written exceed the input", `{"input_tokens":40,"output_tokens":4,"total_tokens":44,"input_tokens_details":{"cached_tokens":32,"cache_write_tokens":16},"output_tokens_details":{"reasoning_tokens":0}}`,
			"cache_write_tokens 16 is outside [0, input_tokens 40 - cached_tokens 32]"},
		{"negative write", `{"input_tokens":40,"output_tokens":4,"total_tokens":44,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":-1},"output_tokens_details":{"reasoning_tokens":0}}`,
			"cache_write_tokens -1 is outside"},
		{"total", `{"input_tokens":40,"output_tokens":4,"total_tokens":45,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`,
			"total_tokens 45 != input_tokens 40 + output_tokens 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := ParseResponsesUsage([]byte(tt.usage))
			if err != nil {
				t.Fatal(err)
			}
			expectProblem(t, CheckResponsesUsage(u), tt.problem)
		})
	}
	if _, err := ParseResponsesUsage([]byte(`{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":1.5}}`)); err == nil ||
		!strings.Contains(err.Error(), "cache_write_tokens is 1.5, not an integer") {
		t.Errorf("a fractional cache_write_tokens: %v", err)
	}
}

// TestProbeResponsesShared learns what fresh inputs share on the Responses
// API from a server that answers as llama.cpp's does: its token-grained
// cache reuses the chat template's preamble, so every fresh input reports
// those tokens cached (15 of 217 in a run against llama.cpp). The cold rule
// then accepts that honest hit, where the old "0 on a cold input" failed it,
// and still names a warm hit passed off as cold.
func TestProbeResponsesShared(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// usage answers an input of words words; status, when not 200, the
		// status instead.
		usage  func(words int) string
		status int
		shared int
		reason string // a part of the reason; "" means learned
	}{
		{"a preamble of 15 tokens", func(words int) string {
			return fmt.Sprintf(`{"input_tokens":%d,"output_tokens":2,"total_tokens":%d,"input_tokens_details":{"cached_tokens":15}}`, 20+words, 22+words)
		}, 200, 15, ""},
		{"a chance match of the nonce on one input", func(words int) string {
			return fmt.Sprintf(`{"input_tokens":%d,"output_tokens":2,"total_tokens":%d,"input_tokens_details":{"cached_tokens":%d}}`, 20+words, 22+words, 15+words%2)
		}, 200, 16, ""},
		{"a count that grows with the input", func(words int) string {
			return fmt.Sprintf(`{"input_tokens":%d,"output_tokens":2,"total_tokens":%d,"input_tokens_details":{"cached_tokens":%d}}`, 20+words, 22+words, 19+words)
		}, 200, 0, "a count that grows with a fresh prompt's length"},
		{"no cached count", func(words int) string {
			return `{"input_tokens":9,"output_tokens":2,"total_tokens":11}`
		}, 200, 0, "reported no input_tokens_details.cached_tokens"},
		{"an error", nil, 500, 0, "answered 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body struct {
					Input string `json:"input"`
				}
				if r.URL.Path != ResponsesPath || json.NewDecoder(r.Body).Decode(&body) != nil {
					http.Error(w, `{"error":{"message":"bad"}}`, http.StatusBadRequest)
					return
				}
				if tt.status != 200 {
					http.Error(w, `{"error":{"message":"boom"}}`, tt.status)
					return
				}
				fmt.Fprintf(w, `{"id":"resp_1","object":"response","status":"completed","output":[],"usage":%s}`, tt.usage(len(strings.Fields(body.Input))))
			}))
			defer ts.Close()
			shared, reason := ProbeResponsesShared(context.Background(), NewTarget(ts.URL, "m", ""))
			if tt.reason == "" {
				if reason != "" || shared != tt.shared {
					t.Fatalf("shared %d (%s), want %d", shared, reason, tt.shared)
				}
				// A cold input of llama.cpp's reports the preamble, and passes.
				u := &Usage{PromptTokens: 217, CompletionTokens: 2, TotalTokens: 219, CachedTokens: intp(15)}
				expectProblem(t, CheckCold(u, ColdBound{Shared: shared}), "")
				u.CachedTokens = intp(216)
				expectProblem(t, CheckCold(u, ColdBound{Shared: shared}), "a cold 217-token prompt reported 216 tokens cached")
				return
			}
			if !strings.Contains(reason, tt.reason) {
				t.Fatalf("reason %q, want one saying %q", reason, tt.reason)
			}
		})
	}
}
