package hub_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rill/hub"
	"rill/hub/hubtest"
)

// content is n bytes of a file, different for each seed.
func content(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/251)
	}
	return b
}

// recorder is a hub.Progress that keeps what it hears.
type recorder struct {
	last map[string]int64
	done []string
}

func (r *recorder) Update(file string, done, total int64) {
	if r.last == nil {
		r.last = map[string]int64{}
	}
	r.last[file] = done
}

func (r *recorder) Done(file string, err error) {
	if err == nil {
		r.done = append(r.done, file)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestPull(t *testing.T) {
	const repo = "org/tiny-GGUF"
	q4, q8, small := content(1, 300_000), content(2, 200_000), content(3, 1000)
	p1, p2, p3 := content(4, 70_000), content(5, 70_000), content(6, 5)
	corrupt := bytes.Clone(q4)
	corrupt[12345] ^= 0xff
	tests := []struct {
		name   string
		files  []hubtest.File
		quant  string
		token  string // what the server requires
		send   string // HF_TOKEN
		want   map[string][]byte
		ranged bool   // a download was resumed with a range
		errHas string // the error, when Pull must fail
		errIs  error
	}{
		{name: "default quant from the CDN",
			files: []hubtest.File{{Path: "tiny-Q8_0.gguf", Data: q8, LFS: true}, {Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true}},
			want:  map[string][]byte{"tiny-Q4_K_M.gguf": q4}},
		{name: "quant asked, case-insensitive",
			files: []hubtest.File{{Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true}, {Path: "tiny-Q8_0.gguf", Data: q8, LFS: true}},
			quant: "q8_0", want: map[string][]byte{"tiny-Q8_0.gguf": q8}},
		{name: "connection dropped mid-file resumes with a range",
			files:  []hubtest.File{{Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true, DropAfter: 100_000}},
			want:   map[string][]byte{"tiny-Q4_K_M.gguf": q4},
			ranged: true},
		{name: "split GGUF pulls every part",
			files: []hubtest.File{
				{Path: "big/big-Q4_K_M-00002-of-00003.gguf", Data: p2, LFS: true},
				{Path: "big/big-Q4_K_M-00001-of-00003.gguf", Data: p1, LFS: true, DropAfter: 1000},
				{Path: "big/big-Q4_K_M-00003-of-00003.gguf", Data: p3, LFS: true},
				{Path: "README.md", Data: []byte("# big")}},
			want: map[string][]byte{"big/big-Q4_K_M-00001-of-00003.gguf": p1,
				"big/big-Q4_K_M-00002-of-00003.gguf": p2, "big/big-Q4_K_M-00003-of-00003.gguf": p3},
			ranged: true},
		{name: "file outside LFS from the Hub itself",
			files: []hubtest.File{{Path: "small.gguf", Data: small}},
			want:  map[string][]byte{"small.gguf": small}},
		{name: "token sent to the Hub",
			files: []hubtest.File{{Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true}},
			token: "hf_secret", send: "hf_secret",
			want: map[string][]byte{"tiny-Q4_K_M.gguf": q4}},
		{name: "private repository without a token",
			files:  []hubtest.File{{Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true}},
			token:  "hf_secret",
			errHas: "set HF_TOKEN"},
		{name: "corrupted file refused",
			files:  []hubtest.File{{Path: "tiny-Q4_K_M.gguf", Data: q4, LFS: true, Served: corrupt}},
			errIs:  hub.ErrChecksum,
			errHas: "was deleted"},
		{name: "quant not in the repository",
			files:  []hubtest.File{{Path: "tiny-Q8_0.gguf", Data: q8, LFS: true}, {Path: "mmproj-tiny-f16.gguf", Data: small, LFS: true}},
			quant:  "Q5_K_S",
			errHas: "no GGUF file for quantisation Q5_K_S; the repository has tiny-Q8_0.gguf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := hubtest.New(repo, tt.files...)
			defer srv.Close()
			srv.Token = tt.token
			cache := t.TempDir()
			prog := &recorder{}
			res, err := hub.Pull(context.Background(), hub.Ref{Repo: repo, Quant: tt.quant}, hub.Options{
				Endpoint: srv.URL, Token: tt.send, CacheDir: cache, Progress: prog, Logger: quiet()})
			dir := filepath.Join(cache, "models--org--tiny-GGUF")
			if tt.errHas != "" || tt.errIs != nil {
				if err == nil {
					t.Fatalf("pulled %v, want an error", res.Files)
				}
				if !strings.Contains(err.Error(), tt.errHas) || (tt.errIs != nil && !errors.Is(err, tt.errIs)) {
					t.Fatalf("error %q, want it to say %q (is %v)", err, tt.errHas, tt.errIs)
				}
				left, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"))
				snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "*"))
				if len(left) > 0 || len(snaps) > 0 {
					t.Errorf("the failed pull left %v %v", left, snaps)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Commit != hubtest.Commit {
				t.Errorf("commit %q", res.Commit)
			}
			if len(res.Files) != len(tt.want) || res.Path != res.Files[0] {
				t.Fatalf("files %v, path %s; want %d", res.Files, res.Path, len(tt.want))
			}
			snap := filepath.Join(dir, "snapshots", hubtest.Commit)
			for name, data := range tt.want {
				p := filepath.Join(snap, filepath.FromSlash(name))
				if !slices.Contains(res.Files, p) {
					t.Errorf("%s not among %v", p, res.Files)
				}
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s: %d bytes, err %v; want the %d bytes served", name, len(got), err, len(data))
				}
				target, err := os.Readlink(p)
				if err != nil || filepath.IsAbs(target) || !strings.Contains(target, "blobs/") {
					t.Errorf("%s links to %q (%v), want a relative link into blobs", name, target, err)
				}
				if prog.last[name] != int64(len(data)) || !slices.Contains(prog.done, name) {
					t.Errorf("progress for %s: last %d, done %v", name, prog.last[name], prog.done)
				}
			}
			if ref, err := os.ReadFile(filepath.Join(dir, "refs", "main")); string(ref) != hubtest.Commit {
				t.Errorf("refs/main %q, %v", ref, err)
			}
			if inc, _ := filepath.Glob(filepath.Join(dir, "blobs", "*.incomplete")); len(inc) > 0 {
				t.Errorf("left %v", inc)
			}
			var ranged bool
			for _, r := range srv.Requests() {
				ranged = ranged || strings.Contains(r, "range=bytes=")
				if strings.HasPrefix(r, "cdn") && strings.HasSuffix(r, " auth") {
					t.Errorf("the token went to the CDN: %s", r)
				}
				if tt.send != "" && strings.HasPrefix(r, "hub") && !strings.HasSuffix(r, " auth") {
					t.Errorf("no token on %s", r)
				}
			}
			if ranged != tt.ranged {
				t.Errorf("ranged request %v, want %v: %q", ranged, tt.ranged, srv.Requests())
			}
		})
	}
}

