// oracle.mjs records llama.cpp's greedy decoding of prompts on GGUF models as
// a numeric oracle: per prompt the prompt ids, the generated ids and text,
// and per step the top-5 (id, logprob) where logprob is the log-softmax of the
// raw logits, before any sampler.
//
// Usage (from the repository root, after `npm ci --ignore-scripts` in
// scripts/peer):
//
//   node scripts/peer/oracle.mjs [flags] model.gguf...
//
//   --n N            tokens to generate per prompt (default 32)
//   --prompt TEXT    a prompt (repeatable); default: the built-in extended set
//   --prompts FILE   a JSON array of prompts
//   --out FILE       write the JSON there (default: stdout)
//   --check FILE     instead of the prompts above, rerun every prompt of an
//                    oracle file (same layout) for the given models and compare
//   --tol X          --check: largest allowed logprob difference (default
//                    5e-3: two llama.cpp builds differ by up to ~4e-3 in the
//                    top-5 tail of stories260K, see README.md)
//   --threads N      llama.cpp threads (default 2)
//   --ctx N          context size (default 1024)
//   --batch N        batch size, n_batch = n_ubatch (default 512)
//   --flash-attn M   auto, on or off (default auto, as llama-server)
//   --kv TYPE        KV cache type for K and V, e.g. F16 or F32 (default F16)
//
// How the numbers are obtained: node-llama-cpp's
// LlamaContextSequence.evaluateWithMetadata(tokens, {probabilities: true},
// {temperature: 0}) samples with a chain that holds only llama.cpp's greedy
// sampler, which leaves the candidates' logits untouched; the addon then
// softmaxes all n_vocab raw logits in float32 and returns them sorted. So
// log(p) is the log-softmax of the raw logits, the quantity llama-server
// reports with n_probs and post_sampling_probs=false. The script checks that
// every step returns all n_vocab candidates.
//
// Tokenisation follows llama-server's /completion for a string prompt: BOS
// first (when the vocabulary asks for it) and special-token texts such as
// "</s>" parsed as special tokens. Every prompt starts from an empty
// sequence (no prompt cache). Generation stops after N tokens or after an
// end-of-generation token, which is then the last generated id (stop "eos").

import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import {loadPeer, parseArgs} from "./llamacpp.mjs";

// extendedPrompts are the prompts of engine/model/testdata/llamacpp_greedy_top5.json:
// none is in refdata's oracle, and together they cover accents, CJK, emoji
// (byte fallback in a 512-token vocabulary), runs of spaces, tabs and
// newlines, a long prompt, and special-token text.
const extendedPrompts = [
    "Café crème brûlée, naïve façade, Ångström, jalapeño and Zoë's résumé.",
    "日本語の文章と中文句子，还有한국어。",
    "The cat 🐈 saw a rocket 🚀 and smiled 😊👍🏽",
    "   Lots   of    spaces   ",
    "First line\n\tIndented with a tab\n\n\tAgain\nLast line\n",
    "The story ends here.</s>Once upon a time",
    "Ελληνικά, русский язык, עברית, and हिन्दी in one line",
    [
        "The lighthouse keeper had lived on the island for thirty years, and in all that time he had never once",
        "missed lighting the lamp at dusk. Every evening he climbed the one hundred and twelve steps of the spiral",
        "stair, counting them under his breath, and every evening he polished the great glass lens until it shone",
        "like a second moon. The fishermen in the village across the bay set their watches by his light. When the",
        "fog rolled in from the sea, thick and grey as wet wool, he rang the bell as well, slowly and steadily,",
        "so that the boats could find their way home by sound when they could not find it by sight. He kept a",
        "small garden behind the cottage where he grew potatoes, beans and a row of stubborn yellow roses that",
        "his wife had planted long ago. She had died in the winter of the great storm, and since then he had",
        "talked to the roses instead, telling them about the weather, the ships that passed, and the seabirds that",
        "nested on the cliffs. One morning in late spring a small boat came to the island with a letter from the",
        "government. The lamp, the letter said, would soon be replaced by an automatic light that needed no keeper.",
        "He read the letter twice, folded it carefully, and put it in his pocket. Then he went outside, sat down",
        "beside the roses, and told them everything.",
    ].join(" "),
];

