package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"rill/store/testserver"
)

// turn is one response of a conversation as a client saw it.
type turn struct {
	id, text      string
	input, output int64
}

// converse sends the turn "say <i>" to the server at addr, continuing
// previous (empty: a new conversation), with greedy sampling.
func converse(t *testing.T, addr, previous string, i int) turn {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := responses.ResponseNewParams{Model: "rill-tiny", MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("Tell me about river number %d.", i))}}
	if previous != "" {
		p.PreviousResponseID = openai.String(previous)
	}
	r, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatalf("turn %d on %s (previous %q): %v", i, addr, previous, err)
	}
	return turn{r.ID, r.OutputText(), r.Usage.InputTokens, r.Usage.OutputTokens}
}

// conversation runs turns 0..len(addrs)-1, turn i on addrs[i], each
// continuing the one before.
func conversation(t *testing.T, addrs ...string) []turn {
	t.Helper()
	var out []turn
	prev := ""
	for i, addr := range addrs {
		tr := converse(t, addr, prev, i)
		out = append(out, tr)
		prev = tr.id
	}
	return out
}

// sameConversation checks that got (turns served elsewhere, or across a
// restart) reads as want (one uninterrupted server): the same text and
// the same counts, turn by turn; a turn whose history was lost would see
// fewer input tokens.
func sameConversation(t *testing.T, got, want []turn) {
	t.Helper()
	for i := range want {
		if got[i].text != want[i].text || got[i].input != want[i].input || got[i].output != want[i].output {
			t.Errorf("turn %d: %q (%d in, %d out), uninterrupted %q (%d in, %d out)", i,
				got[i].text, got[i].input, got[i].output, want[i].text, want[i].input, want[i].output)
		}
	}
	if len(want) > 1 && want[len(want)-1].input <= want[0].input {
		t.Errorf("the last turn read %d input tokens, the first %d: the history is not reaching the model", want[len(want)-1].input, want[0].input)
	}
}

// getResponse fetches response id from addr and returns its status code.
func getResponse(t *testing.T, addr, id string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/v1/responses/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeStoreSurvivesKill9: stored responses written by a `rill serve
// --data-dir` that is then killed with SIGKILL are there after a restart,
// and previous_response_id continues the conversation as one uninterrupted
// server would.
func TestServeStoreSurvivesKill9(t *testing.T) {
	t.Parallel()
	ref := startServe(t)
	want := conversation(t, ref.addr, ref.addr, ref.addr)

	dir := filepath.Join(t.TempDir(), "data")
	first := startServe(t, "--data-dir", dir)
	got := conversation(t, first.addr, first.addr)
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, nothing flushed
		t.Fatal(err)
	}
	<-first.exited

	second := startServe(t, "--data-dir", dir)
	for _, tr := range got {
		if code := getResponse(t, second.addr, tr.id); code != http.StatusOK {
			t.Fatalf("GET %s after kill -9 and restart: %d", tr.id, code)
		}
	}
	got = append(got, converse(t, second.addr, got[1].id, 2))
	sameConversation(t, got, want)
}

// TestServeSharedStore: two `rill serve` processes sharing one real
// redis-server serve one conversation alternately, each turn continuing the
// other process's response, and a resumable stream begun on one process
// and dropped is finished on the other.
func TestServeSharedStore(t *testing.T) {
	t.Parallel()
	redis := testserver.StartRedis(t, testserver.RedisOptions{})
	a := startServe(t, "--store", redis.URL(0))
	b := startServe(t, "--store", redis.URL(0))
	ref := startServe(t)

	want := conversation(t, ref.addr, ref.addr, ref.addr, ref.addr)
	got := conversation(t, a.addr, b.addr, a.addr, b.addr)
	sameConversation(t, got, want)
	if code := getResponse(t, a.addr, got[3].id); code != http.StatusOK {
		t.Errorf("GET on one process of a response the other made: %d", code)
	}

	const body = `{"model":"rill-tiny","messages":[{"role":"user","content":"Tell me about the sea."}],` +
		`"max_tokens":24,"temperature":0,"stream":true,"stream_options":{"resumable":true}}`
	whole := readSSE(t, mustDo(t, http.MethodPost, "http://"+ref.addr+"/v1/chat/completions", body, ""), -1)
	head := readSSE(t, mustDo(t, http.MethodPost, "http://"+a.addr+"/v1/chat/completions", body, ""), 3)
	if head.id == "" || head.last < 0 {
		t.Fatalf("the resumable stream on the first process: id %q, last event %d", head.id, head.last)
	}
	tail := readSSE(t, mustDo(t, http.MethodGet, "http://"+b.addr+"/v1/chat/completions/"+head.id, "", fmt.Sprint(head.last)), -1)
	if !tail.done || head.text+tail.text != whole.text || whole.text == "" {
		t.Errorf("resumed on the other process: %q + %q (done %v), uninterrupted %q", head.text, tail.text, tail.done, whole.text)
	}
}

// sseRead is what readSSE saw of a chat completion stream.
type sseRead struct {
	id   string // the chunks' id
	last int    // the last event id seen, -1 for none
	text string // the content deltas, concatenated
	done bool   // [DONE] arrived
}

// readSSE reads resp's chat completion stream, all of it (max < 0) or its
// first max events that carry content, then closes it.
func readSSE(t *testing.T, resp *http.Response, max int) sseRead {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d", resp.Request.Method, resp.Request.URL, resp.StatusCode)
	}
	r := sseRead{last: -1}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			fmt.Sscan(strings.TrimPrefix(line, "id: "), &r.last)
		case line == "data: [DONE]":
			r.done = true
			return r
		case strings.HasPrefix(line, "data: "):
			var c struct {
				ID      string `json:"id"`
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &c); err != nil {
				t.Fatalf("chunk %q: %v", line, err)
			}
			r.id = cmp.Or(r.id, c.ID)
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				r.text += c.Choices[0].Delta.Content
				if n++; n == max {
					return r
				}
			}
		}
	}
	return r
}

// mustDo sends one request: a JSON body when body is set, Last-Event-ID
// when lastEventID is.
func mustDo(t *testing.T, method, url, body, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
