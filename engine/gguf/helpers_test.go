package gguf

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"rill/internal/shared"
)

// raw assembles GGUF bytes by hand, including bytes no Writer would produce.
type raw struct{ b []byte }

func rawHeader(version uint32, nTensors, nKV uint64) *raw {
	r := &raw{b: []byte(Magic)}
	return r.u32(version).u64(nTensors).u64(nKV)
}

func (r *raw) u8(x uint8) *raw   { r.b = append(r.b, x); return r }
func (r *raw) u32(x uint32) *raw { r.b = binary.LittleEndian.AppendUint32(r.b, x); return r }
func (r *raw) u64(x uint64) *raw { r.b = binary.LittleEndian.AppendUint64(r.b, x); return r }
func (r *raw) str(s string) *raw { return r.u64(uint64(len(s))).raw([]byte(s)) }
func (r *raw) raw(b []byte) *raw { r.b = append(r.b, b...); return r }

// at returns the current length: the offset of whatever is appended next.
func (r *raw) at() int64 { return int64(len(r.b)) }

// kvU32 appends a UINT32 key/value pair.
func (r *raw) kvU32(key string, x uint32) *raw {
	return r.str(key).u32(uint32(TypeUint32)).u32(x)
}

// tensor appends a tensor info.
func (r *raw) tensor(name string, dims []uint64, typ uint32, off uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(typ).u64(off)
}

// padTo appends zeros up to a multiple of align.
func (r *raw) padTo(align int) *raw {
	for len(r.b)%align != 0 {
		r.b = append(r.b, 0)
	}
	return r
}

// zeros appends n zero bytes.
func (r *raw) zeros(n int) *raw { r.b = append(r.b, make([]byte, n)...); return r }

// sharedDir returns the shared data folder, skipping the test when absent.
func sharedDir(t testing.TB) string { return shared.Root(t) }

// modelPath returns the path of a model in shared/models, skipping the test
// when it is absent.
func modelPath(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(sharedDir(t), "models", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("model %s not available: %v", name, err)
	}
	return p
}

// checkViews fails unless every tensor view of f lies inside data, has the
// tensor's size, and starts at DataOffset+Offset.
func checkViews(t testing.TB, f *File, data []byte) {
	t.Helper()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	for _, ti := range f.Tensors {
		v, ok := f.Tensor(ti.Name)
		if !ok {
			t.Fatalf("tensor %q listed but not found", ti.Name)
		}
		if int64(len(v.Data)) != ti.Size || cap(v.Data) != len(v.Data) {
			t.Fatalf("tensor %q: len %d cap %d, size %d", ti.Name, len(v.Data), cap(v.Data), ti.Size)
		}
		if len(v.Data) == 0 {
			continue
		}
		start := int64(uintptr(unsafe.Pointer(unsafe.SliceData(v.Data))) - base)
		if start < 0 || start+int64(len(v.Data)) > int64(len(data)) {
			t.Fatalf("tensor %q: view [%d, %d) outside the %d input bytes", ti.Name, start, start+int64(len(v.Data)), len(data))
		}
		if start != f.DataOffset+ti.Offset {
			t.Fatalf("tensor %q: view starts at %d, want %d", ti.Name, start, f.DataOffset+ti.Offset)
		}
		if !bytes.Equal(v.Data, data[start:start+ti.Size]) {
			t.Fatalf("tensor %q: view bytes differ from the input", ti.Name)
		}
	}
}
