// tokenize.mjs records llama.cpp's own tokenisation of a table of prompts with
// the tiny models in ../shared/models, as golden data for engine/tokenizer.
//
// llama.cpp comes from node-llama-cpp, pinned at exactly 3.21.1, whose npm
// package @node-llama-cpp/linux-x64 ships a prebuilt CPU build of llama.cpp
// (release tag v0.4.0 in node-llama-cpp's llama/llama.cpp.info.json). Install
// it with `npm ci --ignore-scripts` in scripts/peer (see README.md), or point
// PEER_DIR at another folder whose node_modules holds that version.
//
// Regenerate from the repository root:
//
//   node scripts/peer/tokenize.mjs \
//     [models dir, default ../shared/models] \
//     [output, default engine/tokenizer/testdata/llamacpp_tokenize.json]
//
// What is recorded: for each model, prompt and parse_special in {false, true},
// the ids of llama.cpp's tokenizer (common_tokenize with add_special=false:
// node-llama-cpp offers no way to call it with add_special=true) and the text
// llama_detokenize gives for [BOS, ...ids] with remove_special=false and
// special=false, which is every token's piece concatenated, nothing stripped.
// Per model: add_bos/add_eos as llama.cpp resolved them, the BOS/EOS ids and
// the ids llama.cpp treats as end of generation.

import path from "node:path";
import fs from "node:fs";
import {fileURLToPath, pathToFileURL} from "node:url";

const peerDir = process.env.PEER_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const modelsDir = process.argv[2] ?? "../shared/models";
const outPath = process.argv[3] ?? "engine/tokenizer/testdata/llamacpp_tokenize.json";
const version = "3.21.1";

const pkg = JSON.parse(fs.readFileSync(path.join(peerDir, "node_modules/node-llama-cpp/package.json"), "utf8"));
if (pkg.version !== version) {
    throw new Error(`node-llama-cpp ${pkg.version} found in ${peerDir}, want exactly ${version}`);
}
const info = JSON.parse(fs.readFileSync(path.join(peerDir, "node_modules/node-llama-cpp/llama/llama.cpp.info.json"), "utf8"));
const {getLlama, LlamaLogLevel} = await import(
    pathToFileURL(path.join(peerDir, "node_modules/node-llama-cpp/dist/index.js")).href);

const models = ["stories260K.gguf", "llama-2-tiny-random.gguf"];

// Prompts beyond the oracle's: whitespace of every kind, unicode (CJK, emoji
// with modifiers and joiners, combining marks, right-to-left scripts), special
// token texts, and strings that exercise merge ties and byte fallback.
const prompts = [
    "",
    " ",
    "   ",
    "\n",
    "Hello world",
    " Hello world",
    "Hello world ",
    "  Hello   world  ",
    "\tTabbed\ttext\t",
    "line one\nline two\n\nline four",
    "windows\r\nnewlines\r\n",
    "Once upon a time",
    "Lily wanted to",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "3.14159 and 42,000 and 1e-5",
    "func main() {\n\tfmt.Println(\"hi\")\n}",
    "日本語のテキスト",
    "你好，世界",
    "안녕하세요",
    "Привет мир",
    "مرحبا بالعالم",
    "emoji 🦙🚀 and 👍🏽",
    "family 👨‍👩‍👧 flag 🇩🇪",
    "e\u0301 cafe\u0301 caf\u00e9",
    "Ünïcödé ñ ß Å",
    "a\u0300\u0301\u0302 stacked",
    "<s>",
    "</s>",
    "<unk>",
    "<s>Hello</s>",
    "Hello <s> world </s> done",
    "<s><s>",
    "a</s>b",
    " <s> ",
    "<s >",
    "<<s>>",
    "<0x41>",
    "\u2581Hello\u2581",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababab",
    "the the the the",
    "\u00a0non-breaking\u3000ideographic space",
    "\u0000nul and \u0007bell",
];

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false});
const out = {
    generator: "scripts/peer/tokenize.mjs",
    node_llama_cpp: version,
    llama_cpp_release: info.tag,
    note: "ids: llama.cpp tokenize with add_special=false; decoded: llama_detokenize([BOS, ...ids], remove_special=false, special=false)",
    models: {},
};
for (const name of models) {
    const model = await llama.loadModel({modelPath: path.join(modelsDir, name), gpuLayers: 0});
    const m = model._model;
    const n = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    const eog = [];
    for (let id = 0; id < n; id++) {
        if (m.isEogToken(id)) eog.push(id);
    }
    const bos = model.tokens.bos;
    const entry = {
        n_tokens: n,
        bos: bos ?? -1,
        eos: model.tokens.eos ?? -1,
        add_bos: m.shouldPrependBosToken(),
        add_eos: m.shouldAppendEosToken(),
        eog,
        cases: [],
    };
    for (const text of prompts) {
        for (const parseSpecial of [false, true]) {
            const ids = Array.from(m.tokenize(text, parseSpecial));
            const decoded = m.detokenize(Uint32Array.from([bos, ...ids]), false);
            entry.cases.push({text, parse_special: parseSpecial, ids, decoded});
        }
    }
    out.models[name] = entry;
    await model.dispose();
}
await llama.dispose();

// One case per line keeps diffs readable.
const lines = JSON.stringify(out, null, 1).split("\n");
let text = "";
let depth = 0;
let inCase = false;
for (const line of lines) {
    const t = line.trim();
    if (!inCase && t === "{" && depth === 4) {
        inCase = true;
        text += line;
        depth++;
        continue;
    }
    if (inCase) {
        if (t.startsWith("}")) {
            inCase = false;
            depth--;
            text += t + "\n";
        } else {
            text += t + (t.endsWith(",") ? " " : "");
        }
        continue;
    }
    if (t.endsWith("{") || t.endsWith("[")) depth++;
    if (t.startsWith("}") || t.startsWith("]")) depth--;
    text += line + "\n";
}
fs.mkdirSync(path.dirname(outPath), {recursive: true});
fs.writeFileSync(outPath, text);
console.log(`wrote ${outPath}`);
