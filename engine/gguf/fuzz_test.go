package gguf

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"rill/engine/quant"
	"rill/internal/shared"
)

// writerSeed returns a small Writer-made file with every kind of value and
// a few tensors, aligned to align.
func writerSeed(t testing.TB, align uint32) []byte {
	t.Helper()
	w := NewWriter()
	for _, e := range everyValue {
		if err := w.Set(e.key, e.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Set(KeyAlignment, align); err != nil {
		t.Fatal(err)
	}
	for i, tt := range testTensors {
		if err := w.AddTensor(tt.name, tt.typ, tt.shape, tensorBytes(t, tt, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// realHeader returns the first n bytes of a real model, or nil when the
// shared models are absent (a fuzz seed is optional, so no skip here).
func realHeader(name string, n int) []byte {
	path, ok := shared.Lookup("models", name)
	if !ok {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return data[:min(n, len(data))]
}

func FuzzParse(f *testing.F) {
	for _, align := range []uint32{1, 32} {
		f.Add(writerSeed(f, align))
	}
	small := NewWriter()
	_ = small.Set("general.architecture", "llama")
	_ = small.AddTensor("w", quant.Q8_0, []int{32}, make([]byte, 34))
	var buf bytes.Buffer
	if _, err := small.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	if h := realHeader("stories260K.gguf", 4096); h != nil {
		f.Add(h)
	}
	for _, tc := range corruptCases {
		data, _ := tc.build()
		f.Add(data)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %T is not a *FormatError: %v", err, err)
			}
			return
		}
		checkInvariants(t, file, data)
		// A valid file may ask for alignment up to 2^31; writing one back
		// would pad to gigabytes, which proves nothing more.
		if file.Alignment <= 1<<16 {
			rewriteFixpoint(t, file)
		}
	})
}

// checkInvariants checks what Parse promises about a file it accepted.
func checkInvariants(t *testing.T, f *File, data []byte) {
	a := int64(f.Alignment)
	if a <= 0 || a&(a-1) != 0 || f.DataOffset%a != 0 {
		t.Fatalf("alignment %d, data offset %d", a, f.DataOffset)
	}
	if f.Metadata.Len() > len(data)/minKVBytes || len(f.Tensors) > len(data)/minTensorBytes {
		t.Fatalf("%d keys and %d tensors from %d bytes", f.Metadata.Len(), len(f.Tensors), len(data))
	}
	for _, k := range f.Metadata.Keys() {
		v, ok := f.Metadata.Value(k)
		if !ok || !v.Type().Valid() {
			t.Fatalf("key %q: %v %s", k, ok, v.Type())
		}
		_ = v.String()
		_ = v.Any()
	}
	for _, ti := range f.Tensors {
		size, err := dataSize(ti.Type, ti.Shape)
		if err != nil || size != ti.Size || ti.Offset%a != 0 {
			t.Fatalf("tensor %q: size %d (recomputed %d, %v), offset %d", ti.Name, ti.Size, size, err, ti.Offset)
		}
		if ti.Elems() < 0 {
			t.Fatalf("tensor %q: %d elements", ti.Name, ti.Elems())
		}
	}
	checkViews(t, f, data)
}

// rewriteFixpoint writes f through a Writer, parses the result and writes it
// again: both writes must give the same bytes.
func rewriteFixpoint(t *testing.T, f *File) {
	write := func(f *File) []byte {
		w := NewWriter()
		for _, k := range f.Metadata.Keys() {
			v, _ := f.Metadata.Value(k)
			if err := w.Set(k, v); err != nil {
				return nil // empty keys are valid input but not writable
			}
		}
		for _, ti := range f.Tensors {
			tv, _ := f.Tensor(ti.Name)
			if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, tv.Data); err != nil {
				return nil
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		return buf.Bytes()
	}
	first := write(f)
	if first == nil {
		return
	}
	g, err := Parse(first)
	if err != nil {
		t.Fatalf("Parse of the rewritten file: %v", err)
	}
	if !slices.Equal(g.Metadata.Keys(), f.Metadata.Keys()) || len(g.Tensors) != len(f.Tensors) {
		t.Fatalf("rewritten file has keys %q and %d tensors, want %q and %d",
			g.Metadata.Keys(), len(g.Tensors), f.Metadata.Keys(), len(f.Tensors))
	}
	if second := write(g); !bytes.Equal(first, second) {
		t.Fatal("writing the rewritten file again changed its bytes")
	}
}
