package promptcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

const identity = "model=abc layout=f16/test"

func block(seed byte, n int) Block {
	data := make([]byte, n)
	for i := range data {
		data[i] = seed + byte(i*7)
	}
	toks := make([]int32, 16)
	for i := range toks {
		toks[i] = int32(seed)*100 + int32(i)
	}
	return Block{Parent: uint64(seed) * 31, Tokens: toks, Data: data}
}

func open(t *testing.T, dir string, max int64) *Dir {
	t.Helper()
	d, err := Open(dir, Options{MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func equal(a, b Block) bool {
	return a.Parent == b.Parent && slices.Equal(a.Tokens, b.Tokens) && bytes.Equal(a.Data, b.Data)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, 0).Scope(identity)
	want := block(3, 4096)
	if err := s.Put(42, want); err != nil {
		t.Fatal(err)
	}
	if !s.Has(42) || s.Has(43) {
		t.Fatal("Has is wrong after one Put")
	}
	got, _, err := s.Get(42, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(got, want) {
		t.Fatal("the block read back differs from the one written")
	}
	if _, _, err := s.Get(43, nil); !errors.Is(err, ErrMiss) {
		t.Fatalf("Get of a block never written: %v, want ErrMiss", err)
	}
	// A restart finds it.
	got, _, err = open(t, dir, 0).Scope(identity).Get(42, nil)
	if err != nil || !equal(got, want) {
		t.Fatalf("after reopening: %v", err)
	}
}

// TestBadFilesAreRefused damages a stored block in every way a disk, a
// kill or a careless user can and checks that the read is refused, the
// file deleted and the next read a plain miss.
func TestBadFilesAreRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, d *Dir)
		scope  string
	}{
		{"flipped data byte", func(t *testing.T, path string, _ *Dir) { flip(t, path, -100) }, identity},
		{"flipped header byte", func(t *testing.T, path string, _ *Dir) { flip(t, path, 21) }, identity},
		{"flipped checksum", func(t *testing.T, path string, _ *Dir) { flip(t, path, -1) }, identity},
		{"truncated", func(t *testing.T, path string, _ *Dir) { truncate(t, path, 1000) }, identity},
		{"truncated to a few bytes", func(t *testing.T, path string, _ *Dir) { truncate(t, path, 5) }, identity},
		{"empty", func(t *testing.T, path string, _ *Dir) { truncate(t, path, 0) }, identity},
		{"zeros", func(t *testing.T, path string, _ *Dir) {
			if err := os.WriteFile(path, make([]byte, 5000), 0o644); err != nil {
				t.Fatal(err)
			}
		}, identity},
		{"another block's file", func(t *testing.T, path string, d *Dir) {
			s := d.Scope(identity)
			if err := s.Put(7, block(9, 4096)); err != nil {
				t.Fatal(err)
			}
			rename(t, filepath.Join(d.path, fileKey{s.key, 7}.name()), path)
		}, identity},
		{"foreign model", func(t *testing.T, path string, d *Dir) {
			s := d.Scope("another model")
			if err := s.Put(42, block(3, 4096)); err != nil {
				t.Fatal(err)
			}
			rename(t, filepath.Join(d.path, fileKey{s.key, 42}.name()), path)
		}, identity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			d := open(t, dir, 0)
			s := d.Scope(identity)
			if err := s.Put(42, block(3, 4096)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, fileKey{s.key, 42}.name())
			tt.damage(t, path, d)
			// Reopened, as after a restart: the index knows the file
			// by name and size only.
			d = open(t, dir, 0)
			s = d.Scope(tt.scope)
			if !s.Has(42) {
				t.Fatal("the damaged file is not indexed")
			}
			_, _, err := s.Get(42, nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get of a damaged block: %v, want ErrCorrupt", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the damaged file is still there: %v", err)
			}
			if _, _, err := s.Get(42, nil); !errors.Is(err, ErrMiss) {
				t.Fatalf("second Get: %v, want ErrMiss", err)
			}
			if st := d.Stats(); st.Refused != 1 {
				t.Fatalf("Refused = %d, want 1", st.Refused)
			}
		})
	}
}

func flip(t *testing.T, path string, at int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(data)
	}
	data[at] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func TestSizeBoundEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, 0).Scope(identity)
	if err := s.Put(1, block(1, 1000)); err != nil {
		t.Fatal(err)
	}
	size := s.d.Stats().Bytes
	dir2 := t.TempDir()
	d := open(t, dir2, 3*size) // room for three blocks
	s = d.Scope(identity)
	for i := range uint64(3) {
		if err := s.Put(i, block(byte(i), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Get(0, nil); err != nil { // 0 is now the most recent
		t.Fatal(err)
	}
	if err := s.Put(3, block(3, 1000)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true, true} {
		if s.Has(uint64(i)) != want {
			t.Errorf("block %d kept = %v, want %v", i, !want, want)
		}
	}
	if st := d.Stats(); st.Blocks != 3 || st.Bytes != 3*size || st.Evicted != 1 {
		t.Fatalf("stats %+v, want 3 blocks of %d bytes, 1 evicted", st, 3*size)
	}
	files, _ := filepath.Glob(filepath.Join(dir2, "*"+suffix))
	if len(files) != 3 {
		t.Fatalf("%d files on disk, want 3", len(files))
	}

	// A restart with a smaller bound keeps the most recently used, by
	// the files' times.
	old := time.Now().Add(-time.Hour)
	for i, age := range []time.Duration{3, 0, 2, 1} { // 1 is gone; 0 the oldest now, 3 the newest
		if i == 1 {
			continue
		}
		mt := old.Add(-age * time.Minute)
		os.Chtimes(filepath.Join(dir2, fileKey{s.key, uint64(i)}.name()), mt, mt)
	}
	s = open(t, dir2, 2*size).Scope(identity)
	for i, want := range []bool{false, false, true, true} {
		if s.Has(uint64(i)) != want {
			t.Errorf("after reopening: block %d kept = %v, want %v", i, !want, want)
		}
	}
}

func TestOpenCleansUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, data := range map[string]string{
		tempPrefix + "123": "half a block", // a killed writer's
		"notes.txt":        "not ours",
		"0123-4567.kvb":    "a name that is not a key",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := open(t, dir, 0)
	if st := d.Stats(); st.Blocks != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v of a directory without blocks", st)
	}
	if _, err := os.Stat(filepath.Join(dir, tempPrefix+"123")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the temporary file was not removed")
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal("a file that is not a block was removed")
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	d := open(t, t.TempDir(), 20*5000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			s := d.Scope(fmt.Sprint("model ", w%2))
			var buf []byte
			for i := range 50 {
				k := uint64(i % 13)
				want := block(byte(k), 4000)
				if err := s.Put(k, want); err != nil {
					t.Error(err)
					return
				}
				var got Block
				var err error
				got, buf, err = s.Get(k, buf)
				// Another writer may have evicted or replaced it; what
				// is read is never a torn block.
				if err == nil && !equal(got, want) {
					t.Errorf("block %d read back wrong", k)
				}
				if errors.Is(err, ErrCorrupt) {
					t.Errorf("block %d: %v", k, err)
				}
			}
		})
	}
	wg.Wait()
	if st := d.Stats(); st.Bytes > 20*5000 {
		t.Fatalf("%d bytes stored past the bound", st.Bytes)
	}
}
