// bench.mjs measures llama.cpp's prompt processing and decode speed on a GGUF
// model through node-llama-cpp, in the manner of llama-bench, and prints JSON.
//
// Usage (from the repository root, after `npm ci --ignore-scripts` in
// scripts/peer):
//
//   node scripts/peer/bench.mjs [flags] model.gguf
//
//   --threads N      llama.cpp threads (default 2)
//   --reps N         timed repetitions per test (default 5, as llama-bench)
//   --pp N           prompt length of the pp test (default 64; 0 skips it)
//   --tg N           generated tokens of the tg test (default 128; 0 skips it)
//   --parallel N     sequences decoding at once in one context for the
//                    parallel test (default 8; 0 or 1 skips it)
//   --flash-attn M   auto, on or off (default auto, as llama-bench)
//
// What each test does, mirroring llama-bench (tools/llama-bench): one untimed
// warmup run, then --reps timed runs, each from an empty KV cache, tokens/s
// per run, then their mean and sample standard deviation.
//   ppN: BOS then N-1 random tokens evaluated as one batch; the time includes
//        sampling one greedy token from the last position (llama-bench
//        computes that position's logits too, but does not sample).
//   tgN: N single-token decodes starting from BOS, each next input a random
//        token; node-llama-cpp samples a greedy token from every step's
//        logits (llama-bench samples nothing), and each step pays the
//        JavaScript <-> addon round trip, so tgN is a lower bound of what
//        llama-bench reports.
//   parallel: N sequences of one context each run tgM (M = --tg) at the same
//        time; node-llama-cpp gathers the sequences' pending tokens into one
//        llama_decode batch per step. Tokens/s counts all sequences' tokens.
// Random tokens come from a fixed-seed generator, so runs are repeatable.

import fs from "node:fs";
import path from "node:path";
import {loadPeer, parseArgs} from "./llamacpp.mjs";

const usage = "usage: node scripts/peer/bench.mjs [--threads N] [--reps N] [--pp N] [--tg N] [--parallel N] [--flash-attn auto|on|off] model.gguf";

// rng returns a deterministic generator of integers in [0, n) (mulberry32).
function rng(seed) {
    let a = seed >>> 0;
    return (n) => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return (((t ^ (t >>> 14)) >>> 0) % n);
    };
}

// stats summarises per-run tokens/s like llama-bench: mean and the sample
// standard deviation (n-1 denominator; 0 for a single run).
function stats(tokens, samplesNs) {
    const ts = samplesNs.map((ns) => tokens * 1e9 / ns);
    const mean = ts.reduce((s, x) => s + x, 0) / ts.length;
    const variance = ts.length > 1 ? ts.reduce((s, x) => s + (x - mean) ** 2, 0) / (ts.length - 1) : 0;
    const round = (x) => Number(x.toFixed(2));
    return {
        avg_ts: round(mean),
        stddev_ts: round(Math.sqrt(variance)),
        samples_ts: ts.map(round),
        avg_ms: Number((samplesNs.reduce((s, x) => s + x, 0) / samplesNs.length / 1e6).toFixed(3)),
    };
}

// decode runs n single-token steps on seq starting from first, feeding a
// random token after each step, and returns when all n steps are done.
async function decode(seq, first, n, next) {
    const gen = seq.evaluate([first], {temperature: 0, yieldEogToken: true});
    try {
        let res = await gen.next();
        for (let i = 1; i < n && !res.done; i++) res = await gen.next(next());
        if (res.done) throw new Error("generation ended early");
    } finally {
        await gen.return();
    }
}

async function timed(fn) {
    const start = process.hrtime.bigint();
    await fn();
    return Number(process.hrtime.bigint() - start);
}