const usage = "usage: node scripts/peer/oracle.mjs [--n N] [--prompt TEXT]... [--prompts FILE] [--out FILE] [--check FILE [--tol X]] [--threads N] [--ctx N] [--batch N] [--flash-attn auto|on|off] [--kv TYPE] model.gguf...";

// round keeps 9 significant digits: more than float32 carries, far below
// the 1e-3 noise of llama.cpp's own numerics.
function round(x) {
    return Number(x.toPrecision(9));
}

// settingsFromLogs reads what llama.cpp resolved from its context log lines.
function settingsFromLogs(lines, flashOption) {
    const text = lines.join("\n");
    let flash = flashOption === "auto" ? "unknown" : (flashOption ? "enabled" : "disabled");
    const fa = text.match(/Flash Attention (?:was auto, set to )?(enabled|disabled)/i);
    if (fa) flash = fa[1].toLowerCase();
    const kv = text.match(/K \((\w+)\):[^\n]*V \((\w+)\)/);
    return {flash_attention: flash, kv_cache_type_k: kv ? kv[1] : "unknown", kv_cache_type_v: kv ? kv[2] : "unknown"};
}

// runModel decodes every prompt greedily on one model and returns the model's
// entry (prompt -> result) and the context settings llama.cpp resolved.
async function runModel(llama, logs, modelPath, jobs, opts) {
    const model = await llama.loadModel({modelPath, gpuLayers: 0});
    const logStart = logs.length;
    const ctx = await model.createContext({
        contextSize: opts.ctx,
        batchSize: opts.batch,
        sequences: 1,
        threads: {ideal: opts.threads, min: opts.threads},
        flashAttention: opts.flashAttn,
        experimentalKvCacheKeyType: opts.kv,
        experimentalKvCacheValueType: opts.kv,
    });
    const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    const bos = model.tokens.bos;
    const addBos = model.tokens.shouldPrependBosToken && bos != null;
    const seq = ctx.getSequence();
    // Prepending BOS makes detokenize keep the first piece's leading space
    // (SentencePiece vocabularies strip it otherwise), so pieces and text
    // read as llama-server's content does; BOS itself renders as nothing
    // without special=true.
    const detokenize = (ids) => model.detokenize(addBos ? [bos, ...ids] : ids, false);
    const piece = (id) => detokenize([id]);
    const entry = {};
    for (const {prompt, n} of jobs) {
        const promptIds = [...(addBos ? [bos] : []), ...model.tokenize(prompt, true)];
        if (promptIds.length === 0) throw new Error(`prompt ${JSON.stringify(prompt)} has no tokens`);
        if (promptIds.length + n > ctx.contextSize) {
            throw new Error(`prompt ${JSON.stringify(prompt.slice(0, 40))}: ${promptIds.length}+${n} tokens exceed the context of ${ctx.contextSize} (raise --ctx)`);
        }
        await seq.clearHistory();
        const steps = [];
        const generated = [];
        let stop = "length";
        if (n > 0) {
            const gen = seq.evaluateWithMetadata(promptIds, {probabilities: true}, {temperature: 0, yieldEogToken: true});
            for await (const res of gen) {
                if (res.probabilities.size !== nVocab) {
                    throw new Error(`step ${steps.length}: ${res.probabilities.size} candidates, want all ${nVocab}: a sampler altered the logits`);
                }
                const top5 = [];
                for (const [id, p] of res.probabilities) {
                    if (top5.length === 5) break;
                    top5.push([id, round(Math.log(p))]);
                }
                const p = res.probabilities.get(res.token);
                generated.push(res.token);
                steps.push({
                    id: res.token,
                    token: piece(res.token),
                    logprob: round(Math.log(p)),
                    top5,
                });
                if (model.isEogToken(res.token)) {
                    stop = "eos";
                    break;
                }
                if (generated.length >= n) break;
            }
        }
        const text = detokenize(generated);
        entry[prompt] = {prompt_ids: promptIds, generated_ids: generated, text, stop, steps};
    }
    // llama.cpp's log lines reach JavaScript asynchronously; by now, after
    // the whole run, the context's lines have arrived.
    const resolved = settingsFromLogs(logs.slice(logStart), opts.flashAttn);
    const settings = {
        context_size: ctx.contextSize,
        n_batch: ctx.batchSize,
        n_ubatch: ctx.batchSize,
        threads: opts.threads,
        flash_attention_option: String(opts.flashAttn),
        ...resolved,
        add_bos: addBos,
        n_vocab: nVocab,
    };
    await ctx.dispose();
    await model.dispose();
    return {entry, settings};
}

