package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"rill/engine/quant"
)

// TestEvict: evicting a tensor's pages from a mapped file, or memory that is
// not the file's, or anything of a parsed buffer, never changes what any
// view reads.
func TestEvict(t *testing.T) {
	t.Parallel()
	w := NewWriter()
	// Three tensors of a few pages each, so that whole pages lie inside
	// the middle one and pages are shared at its edges.
	const n = 3*4096 + 100
	want := map[string][]byte{}
	for i, name := range []string{"a", "b", "c"} {
		d := make([]byte, n)
		for j := range d {
			d[j] = byte(i*7 + j*13)
		}
		want[name] = d
		if err := w.AddTensor(name, quant.F32, []int{n / 4}, d); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "evict.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	mapped, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	parsed, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*File{mapped, parsed} {
		b, _ := f.Tensor("b")
		f.Evict(b.Data)
		f.Evict(b.Data[1:5000])
		f.Evict(make([]byte, 10000)) // not the file's memory
		f.Evict(nil)
		for name, d := range want {
			got, ok := f.Tensor(name)
			if !ok || !bytes.Equal(got.Data, d[:n/4*4]) {
				t.Fatalf("tensor %s reads differently after Evict", name)
			}
		}
	}
}
