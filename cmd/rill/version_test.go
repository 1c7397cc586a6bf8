package main

import (
	"encoding/json"
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
