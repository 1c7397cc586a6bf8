package hub

import (
	"cmp"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT does not replace it.
const DefaultEndpoint = "https://huggingface.co"

// Options says where the Hub and the cache are. The zero value means the
// public Hub, the default cache (~/.cache/huggingface/hub), no token,
// network allowed; Env fills one from the environment variables
// huggingface_hub reads.
type Options struct {
	// Endpoint is the Hub's base URL; default DefaultEndpoint.
	Endpoint string
	// Token, when set, is sent as "Authorization: Bearer" to the Endpoint
	// (never to the host a download is redirected to).
	Token string
	// CacheDir is the hub cache (the folder holding models--org--repo);
	// default CacheDir's answer for the process's environment.
	CacheDir string
	// Offline forbids the network: a reference resolves from the cache or
	// fails.
	Offline bool
	// Revision is the branch (or commit) to pull; default "main".
	Revision string
	// HTTP is the client for the API and the downloads; default a client
	// with no overall timeout (a model takes as long as it takes).
	HTTP *http.Client
	// Progress hears the downloads' progress; default none.
	Progress Progress
	// Logger logs what Pull does (a download starting, a resume, a cache
	// hit); default slog.Default().
	Logger *slog.Logger
	// Retries is how many times a download that breaks off is resumed
	// within one Pull before it gives up (the partial file stays for the
	// next Pull); 0 means 5, negative means none.
	Retries int
}

// Progress hears how downloads go; Pull calls it from its own goroutine,
// one file at a time.
type Progress interface {
	// Update says that done of total bytes of file are on disk (done
	// counts bytes resumed from an earlier attempt; total is -1 if
	// unknown).
	Update(file string, done, total int64)
	// Done says file is complete and verified, or failed with err.
	Done(file string, err error)
}

// Env returns the Options that the environment getenv reads (os.Getenv,
// or a map in tests) describes: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, and
// the cache folder (CacheDir).
func Env(getenv func(string) string) Options {
	return Options{
		Endpoint: getenv("HF_ENDPOINT"),
		Token:    getenv("HF_TOKEN"),
		CacheDir: CacheDir(getenv),
		Offline:  truthy(getenv("HF_HUB_OFFLINE")),
	}
}

// truthy reads a boolean environment variable as huggingface_hub does.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "on", "yes", "true":
		return true
	}
	return false
}

// CacheDir is the hub cache folder that getenv's environment names, in
// huggingface_hub's order: $HF_HUB_CACHE, $HF_HOME/hub,
// $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub. It is ""
// when none of them is set and there is no home folder.
func CacheDir(getenv func(string) string) string {
	if d := getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// withDefaults fills o's zero fields.
func (o Options) withDefaults() (Options, error) {
	o.Endpoint = strings.TrimRight(cmp.Or(o.Endpoint, DefaultEndpoint), "/")
	if o.CacheDir == "" {
		o.CacheDir = CacheDir(os.Getenv)
	}
	if o.CacheDir == "" {
		return o, errors.New("no hub cache folder: set HF_HOME or HF_HUB_CACHE")
	}
	o.Revision = cmp.Or(o.Revision, "main")
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Retries == 0 {
		o.Retries = 5
	}
	return o, nil
}
