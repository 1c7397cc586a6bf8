package gguf

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rill/engine/quant"
)

// dumpKV is one key/value line of gguf_dump.py output.
type dumpKV struct {
	key, typ string // typ as printed: UINT32, STRING, ...
	array    bool
	count    int
	value    string // the printed value (Python repr, arrays abbreviated)
}

// dumpTensor is one tensor line of gguf_dump.py output.
type dumpTensor struct {
	name  string
	elems int64
	dims  []int // always 4, padded with 1
	typ   string
}

var (
	dumpKVLine     = regexp.MustCompile(`^\s*\d+: (\[)?([A-Z0-9]+)\]?\s*\|\s*(\d+) \| (\S+) = (.*)$`)
	dumpTensorLine = regexp.MustCompile(`^\s*\d+:\s+(\d+) \|\s*([\d, ]+?)\s*\| (\S+)\s*\| (\S+)$`)
	pyString       = regexp.MustCompile(`'((?:[^'\\]|\\.)*)'`)
)

// readDump parses the gguf_dump.py text beside a model.
func readDump(t *testing.T, path string) ([]dumpKV, []dumpTensor) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("dump %s not available: %v", path, err)
	}
	var kvs []dumpKV
	var tensors []dumpTensor
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if m := dumpKVLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			kvs = append(kvs, dumpKV{key: m[4], typ: m[2], array: m[1] == "[", count: n, value: m[5]})
			continue
		}
		if m := dumpTensorLine.FindStringSubmatch(line); m != nil {
			elems, _ := strconv.ParseInt(m[1], 10, 64)
			var dims []int
			for _, d := range strings.Split(m[2], ",") {
				v, err := strconv.Atoi(strings.TrimSpace(d))
				if err != nil {
					t.Fatalf("dump line %q: %v", line, err)
				}
				dims = append(dims, v)
			}
			tensors = append(tensors, dumpTensor{name: m[4], elems: elems, dims: dims, typ: m[3]})
		}
	}
	if len(kvs) == 0 || len(tensors) == 0 {
		t.Fatalf("dump %s: found %d keys and %d tensors; format not understood", path, len(kvs), len(tensors))
	}
	return kvs, tensors
}

// TestModelsAgainstDump opens the real models and compares everything
// gguf_dump.py printed about them.
func TestModelsAgainstDump(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model      string
		context    uint64
		vocab      int
		tensors    int
		matrixType quant.Type // type of token_embd.weight
	}{
		{"stories260K", 2048, 512, 48, quant.F32},
		{"llama-2-tiny-random", 4096, 32000, 12, quant.F16},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			path := modelPath(t, tc.model+".gguf")
			kvs, tensors := readDump(t, strings.TrimSuffix(path, ".gguf")+".dump.txt")
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			// Facts from SOURCES.md.
			if n, ok := f.Metadata.Uint("llama.context_length"); !ok || n != tc.context {
				t.Errorf("llama.context_length = %d, %v; want %d", n, ok, tc.context)
			}
			if toks, ok := f.Metadata.Strings("tokenizer.ggml.tokens"); !ok || len(toks) != tc.vocab || toks[1] != "<s>" {
				t.Errorf("tokenizer.ggml.tokens: %d tokens, %v", len(toks), ok)
			}
			if s, ok := f.Metadata.Float32s("tokenizer.ggml.scores"); !ok || len(s) != tc.vocab {
				t.Errorf("tokenizer.ggml.scores: %d, %v", len(s), ok)
			}
			if tt, ok := f.Metadata.Int32s("tokenizer.ggml.token_type"); !ok || len(tt) != tc.vocab {
				t.Errorf("tokenizer.ggml.token_type: %d, %v", len(tt), ok)
			}
			if len(f.Tensors) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(f.Tensors), tc.tensors)
			}
			if ti, ok := f.Tensor("token_embd.weight"); !ok || ti.Type != tc.matrixType || ti.Shape[1] != tc.vocab {
				t.Errorf("token_embd.weight: %v %s %v", ok, ti.Type, ti.Shape)
			}

			compareDumpKVs(t, f, kvs)
			compareDumpTensors(t, f, tensors)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			last := f.Tensors[len(f.Tensors)-1]
			if end := alignUp(f.DataOffset+last.Offset+last.Size, int64(f.Alignment)); end != st.Size() {
				t.Errorf("last tensor ends at %d (aligned), file has %d bytes", end, st.Size())
			}
			checkFiniteF32(t, f)
		})
	}
}

func compareDumpKVs(t *testing.T, f *File, kvs []dumpKV) {
	t.Helper()
	var keys []string
	for _, kv := range kvs {
		switch kv.key {
		case "GGUF.version":
			if kv.value != strconv.Itoa(int(f.Version)) {
				t.Errorf("version %d, dump says %s", f.Version, kv.value)
			}
			continue
		case "GGUF.tensor_count":
			if kv.value != strconv.Itoa(len(f.Tensors)) {
				t.Errorf("%d tensors, dump says %s", len(f.Tensors), kv.value)
			}
			continue
		case "GGUF.kv_count":
			if kv.value != strconv.Itoa(f.Metadata.Len()) {
				t.Errorf("%d keys, dump says %s", f.Metadata.Len(), kv.value)
			}
			continue
		}
		keys = append(keys, kv.key)
		v, ok := f.Metadata.Value(kv.key)
		if !ok {
			t.Errorf("key %q missing", kv.key)
			continue
		}
		typ := v.Type()
		if kv.array {
			typ = v.ElemType()
			if v.Type() != TypeArray || v.Len() != kv.count {
				t.Errorf("key %q: %s of %d, dump says array of %d", kv.key, v.Type(), v.Len(), kv.count)
			}
		}
		if typ.String() != kv.typ {
			t.Errorf("key %q: type %s, dump says %s", kv.key, typ, kv.typ)
		}
		compareDumpValue(t, kv, v)
	}
	if got := f.Metadata.Keys(); strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Errorf("keys in file order %q, dump has %q", got, keys)
	}
}

