package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// bigRequest is one large request that must be refused, fast and in
// bounded memory.
type bigRequest struct {
	name string
	path string
	body []byte
	code string // the error code wanted
	// maxTook bounds the time to the answer, maxCPU the server's CPU time
	// spent on it, maxRSS the growth of its peak RSS.
	maxTook time.Duration
	maxCPU  time.Duration
	maxRSS  int64 // MiB
	// engineBound: the engine must refuse the request before working on it
	// (a prompt longer than the context, found by its bytes before it is
	// tokenised). The time and CPU bounds are then relative: at most 1.5×
	// (plus 200 ms) what the same body costs when its model is unknown, a
	// 404 before any engine work (validating and decoding megabytes of
	// JSON has a cost of its own, which varies with the machine's load).
	engineBound bool
}

// words is a prompt of about n bytes of plain English words.
func words(n int) string {
	const s = "the fox ran to the sea and the river sang all day. "
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// mixedText is about n bytes of letters, punctuation, accents, Cyrillic,
// Japanese and emoji, seeded: what a byte-level tokenizer splits finest.
func mixedText(n int) string {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz ,.!?ÄéøΩжこんにちは🦊\n\t")
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// bigRequests are defects 3, 4 and 7: prompts of megabytes, 2,048 prompts
// × n 128, a 16 MiB body of tools.
func bigRequests() []bigRequest {
	const mib = 1 << 20
	tools := `{"model":"rill-tiny","messages":` + messages + `,"tools":[`
	n := (16*mib - len(tools) - 64) / 3
	tools += strings.Repeat("{},", n-1) + "{}]}"
	prompts := make([]string, 2048)
	for i := range prompts {
		prompts[i] = jsonString(fmt.Sprintf("prompt %d", i))
	}
	return []bigRequest{
		{name: "8 MiB of one letter", path: "/v1/completions",
			body: completion("prompt", jsonString(strings.Repeat("a", 8*mib))),
			code: "context_length_exceeded", engineBound: true, maxRSS: 128},
		{name: "8 MiB chat prompt", path: "/v1/chat/completions",
			body: chat("messages", `[{"role":"user","content":`+jsonString(words(8*mib))+`}]`),
			code: "context_length_exceeded", engineBound: true, maxRSS: 128},
		{name: "6 MiB mixed-script prompt", path: "/v1/completions",
			body: completion("prompt", jsonString(mixedText(6*mib))),
			code: "context_length_exceeded", engineBound: true, maxRSS: 128},
		{name: "2,048 prompts × n 128", path: "/v1/completions",
			body: completion("prompt", "["+strings.Join(prompts, ",")+"]", "n", "128"),
			code: "too_many_choices", maxTook: time.Second, maxCPU: 500 * time.Millisecond, maxRSS: 64},
		{name: "16 MiB of tools [{}, …]", path: "/v1/chat/completions", body: []byte(tools),
			code: "", maxTook: 2 * time.Second, maxCPU: time.Second, maxRSS: 128},
	}
}

// checkBigRequests sends each big request alone and measures it: a 400
// with the expected code in OpenAI's shape, within its time, CPU and
// memory bounds.
func checkBigRequests(ctx context.Context, h *harness) (string, error) {
	var fails, figs []string
	for _, b := range bigRequests() {
		fig, err := bigOnce(ctx, h, b)
		figs = append(figs, b.name+": "+fig)
		if err != nil {
			fails = append(fails, b.name+": "+err.Error())
		}
	}
	figures := strings.Join(figs, "; ")
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

func bigOnce(ctx context.Context, h *harness, b bigRequest) (string, error) {
	floor := ""
	if b.engineBound {
		// The same body for an unknown model: what the service alone
		// costs, the larger of two tries (the machine's load varies).
		nope := bytes.Replace(b.body, []byte(`"model":"rill-tiny"`), []byte(`"model":"nope"`), 1)
		var took, cpu time.Duration
		for range 2 {
			t, c, _, _, err := measureRequest(ctx, h, b.path, nope, http.StatusNotFound)
			if err != nil {
				return "", fmt.Errorf("the same body for an unknown model: %w", err)
			}
			took, cpu = max(took, t), max(cpu, c)
		}
		b.maxTook = took*3/2 + 200*time.Millisecond
		b.maxCPU = cpu*3/2 + 200*time.Millisecond
		floor = fmt.Sprintf(" (unknown model: %v, CPU %v)", took.Round(10*time.Millisecond), cpu)
	}
	took, cpu, growth, got, err := measureRequest(ctx, h, b.path, b.body, http.StatusBadRequest)
	fig := fmt.Sprintf("%v, CPU %v%s, RSS +%d MiB", took.Round(10*time.Millisecond), cpu, floor, growth)
	if err != nil {
		return fig, err
	}
	var fails []string
	if err := errorShape(got); err != nil {
		fails = append(fails, err.Error())
	}
	if b.code != "" && errorCode(got) != b.code {
		fails = append(fails, fmt.Sprintf("code %q, want %q", errorCode(got), b.code))
	}
	if took > b.maxTook {
		fails = append(fails, fmt.Sprintf("answered after %v (bound %v)", took.Round(10*time.Millisecond), b.maxTook.Round(10*time.Millisecond)))
	}
	if cpu > b.maxCPU {
		fails = append(fails, fmt.Sprintf("the server spent %v of CPU on it (bound %v)", cpu, b.maxCPU.Round(10*time.Millisecond)))
	}
	if growth > b.maxRSS {
		fails = append(fails, fmt.Sprintf("RSS grew %d MiB (bound %d)", growth, b.maxRSS))
	}
	if len(fails) > 0 {
		return fig, errors.New(strings.Join(fails, "; "))
	}
	return fig, nil
}

// measureRequest sends body to path, wants status, and measures the time
// to the answer, the server's CPU time and its peak RSS growth (MiB).
func measureRequest(ctx context.Context, h *harness, path string, body []byte, status int) (took, cpu time.Duration, growthMiB int64, got []byte, err error) {
	before, err := readProc(h.srv.pid())
	if err != nil {
		return 0, 0, 0, nil, err
	}
	sampler := sampleRSS(h.srv.pid())
	start := time.Now()
	got, err = post(ctx, h.noKeep, h.srv, path, body, status)
	took = time.Since(start)
	peak := sampler.end()
	after, _ := readProc(h.srv.pid())
	return took, after.cpu - before.cpu, (peak - before.rssKB) / 1024, got, err
}

// checkBigPromptCancel is the cancellation half of defect 3: a client
// sends an 8 MiB prompt of one letter (one word of 8 MiB, the costliest
// text for a BPE tokeniser) and leaves as soon as it is sent. The
// server must stop working on it: from then on it may spend at most what
// the whole of the same body costs when its model is unknown (a 404
// before any engine work), never the tokenisation of 8 MiB for nobody.
func checkBigPromptCancel(ctx context.Context, h *harness) (string, error) {
	body := completion("prompt", jsonString(strings.Repeat("a", 8<<20)))
	nope := bytes.Replace(body, []byte(`"model":"rill-tiny"`), []byte(`"model":"nope"`), 1)
	_, floor, _, _, err := measureRequest(ctx, h, "/v1/completions", nope, http.StatusNotFound)
	if err != nil {
		return "", fmt.Errorf("the same body for an unknown model: %w", err)
	}
	conn, err := dial(h)
	if err != nil {
		return "", err
	}
	if _, err := conn.Write(rawPost(h.srv, "/v1/completions", body)); err != nil {
		conn.Close()
		return "", err
	}
	time.Sleep(200 * time.Millisecond) // the server has the body and works on it
	conn.Close()
	left, err := readProc(h.srv.pid())
	if err != nil {
		return "", err
	}
	time.Sleep(3 * time.Second)
	later, err := readProc(h.srv.pid())
	if err != nil {
		return "", err
	}
	cpu := later.cpu - left.cpu
	figures := fmt.Sprintf("CPU after the client left: %v (the whole body for an unknown model: %v)", cpu, floor)
	if cpu > max(floor, 200*time.Millisecond) {
		return figures, fmt.Errorf("the server kept working %v of CPU on a request whose client left, more than the %v the whole body costs without the engine", cpu, floor)
	}
	return figures, nil
}

// checkMaxChoices is the other side of defect 4: a request at the limit
// (2 prompts × n 128 = 256 choices) is served, with its memory bounded
// (lazy samplers): 256 choices of 2 tokens each.
func checkMaxChoices(ctx context.Context, h *harness) (string, error) {
	start := time.Now()
	before, _ := readProc(h.srv.pid())
	sampler := sampleRSS(h.srv.pid())
	got, err := post(ctx, h.noKeep, h.srv, "/v1/completions", completion("prompt", `["a","b"]`, "n", "128", "max_tokens", "2"), http.StatusOK)
	peak := sampler.end()
	took := time.Since(start)
	if err != nil {
		return "", err
	}
	var resp struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(got, &resp); err != nil {
		return "", err
	}
	growth := (peak - before.rssKB) / 1024
	figures := fmt.Sprintf("%d choices in %v, RSS +%d MiB", len(resp.Choices), took.Round(10*time.Millisecond), growth)
	if len(resp.Choices) != 256 {
		return figures, fmt.Errorf("%d choices, want 256", len(resp.Choices))
	}
	if growth > 64 {
		return figures, fmt.Errorf("RSS grew %d MiB for 256 choices", growth)
	}
	if !bytes.Contains(got, []byte(`"usage"`)) {
		return figures, errors.New("no usage")
	}
	return figures, nil
}
