package tokenizer

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"rill/engine/gguf"
	"rill/internal/shared"
)

// benchText is plain English prose; repeated to about 1,000 Llama-2 tokens.
const benchText = `The harbour was quiet in the early morning, and the fishing boats rocked
gently against the stone wall while the gulls argued over scraps. Mara walked
along the pier with a basket of bread, counting the masts as she went, because
her grandfather had told her that a sailor who forgets to count the boats will
one day forget to come home. She did not believe him, not really, but the habit
had stayed with her for twenty years. At the end of the pier an old man was
mending a net, his fingers moving faster than her eyes could follow. "You are
late today," he said without looking up. "The tide will not wait for you."
She laughed and handed him a loaf, still warm, and sat down on an upturned crate
to watch the light spread across the water. `

func BenchmarkEncode(b *testing.B) {
	tk := loadModel(b, "llama-2-tiny-random.gguf")
	text := strings.Repeat(benchText, 6)
	n := len(tk.Encode(text, EncodeOptions{AddSpecial: true}))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tk.Encode(text, EncodeOptions{AddSpecial: true})
	}
	b.ReportMetric(float64(n), "tokens/op")
}

var (
	corpusOnce sync.Once
	corpusText string
)

// corpus returns about n bytes of real, varied text: the Go standard
// library's own sources (code, comments and prose in doc comments), read
// from GOROOT in a fixed order (the .go files outside testdata folders,
// sorted by path), repeated when GOROOT holds less. It is the same text for
// every run of one Go version. When $TOKENIZER_BENCH_TEXT names a file, that
// whole file is the text instead, whatever n says (scripts/bench-tokenizer.sh
// gives the peers and rill the same file that way).
func corpus(tb testing.TB, n int) string {
	tb.Helper()
	corpusOnce.Do(func() {
		if path := os.Getenv("TOKENIZER_BENCH_TEXT"); path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				tb.Fatalf("TOKENIZER_BENCH_TEXT: %v", err)
			}
			corpusText = string(data)
			return
		}
		root := filepath.Join(runtime.GOROOT(), "src")
		var files []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.Contains(path, "testdata") {
				files = append(files, path)
			}
			return nil
		})
		sort.Strings(files)
		var sb strings.Builder
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			sb.Write(data)
			if sb.Len() >= 16<<20 {
				break
			}
		}
		corpusText = sb.String()
	})
	if corpusText == "" {
		tb.Skip("no Go sources under GOROOT to build a corpus from")
	}
	if os.Getenv("TOKENIZER_BENCH_TEXT") != "" {
		return corpusText
	}
	text := corpusText
	for len(text) < n {
		text += corpusText
	}
	text = text[:n]
	// Cut at a character boundary so that every vocabulary sees valid UTF-8.
	for len(text) > 0 && text[len(text)-1]&0xc0 == 0x80 {
		text = text[:len(text)-1]
	}
	return text
}

// benchBytes is how much of the corpus BenchmarkEncodeVocab encodes.
const benchBytes = 1 << 20

// BenchmarkEncodeVocab measures encoding speed (tokens/s) and the bytes
// allocated per input byte on 1 MiB of the corpus, for SentencePiece
// (llama-spm), byte-level BPE (llama-bpe, qwen2) and WordPiece (bert-bge)
// vocabularies, and unigram (nomic-bert-moe).
func BenchmarkEncodeVocab(b *testing.B) {
	for _, set := range []string{"llama-spm", "llama-bpe", "qwen2", "bert-bge", "nomic-bert-moe"} {
		b.Run(set, func(b *testing.B) {
			tk := loadVocab(b, set)
			text := corpus(b, benchBytes)
			n := len(tk.Encode(text, EncodeOptions{}))
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for b.Loop() {
				tk.Encode(text, EncodeOptions{})
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(n), "tokens/op")
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(text)), "allocB/inputB")
		})
	}
}

// TestEncodeBoundedMemory encodes an 8 MiB prompt and checks the bytes it
// allocates: the result (8 bytes per token), the id chunks the pool does not
// have yet (4 bytes per token at most), and scratch space that is small
// next to the input.
func TestEncodeBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 8 MiB per vocabulary")
	}
	text := corpus(t, 8<<20)
	for _, set := range []string{"llama-spm", "llama-bpe", "qwen2", "bert-bge"} {
		tk := loadVocab(t, set)
		tk.Encode(text[:1<<20], EncodeOptions{}) // build the lazy tables
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ids, err := tk.EncodeContext(context.Background(), text, EncodeOptions{ParseSpecial: true})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		result, chunks := int64(8*len(ids)), int64(4*len(ids))
		t.Logf("%s: %d bytes -> %d tokens; allocated %d bytes, %.2f per input byte (result %.2f)",
			set, len(text), len(ids), alloc, float64(alloc)/float64(len(text)), float64(result)/float64(len(text)))
		if scratch := alloc - result - chunks; scratch > int64(len(text))/8 {
			t.Errorf("%s: %d bytes allocated besides the result and the id chunks, want at most an eighth of the input (%d)",
				set, scratch, len(text)/8)
		}
	}
}

// BenchmarkFromGGUF measures building a tokenizer from a vocabulary's
// metadata (the file already parsed): part of every model load.
func BenchmarkFromGGUF(b *testing.B) {
	for _, set := range []string{"llama-spm", "qwen2", "command-r"} {
		b.Run(set, func(b *testing.B) {
			f, err := gguf.Open(shared.Path(b, "models", "vocab", "ggml-vocab-"+set+".gguf"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := FromGGUF(f.Metadata); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
