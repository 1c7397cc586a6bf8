// Command applytemplate records how llama.cpp's server renders a fixed set
// of chat requests with each of a folder of chat templates, as golden data
// for rill's prompts (engine/native/applytemplate_test.go).
//
// For each template it starts llama-server with the template as
// --chat-template-file (--jinja, a tiny model: stories260K), reads the
// template's capabilities from /props (chat_template_caps), and POSTs each
// request to /apply-template, which renders the chat exactly as
// /v1/chat/completions would, without generating. It records the prompt,
// or the error the server answered. The templates are copied next to the
// output, so that the test has them in every clone.
//
//	scripts/peer/build-llama.sh       # llama-server, in /work/llama-build/bin
//	go run ./scripts/applytemplate    # ~1 s per template
//
// The clock matters to templates that print today's date (llama.cpp gives
// every template date_string and datetime); the output records the day it
// ran, in UTC, and the test renders with that day.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// weather is the tool of the requests with tools.
const weather = `{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}}}`

// cases are the requests, in OpenAI's wire shape: what a client sends
// both servers.
var cases = []struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
}{
	{"user", chat(`{"messages": [{"role": "user", "content": "Hello!"}]}`)},
	{"system-user", chat(`{"messages": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello!"}]}`)},
	{"four-turns", chat(`{"messages": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Arr, ahoy."}, {"role": "user", "content": "Where is the treasure?"}]}`)},
	{"developer", chat(`{"messages": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello!"}]}`)},
	{"system-only", chat(`{"messages": [{"role": "system", "content": "You are a pirate."}]}`)},
	{"typed-content", chat(`{"messages": [{"role": "system", "content": [{"type": "text", "text": "You are a pirate."}]},
		{"role": "user", "content": [{"type": "text", "text": "Hello!"}, {"type": "text", "text": "Where is the treasure?"}]}]}`)},
	{"reasoning-history", chat(`{"messages": [{"role": "user", "content": "What is 2+2?"},
		{"role": "assistant", "content": "4.", "reasoning_content": "Two and two make four."}, {"role": "user", "content": "And 3+3?"}]}`)},
	{"tools", chat(`{"tools": [` + weather + `], "messages": [{"role": "system", "content": "You are helpful."},
		{"role": "user", "content": "What is the weather in Paris?"}]}`)},
	{"tool-call", chat(`{"tools": [` + weather + `], "messages": [{"role": "user", "content": "What is the weather in Paris?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]}`)},
	{"tool-call-answered", chat(`{"tools": [` + weather + `], "messages": [{"role": "system", "content": "You are helpful."},
		{"role": "user", "content": "What is the weather in Paris?"},
		{"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
		{"role": "assistant", "content": "It is sunny in Paris."}, {"role": "user", "content": "Thanks!"}]}`)},
	{"parallel-calls", chat(`{"tools": [` + weather + `], "messages": [{"role": "user", "content": "Paris or Rome: where is it warmer?"},
		{"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
			{"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "21 C"}, {"role": "tool", "tool_call_id": "call_2", "content": "26 C"}]}`)},
	{"tool-history-without-tools", chat(`{"messages": [{"role": "user", "content": "What is the weather in Paris?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]}`)},
}

// chat is the request body s with enable_thinking set, compacted, its key
// order kept (templates print tools with tojson in the order the client
// wrote). enable_thinking is explicit so that both servers render the
// same variables: each decides its default differently (llama.cpp from the
// template, rill from the model's vocabulary, which the test's lacks).
func chat(s string) json.RawMessage {
	s = `{"chat_template_kwargs": {"enable_thinking": true}, ` + strings.TrimPrefix(s, "{")
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		panic(fmt.Sprintf("case %.40s: %v", s, err))
	}
	return b.Bytes()
}

// result is one request's outcome: the prompt, or the server's error.
type result struct {
	Prompt *string `json:"prompt,omitempty"`
	Status int     `json:"status,omitempty"`
	Error  string  `json:"error,omitempty"`
}

type templateRecord struct {
	SHA256 string            `json:"sha256"`
	Caps   map[string]bool   `json:"caps,omitempty"`
	Error  string            `json:"error,omitempty"` // the server did not start with it
	Result map[string]result `json:"results,omitempty"`
}

type golden struct {
	Generator string `json:"generator"`
	Server    string `json:"server"`
	Model     string `json:"model"`
	Date      string `json:"date"`
	Cases     any    `json:"cases"`
	// Templates by file name, in the folder templates/ next to the file.
	Templates map[string]*templateRecord `json:"templates"`
}

