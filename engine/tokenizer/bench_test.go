package tokenizer

import (
	"strings"
	"testing"
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
