// Command derivevocab writes a vocab-only GGUF derived from one of
// llama.cpp's test vocabularies (../shared/models/vocab) with
// testmodel.DeriveVocab, for vocabularies that have no file there: the same
// tokens and merges under another tokenizer.ggml.pre, and with -harmony
// gpt-oss's o200k_harmony special tokens. scripts/peer/vocab-derived.mjs
// records llama.cpp on the result; engine/tokenizer's tests derive the same
// file and compare.
//
//	go run ./scripts/peer/derivevocab [-pre gpt-4o] [-harmony] SRC.gguf DST.gguf
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"rill/engine/testmodel"
)

func main() {
	pre := flag.String("pre", "gpt-4o", "tokenizer.ggml.pre of the derived vocabulary")
	harmony := flag.Bool("harmony", false, "put gpt-oss's o200k_harmony special tokens over the source's added tokens")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: derivevocab [-pre NAME] [-harmony] SRC.gguf DST.gguf")
		os.Exit(2)
	}
	data, err := testmodel.DeriveVocab(flag.Arg(0), testmodel.DeriveOptions{Pre: *pre, Harmony: *harmony})
	if err == nil {
		err = os.WriteFile(flag.Arg(1), data, 0o644)
	}
	if err != nil {
		slog.Error("derivevocab failed", "err", err)
		os.Exit(1)
	}
}