func main() {
	server := flag.String("server", "/work/llama-build/bin/llama-server", "llama-server binary")
	modelPath := flag.String("model", "../shared/models/stories260K.gguf", "model the server loads (any small one)")
	dir := flag.String("templates", "../shared/refdata/chat-templates/llamacpp-node-bundle,../shared/refdata/chat-templates/from-metadata/ggml-vocab-phi-3.gguf.chat_template.jinja",
		"templates: folders of *.jinja files and single files, separated by commas")
	out := flag.String("out", "engine/native/testdata/applytemplate/llamacpp.json", "output; the templates go to templates/ beside it")
	only := flag.String("only", "", "record only the templates whose file name contains this")
	flag.Parse()
	if err := run(*server, *modelPath, *dir, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "applytemplate:", err)
		os.Exit(1)
	}
}

func run(server, modelPath, templates, out, only string) error {
	var files []string
	for _, p := range strings.Split(templates, ",") {
		if st, err := os.Stat(p); err != nil {
			return err
		} else if !st.IsDir() {
			files = append(files, p)
			continue
		}
		more, err := filepath.Glob(filepath.Join(p, "*.jinja"))
		if err != nil || len(more) == 0 {
			return fmt.Errorf("no templates in %s", p)
		}
		files = append(files, more...)
	}
	sort.Slice(files, func(i, j int) bool { return filepath.Base(files[i]) < filepath.Base(files[j]) })
	version, err := exec.Command(server, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %v: %s", server, err, version)
	}
	g := &golden{
		Generator: strings.TrimSpace("go run ./scripts/applytemplate " + strings.Join(os.Args[1:], " ")),
		Server:    firstLine(string(version), "version"),
		Model:     filepath.Base(modelPath),
		Date:      time.Now().UTC().Format("2006-01-02"),
		Cases:     cases,
		Templates: map[string]*templateRecord{},
	}
	tmplDir := filepath.Join(filepath.Dir(out), "templates")
	if err := os.MkdirAll(tmplDir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		name := filepath.Base(f)
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmplDir, name), src, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(src)
		rec := &templateRecord{SHA256: hex.EncodeToString(sum[:])}
		g.Templates[name] = rec
		if err := record(server, modelPath, f, rec); err != nil {
			rec.Error = err.Error()
		}
		fmt.Fprintf(os.Stderr, "%-55s %s\n", name, summary(rec))
	}
	var data bytes.Buffer
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false) // prompts are full of <|markers|>
	enc.SetIndent("", " ")
	if err := enc.Encode(g); err != nil {
		return err
	}
	return os.WriteFile(out, data.Bytes(), 0o644)
}

func summary(rec *templateRecord) string {
	if rec.Error != "" {
		return "server error: " + firstLine(rec.Error, "")
	}
	ok := 0
	for _, r := range rec.Result {
		if r.Prompt != nil {
			ok++
		}
	}
	return fmt.Sprintf("%d/%d rendered", ok, len(rec.Result))
}

// firstLine is the first line of s that contains want ("" for any).
func firstLine(s, want string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, want) && strings.TrimSpace(l) != "" {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(s)
}

// record starts llama-server with the template and renders every case.
func record(server, modelPath, template string, rec *templateRecord) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, server, "-m", modelPath, "--jinja", "--chat-template-file", template,
		"--host", "127.0.0.1", "--port", fmt.Sprint(port), "-c", "4096", "-t", "1", "--no-webui")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHealthy(base, exited); err != nil {
		return fmt.Errorf("%v: %s", err, tail(logs.String(), 600))
	}
	var props struct {
		Caps map[string]bool `json:"chat_template_caps"`
	}
	if err := getJSON(base+"/props", &props); err != nil {
		return err
	}
	rec.Caps = props.Caps
	rec.Result = map[string]result{}
	for _, c := range cases {
		resp, err := http.Post(base+"/apply-template", "application/json", bytes.NewReader(c.Request))
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var r result
		if resp.StatusCode == http.StatusOK {
			var ok struct {
				Prompt *string `json:"prompt"`
			}
			if err := json.Unmarshal(body, &ok); err != nil || ok.Prompt == nil {
				return fmt.Errorf("case %s: answer %s", c.Name, body)
			}
			r.Prompt = ok.Prompt
		} else {
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			r.Status, r.Error = resp.StatusCode, e.Error.Message
			if r.Error == "" {
				r.Error = string(body)
			}
		}
		rec.Result[c.Name] = r
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitHealthy(base string, exited <-chan error) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("llama-server exited: %v", err)
		default:
		}
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("llama-server did not become healthy in 90 s")
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
