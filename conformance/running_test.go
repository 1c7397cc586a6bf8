package conformance

import (
	"fmt"
	"testing"
)

// runChunk is a chunk of choice 0 with one logprob entry (tokens 1) or
// none, finish reason finish ("" for null), and the running usage
// prompt/completion (a negative completion for "usage": null).
func runChunk(tokens int, finish string, prompt, completion int) string {
	lp := "null"
	if tokens > 0 {
		lp = `{"content":[{"token":"a","logprob":-1,"bytes":[97],"top_logprobs":[]}]}`
	}
	fr := "null"
	if finish != "" {
		fr = fmt.Sprintf("%q", finish)
	}
	usage := "null"
	if completion >= 0 {
		usage = fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, completion, prompt+completion)
	}
	return fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"logprobs":%s,"finish_reason":%s}],"usage":%s}`, lp, fr, usage)
}

func totalChunk(prompt, completion int) string {
	return fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion)
}

func TestCheckRunning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		chunks  []string
		want    RunningWant
		problem string // a substring one of the problems must contain; "" means none
	}{
		{"rising to the total", []string{runChunk(0, "", 5, 0), runChunk(1, "", 5, 1), runChunk(1, "", 5, 2), runChunk(0, "stop", 5, 3), totalChunk(5, 3)},
			RunningWant{Choices: 1, Logprobs: true}, ""},
		{"the total on every chunk", []string{runChunk(1, "", 5, 3), runChunk(1, "", 5, 3), runChunk(1, "length", 5, 3), totalChunk(5, 3)},
			RunningWant{Choices: 1, Logprobs: true}, "chunk 0's running completion_tokens is 3, but only 1 tokens were sent up to it"},
		{"the total on every chunk, without logprobs", []string{runChunk(0, "", 5, 4), runChunk(0, "", 5, 4), runChunk(0, "length", 5, 4), totalChunk(5, 4)},
			RunningWant{Choices: 1}, "every chunk with choices shows completion_tokens 4, the total"},
		{"a count that falls", []string{runChunk(1, "", 5, 1), runChunk(1, "", 5, 2), runChunk(0, "", 5, 1), runChunk(0, "stop", 5, 2), totalChunk(5, 2)},
			RunningWant{Choices: 1}, "chunk 2's running completion_tokens 1 is below chunk 1's 2"},
		{"frozen at zero", []string{runChunk(1, "", 5, 0), runChunk(1, "", 5, 0), runChunk(0, "stop", 5, 2), totalChunk(5, 2)},
			RunningWant{Choices: 1, Logprobs: true}, "chunk 0's running completion_tokens is 0, but 1 tokens were sent up to it"},
		{"the prompt unknown until the end", []string{runChunk(1, "", 0, 1), runChunk(1, "stop", 5, 2), totalChunk(5, 2)},
			RunningWant{Choices: 1}, "chunk 0's running prompt_tokens is 0, the request's is 5"},
		{"short of the total at the end", []string{runChunk(1, "", 5, 1), runChunk(0, "stop", 5, 1), totalChunk(5, 2)},
			RunningWant{Choices: 1}, "the last chunk with choices (chunk 1) shows prompt 5, completion 1, the total is prompt 5, completion 2"},
		{"past the total", []string{runChunk(1, "", 5, 3), runChunk(0, "stop", 5, 2), totalChunk(5, 2)},
			RunningWant{Choices: 1}, "chunk 0's running completion_tokens 3 exceeds the request's total 2"},
		{"null on a chunk with choices", []string{runChunk(1, "", 5, -1), runChunk(1, "stop", 5, 2), totalChunk(5, 2)},
			RunningWant{Choices: 1}, "chunk 0 has choices but no running usage"},
		{"bad arithmetic", []string{`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":7}}`, totalChunk(5, 1)},
			RunningWant{Choices: 1}, "chunk 0's running usage: total_tokens 7 != prompt_tokens 5 + completion_tokens 1"},
		{"no total", []string{runChunk(1, "stop", 5, 1)}, RunningWant{Choices: 1}, "no total usage"},
		// llama.cpp sends no logprobs for the tokens its draft model proposed:
		// the tokens sent cannot be counted, only bounded from below.
		{"tokens without logprob entries", []string{runChunk(1, "", 5, 1), runChunk(0, "", 5, 3), runChunk(1, "stop", 5, 4), totalChunk(5, 4)},
			RunningWant{Choices: 1, Logprobs: true}, ""},
		{"tokens without logprob entries, counted short", []string{runChunk(1, "", 5, 1), runChunk(0, "", 5, 3), runChunk(1, "", 5, 1), runChunk(1, "stop", 5, 4), totalChunk(5, 4)},
			RunningWant{Choices: 1, Logprobs: true}, "chunk 2's running completion_tokens is 1, but 2 tokens were sent up to it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &Transcript{Transport: "SSE", Status: 200, Done: true, Chunks: chunks(tc.chunks...)}
			expectProblem(t, CheckRunning(tr, tc.want), tc.problem)
		})
	}
}

// TestCheckStreamContinuous: the framing of a continuous-usage stream.
func TestCheckStreamContinuous(t *testing.T) {
	t.Parallel()
	want := StreamWant{IncludeUsage: true, ContinuousUsage: true, Choices: 1}
	for _, tc := range []struct {
		name    string
		chunks  []string
		want    StreamWant
		problem string
	}{
		{"running usage, then the total", []string{runChunk(1, "", 5, 1), runChunk(0, "stop", 5, 1), totalChunk(5, 1)}, want, ""},
		{"null on a chunk with choices", []string{runChunk(1, "", 5, -1), runChunk(0, "stop", 5, 1), totalChunk(5, 1)}, want,
			`chunk 0 has 1 choice(s) and "usage": null although continuous_usage_stats is true`},
		{"no total chunk", []string{runChunk(1, "", 5, 1), runChunk(0, "stop", 5, 1)}, want, "no chunk carries usage"},
		{"running usage without asking for it", []string{runChunk(1, "", 5, 1), runChunk(0, "stop", 5, 1), totalChunk(5, 1)},
			StreamWant{IncludeUsage: true, Choices: 1}, "carries usage together with 1 choice(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &Transcript{Transport: "SSE", Status: 200, Done: true, Chunks: chunks(tc.chunks...)}
			expectProblem(t, CheckStream(tr, tc.want), tc.problem)
		})
	}
}
