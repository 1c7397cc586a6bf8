package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/engine/quant"
	"rill/engine/testmodel"
	"rill/hub/hubtest"
)

// hubEnv is the environment that points rill at a fake Hub and a cache.
func hubEnv(endpoint, home string, offline bool) []string {
	env := []string{"HF_ENDPOINT=" + endpoint, "HF_HOME=" + home, "HF_HUB_CACHE=", "XDG_CACHE_HOME=", "HF_TOKEN="}
	if offline {
		return append(env, "HF_HUB_OFFLINE=1")
	}
	return append(env, "HF_HUB_OFFLINE=")
}

// chat asks the server at addr one question with the official client and
// returns the answer.
func chat(t *testing.T, addr, model string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the river.")},
		MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Usage.CompletionTokens == 0 {
		t.Fatalf("answer %+v", res)
	}
	return res.Choices[0].Message.Content
}

// TestServeFromHub: `serve --model hf://ORG/REPO:QUANT` with an empty
// cache pulls the model from a Hub (whose connection drops mid-file, so
// the download resumes), logs its progress, loads it and answers a chat;
// started again offline, with the Hub gone, it loads the cached copy.
func TestServeFromHub(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rill serve in a subprocess")
	}
	t.Parallel()
	gguf, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	srv := hubtest.New("rill/tiny-GGUF",
		hubtest.File{Path: "README.md", Data: []byte("# tiny")},
		hubtest.File{Path: "tiny-F32.gguf", Data: gguf, LFS: true, DropAfter: int64(len(gguf) / 3)})
	defer srv.Close()
	home := t.TempDir()
	const model = "rill/tiny-GGUF:F32"

	p := startServeEnv(t, hubEnv(srv.URL, home, false), "--model", "hf://"+model)
	online := chat(t, p.addr, model)
	for _, want := range []string{"hub: downloading", "hub: download broke off, resuming", "hub: file ready", "model loaded"} {
		if !strings.Contains(p.log.String(), want) {
			t.Errorf("serve's log lacks %q:\n%s", want, p.log)
		}
	}
	blob := filepath.Join(home, "hub", "models--rill--tiny-GGUF", "blobs", hubtest.SHA256(gguf))
	if got, err := os.ReadFile(blob); err != nil || !bytes.Equal(got, gguf) {
		t.Errorf("cached blob: %d bytes, %v", len(got), err)
	}
	_ = p.cmd.Process.Kill()
	<-p.exited

	srv.Close()
	q := startServeEnv(t, hubEnv(srv.URL, home, true), "--model", "hf://"+model)
	if offline := chat(t, q.addr, model); offline != online {
		t.Errorf("offline answer %q, online %q", offline, online)
	}
	if !strings.Contains(q.log.String(), "hub: offline, using the cache") {
		t.Errorf("offline serve's log:\n%s", q.log)
	}
}

// TestPullExit: `rill pull` prints the path and exits 0, or says what is
// wrong on stderr and exits 1.
func TestPullExit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rill pull in a subprocess")
	}
	t.Parallel()
	data, q8 := []byte("not really a model, but a file"), []byte("another file")
	corrupt := bytes.Clone(q8)
	corrupt[3] = 'X'
	srv := hubtest.New("org/m-GGUF",
		hubtest.File{Path: "m-Q4_K_M.gguf", Data: data, LFS: true},
		hubtest.File{Path: "m-Q8_0.gguf", Data: q8, LFS: true, Served: corrupt})
	defer srv.Close()
	home := t.TempDir()
	tests := []struct {
		name   string
		args   string
		code   int
		stdout string
		stderr string
	}{
		{"pulled", "pull org/m-GGUF", 0, filepath.Join(home, "hub", "models--org--m-GGUF", "snapshots", hubtest.Commit, "m-Q4_K_M.gguf") + "\n", "hub: file ready"},
		{"corrupted", "pull org/m-GGUF:Q8_0", 1, "", "rill pull: hub: m-Q8_0.gguf: checksum mismatch"},
		{"no argument", "pull", 1, "", "usage: rill pull"},
		{"bad reference", "pull m-GGUF", 1, "", `rill pull: hub reference "m-GGUF"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(append(os.Environ(), mainArgsEnv+"="+tt.args), hubEnv(srv.URL, home, false)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || stdout.String() != tt.stdout || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}