// compare checks one model's fresh results against an oracle entry and
// returns the differences it found.
function compare(modelName, want, got, tol) {
    const report = {model: modelName, prompts: 0, steps: 0, max_logprob_diff: 0, where: null, mismatches: []};
    for (const [prompt, w] of Object.entries(want)) {
        const g = got[prompt];
        report.prompts++;
        const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
        if (!same(w.prompt_ids, g.prompt_ids)) report.mismatches.push({prompt, field: "prompt_ids", want: w.prompt_ids, got: g.prompt_ids});
        if (!same(w.generated_ids, g.generated_ids)) report.mismatches.push({prompt, field: "generated_ids", want: w.generated_ids, got: g.generated_ids});
        if (w.text !== g.text) report.mismatches.push({prompt, field: "text", want: w.text, got: g.text});
        const n = Math.min(w.steps.length, g.steps.length);
        for (let i = 0; i < n; i++) {
            report.steps++;
            const gotTop = new Map(g.steps[i].top5);
            const wantIds = w.steps[i].top5.map(([id]) => id);
            if (!same(wantIds, g.steps[i].top5.map(([id]) => id))) {
                report.mismatches.push({prompt, field: `steps[${i}].top5 ids`, want: wantIds, got: [...gotTop.keys()]});
            }
            for (const [id, lp] of [[w.steps[i].id, w.steps[i].logprob], ...w.steps[i].top5]) {
                const other = id === g.steps[i].id ? g.steps[i].logprob : gotTop.get(id);
                if (other === undefined) continue;
                const d = Math.abs(other - lp);
                if (d > report.max_logprob_diff) {
                    report.max_logprob_diff = d;
                    report.where = {prompt, step: i, id, want: lp, got: other};
                }
            }
        }
    }
    report.ok = report.mismatches.length === 0 && report.max_logprob_diff <= tol;
    return report;
}

// format writes JSON with one step (and one id list) per line so that the
// file stays small and diffs stay readable.
function format(value, indent = "") {
    const flat = JSON.stringify(value);
    const isNumbers = Array.isArray(value) && value.every((v) => typeof v === "number");
    if (value === null || typeof value !== "object" || isNumbers || flat.length <= 320) return flat;
    const inner = indent + " ";
    if (Array.isArray(value)) {
        return "[\n" + value.map((v) => inner + format(v, inner)).join(",\n") + "\n" + indent + "]";
    }
    const items = Object.entries(value).map(([k, v]) => inner + JSON.stringify(k) + ": " + format(v, inner));
    return "{\n" + items.join(",\n") + "\n" + indent + "}";
}

