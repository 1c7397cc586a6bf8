// vocab-derived.mjs records llama.cpp on vocab-only GGUFs derived from
// llama.cpp's test vocabularies by scripts/peer/derivevocab, for
// vocabularies that ../shared/models/vocab lacks (o200k: gpt-oss's
// "gpt-4o" pre-tokenizer and its o200k_harmony special tokens):
//   - gpt-4o-qwen2: Qwen 2's tokens and merges under tokenizer.ggml.pre
//     "gpt-4o". Cases: the hard strings of hardstrings.mjs, the split-rule
//     strings below, and every .inp case of ../shared/models/vocab.
//   - harmony-qwen2: the same with gpt-oss's special tokens and ids. Per
//     special token: its llama.cpp attributes and its piece (special tokens
//     not unparsed), and the harmony strings below, parsed and not.
// With SPLIT_ORACLE set to a splitoracle binary (splitoracle.cpp built
// against llama.cpp's src/unicode.cpp), each gpt-4o-qwen2 case also gets
// "words": the byte lengths of the words llama.cpp's pre-tokenizer cuts its
// text into. Token ids show a different split only where a merge crosses a
// word boundary, which Qwen 2's merges, learnt on its own split, rarely do;
// the words show every boundary.
// Both record BOS, EOS, add_bos, add_eos and every id llama_vocab_is_eog
// accepts, as vocab.mjs does.
//
//   go run ./scripts/peer/derivevocab ../shared/models/vocab/ggml-vocab-qwen2.gguf /tmp/ggml-vocab-gpt-4o-qwen2.gguf
//   go run ./scripts/peer/derivevocab -harmony ../shared/models/vocab/ggml-vocab-qwen2.gguf /tmp/ggml-vocab-harmony-qwen2.gguf
//   PEER_DIR=/work/peer node scripts/peer/vocab-derived.mjs /tmp \
//     [vocab dir, default ../shared/models/vocab] \
//     [output, default engine/tokenizer/testdata/llamacpp_derived.json]

import path from "node:path";
import fs from "node:fs";
import {execFileSync} from "node:child_process";
import {loadPeer} from "./llamacpp.mjs";
import {common} from "./hardstrings.mjs";

const derivedDir = process.argv[2];
if (!derivedDir) throw new Error("usage: vocab-derived.mjs DERIVED_DIR [VOCAB_DIR] [OUTPUT]");
const vocabDir = process.argv[3] ?? "../shared/models/vocab";
const outPath = process.argv[4] ?? "engine/tokenizer/testdata/llamacpp_derived.json";

// Strings for the letter-case rules of the gpt-4o split regex: capitals
// before lower case, capitals alone, letters outside ASCII (which
// llama.cpp's collapsed regex treats as both cases), contractions after
// words of either case, slashes and line ends after punctuation.
const splitStrings = [
    "HTTPServer XMLHttpRequest iOS McDonald's getHTTPResponseCode",
    "DON'T Don't don't 'sup 'S 'LL HELLO'S WORLD'Ve I'm",
    "ÄBC1 ÄBc ÀÉÎ déjà ÉCOLE école ÉcoleNORMALE",
    "ПРИВЕТ Привет пРИВЕТ ΑΘΗΝΑ Ǆemal ǅemal ǆemal",
    "x/y/\n/ a//\r\nb ./\n\n c?!/\r",
    "ß ẞ ŉ İstanbul ﬁne Ωmega µm",
    "a1b2 12345678 ٣٤٥٦ x²³ ⅧⅨ",
    "\t\tword \u00a0word \u3000word \u0301word",
    "e\u0301E\u0301 Cafe\u0301S",
    "   \n\n\tindent()\n\t\treturn x;\n}\n",
];

// harmonyStrings are gpt-oss prompts and outputs in the harmony format.
const harmonyStrings = [
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
    "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
    "<|startoftext|><|endoftext|> <|reserved_200000|> <|end|>\n<|return|> x",
];

