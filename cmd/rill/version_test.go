package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rill/internal/buildinfo"
)

// runMain runs this test binary as rill with args and returns its stdout.
func runMain(t *testing.T, args string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+args)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rill %s: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestVersion: `rill version`, its -json form and `rill --version` print
// the build information of the binary they run in (this test binary, whose
// own buildinfo.Read is the expectation).
func TestVersion(t *testing.T) {
	want := buildinfo.Read()
	tests := []struct {
		args string
		json bool
	}{
		{"version", false},
		{"--version", false},
		{"-version", false},
		{"version -json", true},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			out := runMain(t, tt.args)
			if !tt.json {
				if got := strings.TrimSpace(out); got != want.String() {
					t.Errorf("rill %s printed %q, want %q", tt.args, got, want.String())
				}
				return
			}
			var got buildinfo.Info
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("rill %s: %v in %q", tt.args, err, out)
			}
			if got != want {
				t.Errorf("rill %s = %+v, want %+v", tt.args, got, want)
			}
		})
	}
}

// TestVersionStamped builds rill as a release build does, the version and
// commit stamped with -ldflags -X, and checks that `rill version -json`
// reports them.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the rill binary")
	}
	bin := filepath.Join(t.TempDir(), "rill")
	const rev = "0123456789abcdef0123456789abcdef01234567"
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags",
		"-X rill/internal/buildinfo.Version=v9.8.7-test -X rill/internal/buildinfo.Revision="+rev, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("rill version -json: %v", err)
	}
	var got buildinfo.Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if got.Version != "v9.8.7-test" {
		t.Errorf("version %q, want the stamped v9.8.7-test", got.Version)
	}
	if got.GoVersion == "" || got.OS == "" || got.Arch == "" {
		t.Errorf("toolchain fields missing: %+v", got)
	}
	if got.Revision != rev {
		t.Errorf("revision %q, want the stamped %q", got.Revision, rev)
	}
}

// TestServeLogsBuildFirst: the first line `rill serve` logs names the
// build (version, revision, Go version), and its /metrics has
// rill_build_info with the same labels.
func TestServeLogsBuildFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rill serve in a subprocess")
	}
	t.Parallel()
	p := startServe(t)
	want := buildinfo.Read()
	first, _, _ := strings.Cut(p.log.String(), "\n")
	// The values are plain words: slog's text handler writes them unquoted.
	attrs := map[string]string{}
	for _, kv := range strings.Fields(first) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			attrs[k] = v
		}
	}
	for k, v := range map[string]string{"version": want.Version, "revision": want.Revision,
		"go_version": want.GoVersion, "platform": want.OS + "/" + want.Arch} {
		if v == "" || attrs[k] != v {
			t.Errorf("first log line %q: %s=%q, want %q", first, k, attrs[k], v)
		}
	}
	if !strings.Contains(first, `msg="rill starting"`) {
		t.Errorf("first log line %q is not the start line", first)
	}

	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	metric := fmt.Sprintf(`rill_build_info{goversion=%q,revision=%q,version=%q} 1`, want.GoVersion, want.Revision, want.Version)
	if !strings.Contains(string(body), metric+"\n") {
		t.Errorf("/metrics lacks %s", metric)
	}
}
