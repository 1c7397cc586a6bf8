// vocab.mjs records llama.cpp's tokenisation of hard strings with the
// vocab-only GGUFs in ../shared/models/vocab (llama.cpp's own test
// vocabularies), as golden data for engine/tokenizer beyond the .inp/.out
// cases those files come with: special tokens parsed and not, whitespace of
// every kind, contractions in both cases, long digit runs, scripts with
// combining marks, and each vocabulary's own special token texts. Per
// vocabulary it also records what llama.cpp resolved: BOS, EOS, add_bos,
// add_eos and the end-of-generation ids.
//
// llama.cpp comes from node-llama-cpp 3.21.1 (see README.md); models load
// with vocabOnly, so no weights are needed. WordPiece vocabularies also get
// the WordPiece strings of hardstrings.mjs.
//
//   PEER_DIR=/work/peer [VOCAB_SETS=bert-bge,...] node scripts/peer/vocab.mjs \
//     [vocab dir, default ../shared/models/vocab] \
//     [output, default engine/tokenizer/testdata/llamacpp_vocab.json]
//
// VOCAB_SETS records only the sets it names and keeps the other entries of
// an existing output file as they are.

import path from "node:path";
import fs from "node:fs";
import {loadPeer} from "./llamacpp.mjs";
import {common, wordpiece} from "./hardstrings.mjs";

const vocabDir = process.argv[2] ?? "../shared/models/vocab";
const outPath = process.argv[3] ?? "engine/tokenizer/testdata/llamacpp_vocab.json";

const sets = [
    "llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35", "starcoder", "gpt-2",
    "deepseek-llm", "deepseek-coder", "falcon", "mpt", "refact", "command-r", "gemma-4",
    "bert-bge", "nomic-bert-moe",
];
const only = process.env.VOCAB_SETS ? process.env.VOCAB_SETS.split(",") : null;
for (const set of only ?? []) {
    if (!sets.includes(set)) throw new Error(`VOCAB_SETS: unknown set ${set}`);
}


// specialTexts returns a few special token texts of the vocabulary, so that
// every vocabulary sees its own markers in text.
function specialTexts(tokens, types) {
    const out = [];
    for (let id = 0; id < tokens.length && out.length < 6; id++) {
        if (types[id] === 3 || types[id] === 4) out.push(tokens[id]);
    }
    return out;
}

const {mod, llama, build} = await loadPeer();
const out = {
    generator: "scripts/peer/vocab.mjs",
    build,
    note: "ids: llama_tokenize with add_special=false and parse_special as given; eog: every id llama_vocab_is_eog accepts",
    vocabs: {},
};
if (only && fs.existsSync(outPath)) {
    out.vocabs = JSON.parse(fs.readFileSync(outPath, "utf8")).vocabs;
}
for (const set of sets) {
    if (only && !only.includes(set)) continue;
    const file = path.join(vocabDir, `ggml-vocab-${set}.gguf`);
    const model = await llama.loadModel({modelPath: file, vocabOnly: true});
    const m = model._model;
    const ggml = model.fileInfo.metadata.tokenizer.ggml;
    const n = ggml.tokens.length;
    const eog = [];
    for (let id = 0; id < n; id++) {
        if (m.isEogToken(id)) eog.push(id);
    }
    const own = specialTexts(ggml.tokens, ggml.token_type ?? []);
    const texts = [...common, own.join(""), own.map(t => ` ${t} x`).join("\n")];
    if (ggml.model === "bert") texts.push(...wordpiece);
    const entry = {
        n_tokens: n,
        bos: model.tokens.bos ?? -1,
        eos: model.tokens.eos ?? -1,
        add_bos: m.shouldPrependBosToken(),
        add_eos: m.shouldAppendEosToken(),
        eog,
        cases: [],
    };
    for (const text of texts) {
        for (const parseSpecial of [false, true]) {
            const ids = Array.from(m.tokenize(text, parseSpecial));
            entry.cases.push({text, parse_special: parseSpecial, ids});
        }
    }
    out.vocabs[set] = entry;
    await model.dispose();
}
await llama.dispose();

// One case per line keeps diffs readable.
let text = "{\n";
text += ` "generator": ${JSON.stringify(out.generator)},\n`;
text += ` "build": ${JSON.stringify(out.build)},\n`;
text += ` "note": ${JSON.stringify(out.note)},\n`;
text += ` "vocabs": {\n`;
const names = Object.keys(out.vocabs);
names.forEach((name, i) => {
    const v = out.vocabs[name];
    text += `  ${JSON.stringify(name)}: {\n`;
    for (const k of ["n_tokens", "bos", "eos", "add_bos", "add_eos", "eog"]) {
        text += `   ${JSON.stringify(k)}: ${JSON.stringify(v[k])},\n`;
    }
    text += `   "cases": [\n`;
    text += v.cases.map(c => `    ${JSON.stringify(c)}`).join(",\n");
    text += `\n   ]\n  }${i + 1 < names.length ? "," : ""}\n`;
});
text += " }\n}\n";
fs.mkdirSync(path.dirname(outPath), {recursive: true});
fs.writeFileSync(outPath, text);
console.log(`wrote ${outPath}`);
