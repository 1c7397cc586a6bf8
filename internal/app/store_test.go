package app

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rill/config"
	"rill/internal/wait"
	"rill/store"
	"rill/store/postgres"
	redisstore "rill/store/redis"
	"rill/store/sqlite"
	"rill/store/testserver"
)

func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		spec    StoreSpec
		want    string // the store's type, or "" for an error
		wantErr string
	}{
		{"default", StoreSpec{}, "memory", ""},
		{"memory", StoreSpec{Backend: "memory"}, "memory", ""},
		{"data dir", StoreSpec{DataDir: filepath.Join(dir, "a")}, "sqlite", ""},
		{"sqlite", StoreSpec{Backend: "sqlite", DataDir: filepath.Join(dir, "b")}, "sqlite", ""},
		{"sqlite without a dir", StoreSpec{Backend: "sqlite"}, "", "needs a data directory"},
		{"memory with a dir", StoreSpec{Backend: "memory", DataDir: dir}, "", "store memory keeps nothing"},
		{"a word", StoreSpec{Backend: "mysql"}, "", `store "mysql": want memory, sqlite, or a redis:// or postgres:// URL`},
		{"unknown scheme", StoreSpec{Backend: "mysql://u:secret@h/db"}, "", `unknown scheme "mysql"`},
		{"a URL and a dir", StoreSpec{Backend: "redis://127.0.0.1:1/0", DataDir: dir}, "", "keeps nothing in the data directory"},
		{"no redis there", StoreSpec{Backend: "redis://127.0.0.1:1/0"}, "", "redis store"},
		{"no postgres there", StoreSpec{Backend: "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2"}, "", "postgres store"},
		{"redis", StoreSpec{Backend: "redis"}, "redis", ""},          // the URL of a server started below
		{"postgres", StoreSpec{Backend: "postgres"}, "postgres", ""}, // likewise
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.spec.Backend {
			case "redis":
				tc.spec.Backend = testserver.StartRedis(t, testserver.RedisOptions{}).URL(0)
			case "postgres":
				tc.spec.Backend = testserver.StartPostgres(t, false).NewDatabase(t)
			}
			s, where, err := OpenStore(context.Background(), tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("open: %v, want an error with %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got string
			switch s.(type) {
			case *store.Memory:
				got = "memory"
			case *sqlite.Store:
				got = "sqlite"
			case *redisstore.Store:
				got = "redis"
			case *postgres.Store:
				got = "postgres"
			}
			if got != tc.want || !strings.HasPrefix(where, tc.want) && !strings.Contains(where, "://") {
				t.Errorf("opened %T (%q), want %s", s, where, tc.want)
			}
			if got == "sqlite" {
				if _, err := os.Stat(filepath.Join(tc.spec.DataDir, sqlite.FileName)); err != nil {
					t.Error(err)
				}
			}
			// It is a working store.
			if err := s.PutStream(context.Background(), store.Stream{ID: "s", Status: "queued"}); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestStoreSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		file    string // a configuration file's store keys, "" for no file
		want    StoreSpec
		wantErr string
	}{
		{"defaults", nil, "", StoreSpec{Keep: store.Retention{MaxResponses: 1024}}, ""},
		{"flags", []string{"--store", "sqlite", "--data-dir", "/d", "--store-max-age", "24h", "--store-max-bytes", "1GiB", "--responses-store", "10"}, "",
			StoreSpec{Backend: "sqlite", DataDir: "/d", Keep: store.Retention{MaxAge: 24 * time.Hour, MaxBytes: 1 << 30, MaxResponses: 10}}, ""},
		{"file", nil, "data_dir: /f\nstore: {backend: 'redis://h:6379/0', max_age: 1h, max_bytes: 1MiB, max_responses: 5}",
			StoreSpec{Backend: "redis://h:6379/0", DataDir: "/f", Keep: store.Retention{MaxAge: time.Hour, MaxBytes: 1 << 20, MaxResponses: 5}}, ""},
		{"flags over the file", []string{"--store", "memory", "--store-max-age", "2h", "--responses-store", "7"},
			"store: {backend: sqlite, max_age: 1h, max_responses: 5}",
			StoreSpec{Backend: "memory", Keep: store.Retention{MaxAge: 2 * time.Hour, MaxResponses: 7}}, ""},
		{"--responses-store given as its default", []string{"--responses-store", "1024"}, "store: {max_responses: 5}",
			StoreSpec{Keep: store.Retention{MaxResponses: 1024}}, ""},
		{"negative age", []string{"--store-max-age", "-1s"}, "", StoreSpec{}, "must not be negative"},
		{"negative size", []string{"--store-max-bytes", "-1"}, "", StoreSpec{}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			responses := fs.Int("responses-store", 1024, "")
			f := registerStoreFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var file *config.File
			if tc.file != "" {
				var err error
				if file, err = config.Parse([]byte("models: [{id: m, native: {model: embedded}}]\n"+tc.file), os.LookupEnv); err != nil {
					t.Fatal(err)
				}
			}
			got, err := f.spec(fs, file, *responses)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("spec: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("spec %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// sweepCounter counts the sweeps of a store.
type sweepCounter struct {
	store.Store
	n atomic.Int64
}

func (c *sweepCounter) Sweep(ctx context.Context, now time.Time) (int, int, error) {
	c.n.Add(1)
	return c.Store.Sweep(ctx, now)
}

func TestSweepStore(t *testing.T) {
	s := &sweepCounter{Store: store.NewMemory(store.Retention{MaxAge: time.Hour})}
	old := time.Now().Add(-2 * time.Hour)
	if err := s.PutResponse(context.Background(), store.Response{ID: "old", Created: old}); err != nil {
		t.Fatal(err)
	}
	stop := sweepStore(s, 5*time.Millisecond, slog.New(slog.DiscardHandler))
	wait.Options{Bound: 10 * time.Second, Interval: 5 * time.Millisecond}.For(t, "three sweeps", func() bool { return s.n.Load() >= 3 })
	stop()
	n := s.n.Load()
	time.Sleep(30 * time.Millisecond)
	if s.n.Load() != n {
		t.Errorf("%d sweeps after stop", s.n.Load()-n)
	}
	if _, err := s.GetResponse(context.Background(), "old"); err != store.ErrNotFound {
		t.Errorf("a response past max age after the sweeps: %v", err)
	}
}

// TestServeDataDir runs `rill serve --data-dir`: the sqlite database is
// made there, and closed at shutdown so that it opens again.
func TestServeDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, []string{"--addr", addr, "--data-dir", dir, "--store-max-age", "24h", "--log-level", "error"})
	}()
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
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	s, err := sqlite.Open(context.Background(), dir, store.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := s.IntegrityCheck(context.Background()); err != nil || ok != "ok" {
		t.Errorf("integrity_check after serve: %q, %v", ok, err)
	}
}

func TestServeStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "sqlite"}, "needs a data directory (--data-dir)"},
		{[]string{"--store", "mysql://h/db"}, `unknown scheme "mysql"`},
		{[]string{"--store-max-bytes", "lots"}, "flag -store-max-bytes"},
		{[]string{"--store-max-age", "-1h"}, "must not be negative"},
		{[]string{"--config", writeConfig(t, "models: [{id: m, native: {model: embedded}}]\nstore: {backend: sqlite}\n")}, "needs a data directory"},
	} {
		err := Serve(context.Background(), append(tc.args, "--addr", "127.0.0.1:0", "--log-level", "error"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
