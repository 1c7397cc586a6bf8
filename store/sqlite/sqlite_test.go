package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"rill/store"
	"rill/store/storetest"
)

func TestContract(t *testing.T) {
	var mu sync.Mutex
	dirs := map[store.Store]string{}
	keeps := map[store.Store]store.Retention{}
	open := func(t *testing.T, dir string, keep store.Retention) store.Store {
		s, err := Open(context.Background(), dir, keep)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		dirs[s], keeps[s] = dir, keep
		mu.Unlock()
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, keep store.Retention) store.Store {
			return open(t, t.TempDir(), keep)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			dir, keep := dirs[s], keeps[s]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, dir, keep)
		},
	})
}

func TestSchemaVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		set     int // user_version written before the open; 0 leaves it
		wantErr bool
	}{
		{"new", 0, false},
		{"again", 0, false},
		{"newer", schemaVersion + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set != 0 {
				s, err := Open(ctx, dir, store.Retention{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.DB().ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", tc.set)); err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			s, err := Open(ctx, dir, store.Retention{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("open: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			defer s.Close()
			var v int
			if err := s.DB().QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
				t.Errorf("user_version %d, %v; want %d", v, err, schemaVersion)
			}
			for _, name := range []string{FileName, FileName + "-wal"} {
				if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v, %v; want mode 0600", name, fi.Mode().Perm(), err)
				}
			}
			var mode string
			if err := s.DB().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode %q, %v; want wal", mode, err)
			}
		})
	}
}

// killDirEnv makes the test binary a writer that TestKill9 kills.
const killDirEnv = "RILL_SQLITE_KILL9_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(killDirEnv); dir != "" {
		os.Exit(killWriter(dir))
	}
	os.Exit(m.Run())
}

// killWriter appends batches of 16 events to stream "s" for ever and
// prints the last seq of each batch once AppendEvents has returned.
func killWriter(dir string) int {
	ctx := context.Background()
	s, err := Open(ctx, dir, store.Retention{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.PutStream(ctx, store.Stream{ID: "s", Status: "in_progress"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	for seq := int64(0); ; {
		batch := make([]store.Event, 16)
		for i := range batch {
			batch[i] = store.Event{Seq: seq, Data: []byte(strconv.FormatInt(seq, 10))}
			seq++
		}
		if err := s.AppendEvents(ctx, "s", batch); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(out, seq-1)
		out.Flush()
	}
}

// TestKill9 kills a writer with SIGKILL in the middle of its appends and
// checks that the database opens sound and holds every event the writer
// was told was stored, with no gap.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	reported := int64(-1)
	deadline := time.Now().Add(20 * time.Second)
	for reported < 16*200 && time.Now().Before(deadline) && lines.Scan() {
		if reported, err = strconv.ParseInt(lines.Text(), 10, 64); err != nil {
			t.Fatalf("writer said %q", lines.Text())
		}
	}
	// Kill it in the middle of a write: it writes without pause.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Take what it reported up to its death.
	for lines.Scan() {
		if n, err := strconv.ParseInt(lines.Text(), 10, 64); err == nil {
			reported = n
		}
	}
	cmd.Wait()
	if reported < 0 {
		t.Fatal("the writer reported no append")
	}

	ctx := context.Background()
	s, err := Open(ctx, dir, store.Retention{})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	if ok, err := s.IntegrityCheck(ctx); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}
	evs, err := s.Events(ctx, "s", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i) || string(ev.Data) != strconv.Itoa(i) {
			t.Fatalf("event %d: seq %d data %q: a gap or a torn write", i, ev.Seq, ev.Data)
		}
	}
	if got := int64(len(evs)) - 1; got < reported {
		t.Errorf("last event %d, but the writer was told %d was stored", got, reported)
	}
	t.Logf("writer reported up to seq %d; the reopened log holds %d events", reported, len(evs))
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		s, err := Open(context.Background(), b.TempDir(), store.Retention{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}

// TestShared: two stores over one file, as two processes on one host
// would hold it, see each other's writes.
func TestShared(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(context.Background(), dir, store.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(context.Background(), dir, store.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storetest.RunShared(t, a, b)
}

// TestLargeAppend appends more events in one call than one INSERT takes.
func TestLargeAppend(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir(), store.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutStream(ctx, store.Stream{ID: "s", Status: "in_progress"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1201, 3} { // the second call repeats 1198..1200 and adds nothing
		evs := make([]store.Event, n)
		for i := range evs {
			seq := int64(i)
			if n == 3 {
				seq += 1198
			}
			evs[i] = store.Event{Seq: seq, Data: []byte(strconv.FormatInt(seq, 10))}
		}
		if err := s.AppendEvents(ctx, "s", evs); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.Events(ctx, "s", -1, 0)
	if err != nil || len(evs) != 1201 || evs[1200].Seq != 1200 || string(evs[600].Data) != "600" {
		t.Fatalf("%d events, %v", len(evs), err)
	}
}