// gpt4oRegex is llama.cpp's regex for LLAMA_VOCAB_PRE_TYPE_GPT4O
// (src/llama-vocab.cpp), the one it runs, not tokenizer.json's original.
const gpt4oRegex = String.raw`[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

// oracleWords returns, per text, the byte lengths of llama.cpp's words, or
// null without SPLIT_ORACLE.
function oracleWords(texts, regex) {
    const bin = process.env.SPLIT_ORACLE;
    if (!bin) return null;
    const input = Buffer.from(texts.join("\0"), "utf8");
    const lines = execFileSync(bin, [regex], {input, maxBuffer: 1 << 26}).toString().split("\n");
    return texts.map((_, i) => lines[i] === "" ? [] : lines[i].split(" ").map(Number));
}

function inpCases(dir) {
    const seen = new Set();
    for (const f of fs.readdirSync(dir).filter(f => f.endsWith(".inp")).sort()) {
        for (const text of fs.readFileSync(path.join(dir, f), "utf8").split("\n__ggml_vocab_test__\n")) {
            seen.add(text);
        }
    }
    return [...seen];
}

const {llama, build} = await loadPeer();
const out = {
    generator: "scripts/peer/vocab-derived.mjs",
    build,
    note: "ids: llama_tokenize with add_special=false and parse_special as given; eog: every id llama_vocab_is_eog accepts; specials: llama_token_get_attr and the piece of each token with special=false",
    vocabs: {},
};

async function record(name, texts, specials, regex) {
    const file = path.join(derivedDir, `ggml-vocab-${name}.gguf`);
    const model = await llama.loadModel({modelPath: file, vocabOnly: true});
    const m = model._model;
    const ggml = model.fileInfo.metadata.tokenizer.ggml;
    const n = ggml.tokens.length;
    const eog = [];
    for (let id = 0; id < n; id++) {
        if (m.isEogToken(id)) eog.push(id);
    }
    const entry = {
        pre: ggml.pre,
        n_tokens: n,
        bos: model.tokens.bos ?? -1,
        eos: model.tokens.eos ?? -1,
        add_bos: m.shouldPrependBosToken(),
        add_eos: m.shouldAppendEosToken(),
        eog,
        specials: [],
        cases: [],
    };
    for (const text of specials) {
        const id = ggml.tokens.indexOf(text);
        if (id < 0) throw new Error(`${name} has no token ${text}`);
        entry.specials.push({id, text, attr: m.getTokenAttributes(id), piece: m.detokenize(Uint32Array.of(id), false)});
    }
    const words = regex ? oracleWords(texts, regex) : null;
    texts.forEach((text, i) => {
        for (const parseSpecial of [false, true]) {
            const c = {text, parse_special: parseSpecial, ids: Array.from(m.tokenize(text, parseSpecial))};
            if (words) c.words = words[i];
            entry.cases.push(c);
        }
    });
    out.vocabs[name] = entry;
    await model.dispose();
}

await record("gpt-4o-qwen2", [...common, ...splitStrings, ...inpCases(vocabDir)], [], gpt4oRegex);
await record("harmony-qwen2", [...common, ...harmonyStrings], [
    "<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|return|>", "<|constrain|>",
    "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>",
]);
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
    for (const k of ["pre", "n_tokens", "bos", "eos", "add_bos", "add_eos", "eog"]) {
        text += `   ${JSON.stringify(k)}: ${JSON.stringify(v[k])},\n`;
    }
    text += `   "specials": [\n`;
    text += v.specials.map(s => `    ${JSON.stringify(s)}`).join(",\n");
    text += `\n   ],\n`;
    text += `   "cases": [\n`;
    text += v.cases.map(c => `    ${JSON.stringify(c)}`).join(",\n");
    text += `\n   ]\n  }${i + 1 < names.length ? "," : ""}\n`;
});
text += " }\n}\n";
fs.mkdirSync(path.dirname(outPath), {recursive: true});
fs.writeFileSync(outPath, text);
console.log(`wrote ${outPath}`);
