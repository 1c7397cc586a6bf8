package gguf

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
)

// corruptCase is a hand-made bad input, the substrings its error must
// contain, and the byte offset the error must name.
type corruptCase struct {
	name  string
	build func() (data []byte, off int64)
	want  []string
}

// tensorFile returns a file with no metadata, the tensor infos that infos
// appends (n of them), padding to 32 and dataBytes of data. off is the
// offset infos reported.
func tensorFile(n uint64, dataBytes int, infos func(r *raw) int64) ([]byte, int64) {
	r := rawHeader(3, n, 0)
	off := infos(r)
	r.padTo(32).zeros(dataBytes)
	return r.b, off
}

// kvFile returns a file with one key/value pair whose type and body body
// appends after the key; off is the offset body reported.
func kvFile(key string, body func(r *raw) int64) ([]byte, int64) {
	r := rawHeader(3, 0, 1).str(key)
	off := body(r)
	return r.b, off
}

var corruptCases = []corruptCase{
	{"empty", func() ([]byte, int64) { return nil, 0 }, []string{"truncated", "header"}},
	{"short magic", func() ([]byte, int64) { return []byte("GG"), 0 }, []string{"truncated"}},
	{"bad magic", func() ([]byte, int64) { return []byte("GGML\x03\x00\x00\x00"), 0 }, []string{`not a GGUF file: magic "GGML"`}},
	{"version 1", func() ([]byte, int64) { return rawHeader(1, 0, 0).b, 4 }, []string{"version 1", "not supported"}},
	{"version 4", func() ([]byte, int64) { return rawHeader(4, 0, 0).b, 4 }, []string{"unsupported GGUF version 4"}},
	{"big-endian", func() ([]byte, int64) { return rawHeader(0x03000000, 0, 0).b, 4 }, []string{"big-endian"}},
	{"truncated counts", func() ([]byte, int64) { return rawHeader(3, 0, 0).b[:12], 8 }, []string{"truncated: tensor count needs 8 bytes, 4 left"}},
	{"huge metadata count", func() ([]byte, int64) { return rawHeader(3, 0, 1<<60).b, 16 }, []string{"metadata count 1152921504606846976 is more than the 0 bytes left"}},
	{"huge tensor count", func() ([]byte, int64) { return rawHeader(3, 1<<40, 0).zeros(100).b, 8 }, []string{"tensor count 1099511627776", "100 bytes left"}},
	{"key length past end", func() ([]byte, int64) {
		return rawHeader(3, 0, 1).u64(1 << 62).zeros(8).b, 24
	}, []string{"key length 4611686018427387904 exceeds the 8 bytes left"}},
	{"unknown value type", func() ([]byte, int64) {
		return kvFile("k", func(r *raw) int64 { at := r.at(); r.u32(13).u32(0); return at })
	}, []string{`key "k"`, "unknown value type 13"}},
	{"truncated value", func() ([]byte, int64) {
		return kvFile("k", func(r *raw) int64 { r.u32(uint32(TypeUint64)); at := r.at(); r.u32(0); return at })
	}, []string{`key "k"`, "truncated: UINT64 value needs 8 bytes, 4 left"}},
	{"bool byte", func() ([]byte, int64) {
		return kvFile("b", func(r *raw) int64 { r.u32(uint32(TypeBool)); at := r.at(); r.u8(2); return at })
	}, []string{`key "b"`, "bool byte is 2"}},
	{"bool array element", func() ([]byte, int64) {
		return kvFile("b", func(r *raw) int64 {
			r.u32(uint32(TypeArray))
			at := r.at()
			r.u32(uint32(TypeBool)).u64(3).raw([]byte{0, 1, 7})
			return at
		})
	}, []string{`key "b"`, "bool element 2 is 7"}},
	{"string past end", func() ([]byte, int64) {
		return kvFile("s", func(r *raw) int64 { r.u32(uint32(TypeString)); at := r.at(); r.u64(100).raw([]byte("abc")); return at })
	}, []string{`key "s"`, "string length 100 exceeds the 3 bytes left"}},
	{"duplicate key", func() ([]byte, int64) {
		r := rawHeader(3, 0, 2).kvU32("k", 1)
		at := r.at()
		return r.kvU32("k", 2).b, at
	}, []string{`key "k"`, "duplicate key"}},
	{"huge array count", func() ([]byte, int64) {
		return kvFile("a", func(r *raw) int64 {
			r.u32(uint32(TypeArray)).u32(uint32(TypeUint32))
			at := r.at()
			r.u64(1 << 61).zeros(64)
			return at
		})
	}, []string{`key "a"`, "array of UINT32: count 2305843009213693952 is more than the 64 bytes left"}},
	{"string array count", func() ([]byte, int64) {
		// 40 bytes left hold at most 5 string lengths: 6 is refused before allocating.
		return kvFile("a", func(r *raw) int64 {
			r.u32(uint32(TypeArray)).u32(uint32(TypeString))
			at := r.at()
			r.u64(6).zeros(40)
			return at
		})
	}, []string{"array of STRING: count 6 is more than the 40 bytes left"}},
	{"string array truncated", func() ([]byte, int64) {
		return kvFile("a", func(r *raw) int64 {
			r.u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("x")
			at := r.at()
			r.u64(9).raw([]byte("12345678"))
			return at
		})
	}, []string{`key "a"`, "array string length 9 exceeds the 8 bytes left"}},
	{"unknown element type", func() ([]byte, int64) {
		return kvFile("a", func(r *raw) int64 {
			r.u32(uint32(TypeArray))
			at := r.at()
			r.u32(99).u64(0)
			return at
		})
	}, []string{"unknown array element type 99"}},
	{"arrays too deep", func() ([]byte, int64) {
		return kvFile("a", func(r *raw) int64 {
			r.u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1)
			r.u32(uint32(TypeArray)).u64(1)
			r.u32(uint32(TypeArray)).u64(1)
			at := r.at()
			r.u32(uint32(TypeUint8)).u64(0)
			return at
		})
	}, []string{`key "a"`, "nested deeper than 3 levels"}},
	{"alignment type", func() ([]byte, int64) {
		r := rawHeader(3, 0, 2).kvU32("x", 1)
		at := r.at()
		return r.str(KeyAlignment).u32(uint32(TypeUint64)).u64(32).b, at
	}, []string{`key "general.alignment"`, "alignment must be UINT32, not UINT64"}},
	{"alignment zero", func() ([]byte, int64) { return rawHeader(3, 0, 1).kvU32(KeyAlignment, 0).b, 24 }, []string{"alignment 0 is not a non-zero power of two"}},
	{"alignment 24", func() ([]byte, int64) { return rawHeader(3, 0, 1).kvU32(KeyAlignment, 24).b, 24 }, []string{"alignment 24 is not"}},
	{"truncated tensor info", func() ([]byte, int64) {
		r := rawHeader(3, 1, 0).str("w").u32(2).u64(4)
		at := r.at()
		return r.zeros(7).b, at
	}, []string{`tensor "w"`, "truncated: dimension needs 8 bytes"}},
	{"too many dimensions", func() ([]byte, int64) {
		return tensorFile(1, 0, func(r *raw) int64 {
			r.str("w")
			at := r.at()
			r.u32(5).u64(1).u64(1).u64(1).u64(1).u64(1).u32(0).u64(0)
			return at
		})
	}, []string{`tensor "w"`, "5 dimensions, at most 4"}},
	{"dimension past int", func() ([]byte, int64) {
		return tensorFile(1, 0, func(r *raw) int64 {
			r.str("w").u32(2).u64(4)
			at := r.at()
			r.u64(1 << 63).u32(0).u64(0)
			return at
		})
	}, []string{`tensor "w"`, "dimension 1 is 9223372036854775808"}},
	{"element count overflow", func() ([]byte, int64) {
		return tensorFile(1, 0, func(r *raw) int64 {
			r.str("w").u32(3).u64(1 << 30).u64(1 << 30).u64(1 << 30)
			at := r.at()
			r.u32(24).u64(0) // I8
			return at
		})
	}, []string{`tensor "w"`, "overflows int64"}},
	{"row size overflow", func() ([]byte, int64) {
		return tensorFile(1, 0, func(r *raw) int64 {
			r.str("w").u32(1).u64(1 << 62)
			at := r.at()
			r.u32(0).u64(0) // F32: 2^64 bytes
			return at
		})
	}, []string{`tensor "w"`, "row size overflows int64"}},
	{"unknown tensor type", func() ([]byte, int64) {
		return tensorFile(1, 16, func(r *raw) int64 {
			r.str("w").u32(1).u64(4)
			at := r.at()
			r.u32(4).u64(0)
			return at
		})
	}, []string{`tensor "w"`, "unknown tensor type 4"}},
	{"partial block", func() ([]byte, int64) {
		return tensorFile(1, 64, func(r *raw) int64 {
			r.str("w").u32(1).u64(33)
			at := r.at()
			r.u32(8).u64(0) // Q8_0
			return at
		})
	}, []string{`tensor "w"`, "row of 33 elements is not a whole number of Q8_0 blocks of 32"}},
	{"misaligned offset", func() ([]byte, int64) {
		return tensorFile(1, 64, func(r *raw) int64 {
			r.str("w").u32(1).u64(4).u32(0)
			at := r.at()
			r.u64(4)
			return at
		})
	}, []string{`tensor "w"`, "data offset 4 is not a multiple of the alignment 32"}},
	{"offset past int64", func() ([]byte, int64) {
		return tensorFile(1, 64, func(r *raw) int64 {
			r.str("w").u32(1).u64(4).u32(0)
			at := r.at()
			r.u64(1 << 63)
			return at
		})
	}, []string{`tensor "w"`, "past the largest int64"}},
	{"offset past end", func() ([]byte, int64) {
		return tensorFile(1, 64, func(r *raw) int64 {
			at := r.at()
			r.str("w").u32(1).u64(4).u32(0).u64(1 << 20)
			return at
		})
	}, []string{`tensor "w"`, "data [1048576, 1048592) of the data section runs past the end of the file (64 data bytes)"}},
	{"size past end", func() ([]byte, int64) {
		return tensorFile(1, 64, func(r *raw) int64 {
			at := r.at()
			r.str("w").u32(2).u64(4).u64(5).u32(0).u64(0)
			return at
		})
	}, []string{`tensor "w"`, "data [0, 80)", "runs past the end"}},
	{"empty tensor past end", func() ([]byte, int64) {
		return tensorFile(1, 0, func(r *raw) int64 {
			at := r.at()
			r.str("w").u32(2).u64(4).u64(0).u32(0).u64(64)
			return at
		})
	}, []string{`tensor "w"`, "runs past the end"}},
	{"data section past end", func() ([]byte, int64) {
		r := rawHeader(3, 1, 0).str("w").u32(1).u64(4).u32(0).u64(0)
		return r.b, r.at()
	}, []string{"tensor data", "the data section starts at byte 64, past the end of the file"}},
	{"overlap", func() ([]byte, int64) {
		return tensorFile(2, 96, func(r *raw) int64 {
			at := r.at()
			r.str("a").u32(1).u64(16).u32(0).u64(32) // [32, 96)
			r.str("b").u32(1).u64(16).u32(0).u64(0)  // [0, 64)
			return at
		})
	}, []string{`tensor "a"`, `data [32, 96) overlaps tensor "b" at [0, 64)`}},
	{"duplicate tensor", func() ([]byte, int64) {
		var at int64
		data, _ := tensorFile(2, 64, func(r *raw) int64 {
			r.str("w").u32(1).u64(4).u32(0).u64(0)
			at = r.at()
			r.str("w").u32(1).u64(4).u32(0).u64(32)
			return at
		})
		return data, at
	}, []string{`tensor "w"`, "duplicate tensor name"}},
}

