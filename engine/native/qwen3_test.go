package native

import (
	"os"
	"sync"
	"testing"

	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/testmodel"
	"rill/engine/tokenizer"
	"rill/internal/shared"
)

// The real-vocabulary test model: testmodel.QwenBPE with Qwen 3's byte-level
// BPE vocabulary (Qwen 2's from ../shared/models/vocab plus Qwen 3's added
// tokens) and a real chat template from ../shared/refdata/chat-templates.
// Tests that need it skip when ../shared is absent.

// Templates of the bundle in ../shared/refdata/chat-templates/llamacpp-node-bundle.
const (
	templateQwen3 = "Qwen-Qwen3-0.6B.jinja" // the model may open <think> itself
	templateQwQ   = "Qwen-QwQ-32B.jinja"    // the generation prompt opens <think>
)

var qwenVocab struct {
	once sync.Once
	v    *testmodel.Vocabulary
	err  error
}

// templateSource reads a real chat template, or skips.
func templateSource(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(shared.Path(t, "refdata", "chat-templates", "llamacpp-node-bundle", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// qwenModelBytes returns the GGUF of the real-vocabulary test model with
// the named template, or skips.
func qwenModelBytes(t testing.TB, template string) []byte {
	t.Helper()
	src := templateSource(t, template)
	path := shared.Path(t, "models", "vocab", "ggml-vocab-qwen2.gguf")
	qwenVocab.once.Do(func() { qwenVocab.v, qwenVocab.err = testmodel.Qwen3Vocabulary(path, "") })
	if qwenVocab.err != nil {
		t.Fatal(qwenVocab.err)
	}
	v := qwenVocab.v.Clone()
	v.Set("tokenizer.chat_template", src)
	data, err := testmodel.BytesWithVocabulary(testmodel.QwenBPE(), v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// newQwenEngine starts an engine on the real-vocabulary test model with
// the named template.
func newQwenEngine(t testing.TB, template string, opts Options) *Engine {
	t.Helper()
	f, err := gguf.Parse(qwenModelBytes(t, template))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, m, opts)
}

// qwenTokenizer returns the real-vocabulary test model's tokenizer alone.
func qwenTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Parse(qwenModelBytes(t, templateQwen3))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