// compareDumpValue compares a printed value: scalars fully, arrays by their
// first printed elements.
func compareDumpValue(t *testing.T, kv dumpKV, v Value) {
	t.Helper()
	printed := []string{kv.value}
	if kv.array {
		body := strings.TrimSuffix(strings.TrimPrefix(kv.value, "["), ", ...]")
		if kv.typ == "STRING" {
			printed = nil
			for _, m := range pyString.FindAllStringSubmatch(body, -1) {
				printed = append(printed, "'"+m[1]+"'")
			}
		} else {
			printed = strings.Split(body, ", ")
		}
	}
	for i, p := range printed {
		e := v
		if kv.array {
			if i >= v.Len() {
				t.Errorf("key %q: dump prints element %d of %d", kv.key, i, v.Len())
				return
			}
			e = v.index(i)
		}
		switch x := e.x.(type) {
		case string:
			if want := "'" + x + "'"; p != want {
				t.Errorf("key %q[%d]: %s, dump says %s", kv.key, i, want, p)
			}
		case float32:
			d, err := strconv.ParseFloat(p, 64)
			if err != nil || float32(d) != x {
				t.Errorf("key %q[%d]: %v, dump says %s", kv.key, i, x, p)
			}
		default:
			if s := e.String(); s != p {
				t.Errorf("key %q[%d]: %s, dump says %s", kv.key, i, s, p)
			}
		}
	}
}

func compareDumpTensors(t *testing.T, f *File, tensors []dumpTensor) {
	t.Helper()
	if len(tensors) != len(f.Tensors) {
		t.Fatalf("%d tensors, dump lists %d", len(f.Tensors), len(tensors))
	}
	for i, d := range tensors {
		ti := f.Tensors[i]
		dims := append([]int(nil), ti.Shape...)
		for len(dims) < 4 {
			dims = append(dims, 1)
		}
		if ti.Name != d.name || ti.Type.String() != d.typ || ti.Elems() != d.elems || !slices.Equal(dims, d.dims) {
			t.Errorf("tensor %d: %s %s %v (%d elements), dump says %s %s %v (%d)",
				i, ti.Name, ti.Type, ti.Shape, ti.Elems(), d.name, d.typ, d.dims, d.elems)
		}
	}
}

// checkFiniteF32 checks that every F32 tensor of a real model decodes to
// finite numbers: a wrong data offset would read padding or other tensors.
func checkFiniteF32(t *testing.T, f *File) {
	t.Helper()
	for _, ti := range f.Tensors {
		if ti.Type != quant.F32 {
			continue
		}
		v, _ := f.Tensor(ti.Name)
		nonzero := false
		for i := 0; i+4 <= len(v.Data); i += 4 {
			x := math.Float32frombits(uint32(v.Data[i]) | uint32(v.Data[i+1])<<8 | uint32(v.Data[i+2])<<16 | uint32(v.Data[i+3])<<24)
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("tensor %q: element %d is %v", ti.Name, i/4, x)
			}
			nonzero = nonzero || x != 0
		}
		if !nonzero {
			t.Errorf("tensor %q: all zeros", ti.Name)
		}
	}
}

// TestRewriteModel copies a real model through the Writer: keys in order,
// values, tensors and llama.cpp's padding give back the identical bytes.
func TestRewriteModel(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"stories260K.gguf", "llama-2-tiny-random.gguf"} {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			path := modelPath(t, model)
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(orig)
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter()
			for _, k := range f.Metadata.Keys() {
				v, _ := f.Metadata.Value(k)
				if err := w.Set(k, v); err != nil {
					t.Fatal(err)
				}
			}
			for _, ti := range f.Tensors {
				tv, _ := f.Tensor(ti.Name)
				if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, tv.Data); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			if _, err := w.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), orig) {
				i := 0
				for i < min(buf.Len(), len(orig)) && buf.Bytes()[i] == orig[i] {
					i++
				}
				t.Fatalf("rewrite differs from the original at byte %d (sizes %d, %d)", i, buf.Len(), len(orig))
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, want string
	}{
		{"missing", dir + "/absent.gguf", "no such file"},
		{"directory", dir, "not a regular file"},
		{"empty", write("empty.gguf", nil), "truncated"},
		{"not gguf", write("text.gguf", []byte("hello world")), "not a GGUF file"},
	}
	for _, tc := range tests {
		f, err := Open(tc.path)
		if err == nil {
			f.Close()
			t.Errorf("%s: Open succeeded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not contain %q", tc.name, err, tc.want)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	path := modelPath(b, "stories260K.gguf")
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := f.Tensor("output.weight"); !ok {
			b.Fatal("output.weight missing")
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