func TestParseCorrupt(t *testing.T) {
	t.Parallel()
	for _, tc := range corruptCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data, off := tc.build()
			f, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse succeeded with %d tensors, want an error", len(f.Tensors))
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v is not a *FormatError", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if fe.Offset != off {
				t.Errorf("error at byte %d, want %d: %v", fe.Offset, off, err)
			}
		})
	}
}

// TestParseCorruptAllocs checks that hostile counts do not make Parse
// allocate more than a small multiple of the input. It measures the whole
// process's allocations, so it does not run in parallel, and takes the
// least of 5 runs: the runtime and the testing package allocate now and
// then on their own (a kilobyte once failed a 24-byte case).
func TestParseCorruptAllocs(t *testing.T) {
	var before, after runtime.MemStats
	for _, tc := range corruptCases {
		data, _ := tc.build()
		got := uint64(math.MaxUint64)
		for range 5 {
			runtime.ReadMemStats(&before)
			_, err := Parse(data)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("%s: Parse succeeded", tc.name)
			}
			got = min(got, after.TotalAlloc-before.TotalAlloc)
		}
		if limit := uint64(4096 + 16*len(data)); got > limit {
			t.Errorf("%s: Parse of %d bytes allocated %d bytes, limit %d", tc.name, len(data), got, limit)
		}
	}
}

