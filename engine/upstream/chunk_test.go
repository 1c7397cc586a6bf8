package upstream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rill/internal/shared"
)

// fast decodes with the scanner alone and reports whether it handled data.
func fast(data []byte) (wireChunk, bool) {
	var ch wireChunk
	s := scanner{b: data}
	ok := s.chunk(&ch) && s.end()
	return ch, ok
}

// same checks that decodeChunk and encoding/json agree on data, and
// returns whether the scanner handled it itself.
func same(t *testing.T, data []byte) bool {
	t.Helper()
	var got, want wireChunk
	gotErr := decodeChunk(data, &got)
	wantErr := json.Unmarshal(data, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Errorf("%s: decodeChunk err %v, encoding/json err %v", data, gotErr, wantErr)
		return false
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("%s:\n got %s\nwant %s", data, g, w)
	}
	_, handled := fast(data)
	return handled
}

func TestDecodeChunkCases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		handled bool // the scanner decodes it without encoding/json
	}{
		{`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"created":1,"id":"x"}`, true},
		{` { "choices" : [ { "index" : 2 , "text" : "a\nb\"c\\d\/e\t\u00e9\ud83d\ude00" , "finish_reason" : "stop" } ] } `, true},
		{`{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2.5}}}`, true},
		{`{"choices":[],"usage":{"prompt_tokens":46},"timings":{"cache_n":45,"draft_n":4,"draft_n_accepted":3}}`, true},
		{`{"choices":null,"usage":null,"timings":null}`, true},
		{`{"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]}}]}`, true},
		{`{"choices":[{"index":0,"text":"x","logprobs":null}]}`, true},
		{`{"error":{"code":400,"message":"too long","type":"x"}}`, true},
		{`{"a":[1,-2.5e+3,true,false,null,{"b":[]},"\u0041"],"choices":[{"index":1,"text":"y"}]}`, true},
		{`{}`, true},
		{`{"choices":[{"index":0,"delta":{"content":"Hi"}},{"index":1,"delta":{"content":"Ho"}}]}`, true},
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`, true},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\":"}}]}}]}`, true},
		{`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, true},
		// What the scanner leaves to encoding/json, with the same result.
		{`{"Choices":[{"index":0,"text":"case"}]}`, false},
		{`{"choices":[{"Index":1,"text":"case"}]}`, false},
		{`{"choices":[{"index":0,"delta":{"Content":"case"}}]}`, false},
		{`{"choices":[{"index":0,"text":"\ud800 lone"}]}`, false},
		{"{\"choices\":[{\"index\":0,\"text\":\"bad \xff utf8\"}]}", false},
		{`{"cho\u0069ces":[{"index":0,"text":"escaped key"}]}`, false},
		{`{"choices":[{"index":1e0,"text":"float index"}]}`, false},
		{`{"choices":[{"index":-1,"text":"negative"}]}`, false},
		{`{"choices":[{"index":0,"text":"a"}],"choices":[{"index":1,"text":"b"}]}`, true},
		// Not JSON: both refuse.
		{`{"choices":[{"index":01,"text":"x"}]}`, false},
		{`{"choices":[`, false},
		{`{"choices":[{"index":0,"text":"x"}]} trailing`, false},
		{`{"a":tru}`, false},
		{`{"a":[1,,2]}`, false},
		{`{"a":1.}`, false},
		{`{"a":"\x"}`, false},
		{"{\"a\":\"ctl\x01\"}", false},
		{`{"choices":[{"index":0,"text":5}]}`, false},
		{`{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, false},
		{`null`, false},
		{``, false},
	}
	for _, tc := range cases {
		if handled := same(t, []byte(tc.in)); handled != tc.handled {
			t.Errorf("%s: handled by the scanner %v, want %v", tc.in, handled, tc.handled)
		}
	}
}

// TestDecodeChunkRecordings decodes every chunk and response llama.cpp
// recorded both ways: the scanner must handle them all, with the same result.
func TestDecodeChunkRecordings(t *testing.T) {
	t.Parallel()
	root := shared.Path(t, "refdata", "llamacpp")
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.body"))
	more, _ := filepath.Glob(filepath.Join(root, "c_spec", "*", "*.body"))
	n := 0
	for _, f := range append(files, more...) {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var payloads [][]byte
		if strings.HasPrefix(string(body), "data: ") {
			for _, line := range strings.Split(string(body), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
					payloads = append(payloads, []byte(d))
				}
			}
		} else if json.Valid(body) && strings.Contains(string(body), `"choices"`) {
			payloads = append(payloads, body)
		}
		for _, p := range payloads {
			if !same(t, p) {
				t.Errorf("%s: the scanner gave up on %s", filepath.Base(f), p)
			}
			n++
		}
	}
	if n < 100 {
		t.Errorf("only %d payloads found", n)
	}
}

func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" little"}}],"created":1796030631,"id":"chatcmpl-oxs00JcfYTBX6eWTkCO8YW2aieeJdkFn","model":"stories260K","system_fingerprint":"b10587-3f545becc","object":"chat.completion.chunk"}`)
	for _, bc := range []struct {
		name   string
		decode func([]byte, *wireChunk) error
	}{{"scanner", decodeChunk}, {"encoding-json", func(d []byte, ch *wireChunk) error { return json.Unmarshal(d, ch) }}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				var ch wireChunk
				if err := bc.decode(data, &ch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