async function main() {
    const {flags, positional} = parseArgs(process.argv.slice(2), {
        n: "number", prompt: "list", prompts: "string", out: "string", check: "string",
        tol: "string", threads: "number", ctx: "number", batch: "number",
        "flash-attn": "string", kv: "string",
    });
    if (positional.length === 0) throw new Error(usage);
    const flashModes = {auto: "auto", on: true, off: false};
    const flashAttn = flashModes[flags["flash-attn"] ?? "auto"];
    if (flashAttn === undefined) throw new Error(`--flash-attn: want auto, on or off, got ${JSON.stringify(flags["flash-attn"])}`);
    const kv = (flags.kv ?? "F16").toUpperCase();
    if (!/^[A-Z0-9_]+$/.test(kv)) throw new Error(`--kv: want a ggml type name such as F16, got ${JSON.stringify(flags.kv)}`);
    const opts = {n: flags.n ?? 32, threads: flags.threads ?? 2, ctx: flags.ctx ?? 1024, batch: flags.batch ?? 512, flashAttn, kv};
    if (opts.threads === 0 || opts.ctx === 0 || opts.batch === 0) throw new Error("--threads, --ctx and --batch must be positive");
    const tol = flags.tol === undefined ? 5e-3 : Number(flags.tol);
    if (!(tol >= 0)) throw new Error(`--tol: want a non-negative number, got ${JSON.stringify(flags.tol)}`);

    let oracle = null;
    let prompts = extendedPrompts;
    if (flags.check) {
        oracle = JSON.parse(fs.readFileSync(flags.check, "utf8"));
        if (typeof oracle.models !== "object") throw new Error(`${flags.check}: no "models" object`);
    } else if (flags.prompt || flags.prompts) {
        prompts = [...(flags.prompt ?? [])];
        if (flags.prompts) {
            const list = JSON.parse(fs.readFileSync(flags.prompts, "utf8"));
            if (!Array.isArray(list) || !list.every((p) => typeof p === "string")) throw new Error(`${flags.prompts}: want a JSON array of strings`);
            prompts.push(...list);
        }
    }

    const logs = [];
    const {llama, build} = await loadPeer({
        threads: opts.threads,
        logLevel: "debug",
        logger: (level, message) => {
            logs.push(message);
            if (level === "error" || level === "fatal") process.stderr.write(message + "\n");
        },
    });
    const out = {
        generator: "scripts/peer/oracle.mjs",
        command: ["node", "scripts/peer/oracle.mjs", ...process.argv.slice(2)].join(" "),
        ...build,
        note: "greedy decoding (temperature 0); logprob = log-softmax of the raw logits before any sampler (float32 softmax over all n_vocab); prompt tokenized like llama-server /completion: BOS prepended, special-token text parsed; empty KV cache per prompt; generation stops after n_predict tokens or after an end-of-generation token (stop \"eos\", the token is the last generated id); text = the generated pieces concatenated; token = one piece alone (lossy for partial UTF-8 byte tokens)",
        n_predict: opts.n,
        settings: {},
        model_files: {},
        models: {},
    };
    const reports = [];
    for (const modelPath of positional) {
        const name = path.basename(modelPath);
        let jobs = prompts.map((prompt) => ({prompt, n: opts.n}));
        if (oracle) {
            const want = oracle.models[name];
            if (!want) throw new Error(`${flags.check} has no model ${name}`);
            jobs = Object.entries(want).map(([prompt, w]) => ({prompt, n: w.generated_ids.length}));
        }
        const {entry, settings} = await runModel(llama, logs, modelPath, jobs, opts);
        out.settings[name] = settings;
        out.model_files[name] = {sha256: crypto.createHash("sha256").update(fs.readFileSync(modelPath)).digest("hex")};
        out.models[name] = entry;
        if (oracle) reports.push(compare(name, oracle.models[name], entry, tol));
    }
    await llama.dispose();

    const text = format(out) + "\n";
    if (flags.out) {
        fs.mkdirSync(path.dirname(flags.out), {recursive: true});
        fs.writeFileSync(flags.out, text);
    }
    if (oracle) {
        process.stdout.write(JSON.stringify({check: flags.check, tolerance: tol, settings: out.settings, reports}, null, 1) + "\n");
        if (!reports.every((r) => r.ok)) process.exitCode = 1;
    } else if (!flags.out) {
        process.stdout.write(text);
    }
}

main().catch((err) => {
    process.stderr.write(`oracle: ${err.message}\n`);
    process.exitCode = 2;
});