// TestParseEarlyFailureAllocs checks that a large input whose counts claim
// all its bytes, but which fails at the first item, allocates little: what
// is reserved up front does not follow the claimed count.
func TestParseEarlyFailureAllocs(t *testing.T) {
	const size = 4 << 20
	tests := []struct {
		name string
		data []byte
	}{
		{"keys", rawHeader(3, 0, size/minKVBytes).u64(1 << 40).zeros(size).b},
		{"tensors", rawHeader(3, size/minTensorBytes, 0).u64(1 << 40).zeros(size).b},
		{"strings", rawHeader(3, 0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeString)).
			u64(size / 8).u64(1 << 40).zeros(size).b},
		{"arrays", rawHeader(3, 0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeArray)).
			u64(size / 12).u32(99).zeros(size).b},
	}
	var before, after runtime.MemStats
	for _, tc := range tests {
		runtime.ReadMemStats(&before)
		_, err := Parse(tc.data)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: Parse succeeded", tc.name)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
			t.Errorf("%s: Parse allocated %d bytes before failing at the first item", tc.name, got)
		}
	}
}

// TestParseTruncations checks every prefix of a valid file: each must fail
// cleanly (except prefixes that end after the last tensor's data).
func TestParseTruncations(t *testing.T) {
	t.Parallel()
	data := writerSeed(t, 32)
	full, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	last := full.Tensors[len(full.Tensors)-1]
	end := full.DataOffset + last.Offset + last.Size
	for n := range len(data) {
		f, err := Parse(data[:n])
		if int64(n) < end && err == nil {
			t.Fatalf("prefix of %d bytes (data ends at %d) parsed", n, end)
		}
		if err == nil {
			checkViews(t, f, data[:n])
		}
	}
}
