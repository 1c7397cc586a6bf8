package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rill/internal/wait"
)

func writeKeys(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeys: a reload puts the file's keys in effect; a file that
// does not load keeps the old keys and says why.
func TestReloadKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "keys:\n  - name: one\n    key: sk-one\n")
	log := slog.New(slog.DiscardHandler)
	set, err := openKeys(path, log)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		file    string
		wantErr bool
		valid   []string
		invalid []string
	}{
		{"keys:\n  - name: two\n    key: sk-two\n    requests_per_minute: 5\n", false, []string{"sk-two"}, []string{"sk-one"}},
		{"keys:\n  - name: three\n    key: sk-three\n    rpm: 5\n", true, []string{"sk-two"}, []string{"sk-three"}},
		{"keys: [", true, []string{"sk-two"}, nil},
		{"", true, []string{"sk-two"}, nil}, // (removed below: a missing file)
		{"keys:\n  - name: one\n    key: sk-one\n  - name: two\n    key: sk-two\n", false, []string{"sk-one", "sk-two"}, nil},
	}
	for i, st := range steps {
		if st.file == "" {
			os.Remove(path)
		} else {
			writeKeys(t, path, st.file)
		}
		if err := reloadKeys(path, set, log); (err != nil) != st.wantErr {
			t.Fatalf("step %d: reload: %v", i, err)
		}
		for _, k := range st.valid {
			if set.Lookup(k) == nil {
				t.Errorf("step %d: %s refused", i, k)
			}
		}
		for _, k := range st.invalid {
			if set.Lookup(k) != nil {
				t.Errorf("step %d: %s accepted", i, k)
			}
		}
	}
}

// TestServeKeysFile runs `rill serve --api-keys-file` and reloads the file
// with a SIGHUP to this process: a key added to the file is accepted after
// it, one removed is refused; a limited key's responses carry its headers
// and its requests past the limit a 429.
func TestServeKeysFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "keys:\n  - name: one\n    key: sk-one\n    requests_per_minute: 1\n")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, []string{"--addr", addr, "--api-keys-file", path, "--log-level", "error"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	do := func(method, path, key, body string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	wait.Options{Bound: 30 * time.Second, Interval: 20 * time.Millisecond}.For(t, "rill serve to come up", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("serve ended: %v", err)
		default:
		}
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	completion := `{"model":"rill-tiny","prompt":"Once","max_tokens":1}`
	if status, h := do(http.MethodPost, "/v1/completions", "sk-one", completion); status != 200 || h.Get("X-Ratelimit-Remaining-Requests") != "0" || h.Get("X-Ratelimit-Limit-Requests") != "1" {
		t.Fatalf("first completion: %d %v", status, h)
	}
	if status, h := do(http.MethodPost, "/v1/completions", "sk-one", completion); status != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("second completion: %d %v", status, h)
	}
	if status, _ := do(http.MethodGet, "/v1/models", "sk-two", ""); status != 401 {
		t.Fatalf("sk-two before the reload: %d", status)
	}
	writeKeys(t, path, "keys:\n  - name: two\n    key: sk-two\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.Options{Bound: 10 * time.Second, Interval: 20 * time.Millisecond}.For(t, "sk-two after SIGHUP", func() bool {
		status, _ := do(http.MethodGet, "/v1/models", "sk-two", "")
		return status == 200
	})
	if status, _ := do(http.MethodGet, "/v1/models", "sk-one", ""); status != 401 {
		t.Errorf("sk-one after it left the file: %d", status)
	}
}

// TestServeKeysFileErrors: a keys file that does not load stops serve at
// start.
func TestServeKeysFileErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "keys:\n  - name: one\n")
	for _, p := range []string{path, filepath.Join(t.TempDir(), "missing.yaml")} {
		err := Serve(context.Background(), []string{"--api-keys-file", p, "--addr", "127.0.0.1:0", "--log-level", "error"})
		if err == nil || !strings.Contains(err.Error(), "--api-keys-file") {
			t.Errorf("%s: %v, want an error about --api-keys-file", p, err)
		}
	}
}