// TestPullResumesEarlierPartial: a pull interrupted in an earlier run left
// blobs/SHA.incomplete; the next asks only for the rest.
func TestPullResumesEarlierPartial(t *testing.T) {
	const repo = "org/tiny-GGUF"
	data := content(9, 250_000)
	srv := hubtest.New(repo, hubtest.File{Path: "tiny-Q4_K_M.gguf", Data: data, LFS: true})
	defer srv.Close()
	cache := t.TempDir()
	blobs := filepath.Join(cache, "models--org--tiny-GGUF", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	const have = 123_456
	if err := os.WriteFile(filepath.Join(blobs, hubtest.SHA256(data)+".incomplete"), data[:have], 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := hub.Pull(context.Background(), hub.Ref{Repo: repo}, hub.Options{
		Endpoint: srv.URL, CacheDir: cache, Logger: quiet(), Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Errorf("resumed file differs: %d bytes", len(got))
	}
	var gets []string
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r, "cdn GET") {
			gets = append(gets, r)
		}
	}
	if len(gets) != 1 || !strings.HasSuffix(gets[0], "range=bytes=123456-") {
		t.Errorf("downloads %q, want one from byte %d", gets, have)
	}
}

// TestPullCacheAndOffline: a second pull finds the file in the cache and
// downloads nothing; offline, the cache answers without the network, and
// a repository not in it fails clearly.
func TestPullCacheAndOffline(t *testing.T) {
	const repo = "org/tiny-GGUF"
	data := content(7, 50_000)
	srv := hubtest.New(repo, hubtest.File{Path: "tiny-Q4_K_M.gguf", Data: data, LFS: true})
	cache := t.TempDir()
	ref := hub.Ref{Repo: repo}
	first, err := hub.Pull(context.Background(), ref, hub.Options{Endpoint: srv.URL, CacheDir: cache, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	before := len(srv.Requests())
	again, err := hub.Pull(context.Background(), ref, hub.Options{Endpoint: srv.URL, CacheDir: cache, Logger: quiet()})
	if err != nil || again.Path != first.Path {
		t.Fatalf("second pull %v, %v", again, err)
	}
	for _, r := range srv.Requests()[before:] {
		if strings.Contains(r, " GET ") && !strings.Contains(r, "/api/") {
			t.Errorf("second pull downloaded: %s", r)
		}
	}
	srv.Close() // from here on no network
	tests := []struct {
		name    string
		ref     hub.Ref
		offline bool
		errHas  string
	}{
		{"offline cache hit", ref, true, ""},
		{"unreachable Hub falls back to the cache", ref, false, ""},
		{"offline, quant not cached", hub.Ref{Repo: repo, Quant: "Q8_0"}, true, "offline (HF_HUB_OFFLINE)"},
		{"offline, repository not cached", hub.Ref{Repo: "org/other"}, true, "org/other is not in the hub cache"},
		{"unreachable Hub, nothing cached", hub.Ref{Repo: "org/other"}, false, "connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := hub.Pull(context.Background(), tt.ref, hub.Options{
				Endpoint: srv.URL, CacheDir: cache, Offline: tt.offline, Logger: quiet()})
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("error %v, want it to say %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Path != first.Path {
				t.Errorf("path %s, want %s", res.Path, first.Path)
			}
		})
	}
}