// runTest makes a fresh context for one test, runs the warmup and the timed
// repetitions, and returns the samples in nanoseconds.
async function runTest(model, opts, {sequences, contextSize, run}) {
    const ctx = await model.createContext({
        contextSize,
        batchSize: Math.max(512, opts.pp),
        sequences,
        threads: {ideal: opts.threads, min: opts.threads},
        flashAttention: opts.flashAttn,
    });
    try {
        const seqs = Array.from({length: sequences}, () => ctx.getSequence());
        const clear = () => Promise.all(seqs.map((s) => s.clearHistory()));
        await run(seqs);
        const samples = [];
        for (let r = 0; r < opts.reps; r++) {
            await clear();
            samples.push(await timed(() => run(seqs)));
        }
        return samples;
    } finally {
        await ctx.dispose();
    }
}

async function main() {
    const {flags, positional} = parseArgs(process.argv.slice(2), {
        threads: "number", reps: "number", pp: "number", tg: "number", parallel: "number", "flash-attn": "string",
    });
    if (positional.length !== 1) throw new Error(usage);
    const modelPath = positional[0];
    const flashModes = {auto: "auto", on: true, off: false};
    const flashAttn = flashModes[flags["flash-attn"] ?? "auto"];
    if (flashAttn === undefined) throw new Error(`--flash-attn: want auto, on or off, got ${JSON.stringify(flags["flash-attn"])}`);
    const opts = {
        threads: flags.threads ?? 2, reps: flags.reps ?? 5, pp: flags.pp ?? 64, tg: flags.tg ?? 128,
        parallel: flags.parallel ?? 8, flashAttn,
    };
    if (opts.threads === 0 || opts.reps === 0) throw new Error("--threads and --reps must be positive");

    const {llama, build} = await loadPeer({threads: opts.threads});
    const model = await llama.loadModel({modelPath, gpuLayers: 0});
    const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    const bos = model.tokens.bos;
    const addBos = model.tokens.shouldPrependBosToken && bos != null;
    const next = rng(1234);
    const randomToken = () => next(nVocab);
    const firstToken = () => (addBos ? bos : randomToken());

    const results = [];
    if (opts.pp > 0) {
        const samples = await runTest(model, opts, {
            sequences: 1,
            contextSize: opts.pp + 16,
            run: async ([seq]) => {
                const tokens = [firstToken(), ...Array.from({length: opts.pp - 1}, randomToken)];
                const gen = seq.evaluate(tokens, {temperature: 0, yieldEogToken: true});
                try {
                    await gen.next();
                } finally {
                    await gen.return();
                }
            },
        });
        results.push({test: `pp${opts.pp}`, n_prompt: opts.pp, n_gen: 0, sequences: 1, ...stats(opts.pp, samples)});
    }
    if (opts.tg > 0) {
        const samples = await runTest(model, opts, {
            sequences: 1,
            contextSize: opts.tg + 16,
            run: ([seq]) => decode(seq, firstToken(), opts.tg, randomToken),
        });
        results.push({test: `tg${opts.tg}`, n_prompt: 0, n_gen: opts.tg, sequences: 1, ...stats(opts.tg, samples)});
    }
    if (opts.parallel > 1 && opts.tg > 0) {
        const samples = await runTest(model, opts, {
            sequences: opts.parallel,
            contextSize: opts.tg + 16,
            run: (seqs) => Promise.all(seqs.map((seq) => decode(seq, firstToken(), opts.tg, randomToken))),
        });
        results.push({
            test: `tg${opts.tg} x${opts.parallel}`, n_prompt: 0, n_gen: opts.tg, sequences: opts.parallel,
            ...stats(opts.tg * opts.parallel, samples),
        });
    }
    await model.dispose();
    await llama.dispose();

    const out = {
        generator: "scripts/peer/bench.mjs",
        ...build,
        model: path.basename(modelPath),
        model_size_bytes: fs.statSync(modelPath).size,
        threads: opts.threads,
        reps: opts.reps,
        flash_attention_option: String(opts.flashAttn),
        kv_cache_type: "f16",
        results,
    };
    process.stdout.write(JSON.stringify(out, null, 1) + "\n");
}

main().catch((err) => {
    process.stderr.write(`bench: ${err.message}\n`);
    process.exitCode = 2;
});
