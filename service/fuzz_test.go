package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"unicode/utf8"
)

// Fuzz targets over the request decoders (CI runs each for a few seconds;
// their seed corpora are in testdata/fuzz). Whatever the input, a decoder
// answers with a job or a client error in OpenAI's shape: never a panic,
// a 5xx, or an error that echoes more than a few hundred bytes of input.

// checkClientError fails unless e is a well-formed 4xx error.
func checkClientError(t *testing.T, e *apiError) {
	t.Helper()
	if e.Status < 400 || e.Status >= 500 {
		t.Fatalf("status %d for client input: %+v", e.Status, e)
	}
	body := e.appendJSON(nil)
	if !json.Valid(body) || !utf8.Valid(body) {
		t.Fatalf("error is not valid JSON: %q", body)
	}
	if len(body) > maxMessageBytes+2*maxEchoBytes+200 {
		t.Fatalf("error of %d bytes", len(body))
	}
	if e.Message == "" || e.Type == "" {
		t.Fatalf("error without message or type: %s", body)
	}
}

// FuzzRequest feeds POST bodies to the request decoder: validation against
// the OpenAPI schema, decoding, conversion to a job, the choices cap.
func FuzzRequest(f *testing.F) {
	f.Add(false, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add(false, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"logprobs":true,"top_logprobs":3}`))
	f.Add(true, []byte(`{"model":"m","prompt":[[1,2],[3]],"n":3,"max_tokens":5}`))
	f.Add(true, []byte(`{"model":"m","prompt":["a","b"],"best_of":2,"n":2,"logprobs":2}`))
	s := New(Options{Engine: &fakeEngine{}, Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, completions bool, body []byte) {
		path := "/v1/chat/completions"
		if completions {
			path = "/v1/completions"
		}
		p, e := s.parse(context.Background(), path, body)
		if e != nil {
			checkClientError(t, e)
			return
		}
		if len(p.reqs) == 0 || p.n < 1 || p.choices() > s.maxChoices {
			t.Fatalf("accepted a job of %d prompts × n %d", len(p.reqs), p.n)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
	})
}

// FuzzWSMessage feeds client messages to the WebSocket message decoder.
func FuzzWSMessage(f *testing.F) {
	f.Add([]byte(`{"type":"create","request_id":"r1","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`))
	f.Add([]byte(`{"type":"cancel","request_id":"r1"}`))
	f.Add([]byte(`{"type":"create","request_id":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, e := parseWSMessage(data)
		if e != nil {
			checkClientError(t, e)
			return
		}
		if cmd.id == "" || len(cmd.id) > maxRequestIDLen {
			t.Fatalf("accepted request_id %q", cmd.id)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("accepted a message that is not a JSON object: %q", data)
		}
	})
}
