// llamacpp.mjs loads llama.cpp through node-llama-cpp for the peer scripts
// (oracle.mjs, bench.mjs) and describes the build it loaded.
//
// node-llama-cpp is resolved from $PEER_DIR/node_modules when PEER_DIR is set,
// otherwise from this folder's node_modules (after `npm ci --ignore-scripts`
// here). The version must be exactly the pinned one: the recorded oracle data
// depend on the llama.cpp build that version bundles.

import fs from "node:fs";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

// pinnedVersion is the node-llama-cpp version package.json pins.
export const pinnedVersion = "3.21.1";

// bundledCommit is the LLAMA_COMMIT string compiled into the prebuilt
// @node-llama-cpp/linux-x64@3.21.1 binaries (libllama-common.so; its
// LLAMA_BUILD_NUMBER is 1 because the build came from a squashed snapshot).
// JavaScript cannot read it, so it was read once with ctypes (see README.md)
// and is only reported for the pinned version.
const bundledCommit = "5b4ebc5";

const here = path.dirname(fileURLToPath(import.meta.url));

// peerDir returns the folder whose node_modules holds node-llama-cpp.
export function peerDir() {
    return process.env.PEER_DIR ?? here;
}

function readJSON(file) {
    return JSON.parse(fs.readFileSync(file, "utf8"));
}

// loadPeer imports node-llama-cpp, checks its version and starts llama.cpp on
// the CPU with the prebuilt binary only: it never builds from source and never
// downloads anything. threads caps the Llama instance's thread pool (0: the
// library default). It returns the module, the Llama instance and a build
// description for JSON headers. The caller disposes llama.
export async function loadPeer({threads = 0, logLevel = "error", logger} = {}) {
    const root = path.join(peerDir(), "node_modules", "node-llama-cpp");
    let pkg;
    try {
        pkg = readJSON(path.join(root, "package.json"));
    } catch (err) {
        throw new Error(`node-llama-cpp not found under ${peerDir()} (run npm ci --ignore-scripts in scripts/peer, or set PEER_DIR): ${err.message}`);
    }
    if (pkg.version !== pinnedVersion) {
        throw new Error(`node-llama-cpp ${pkg.version} found in ${peerDir()}, want exactly ${pinnedVersion}`);
    }
    const info = readJSON(path.join(root, "llama", "llama.cpp.info.json"));
    const mod = await import(pathToFileURL(path.join(root, "dist", "index.js")).href);
    const options = {
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        logLevel: mod.LlamaLogLevel[logLevel],
    };
    if (threads > 0) options.maxThreads = threads;
    if (logger) options.logger = logger;
    const llama = await mod.getLlama(options);
    const build = {
        node_llama_cpp: pkg.version,
        llama_cpp_repo: info.llamaCppGithubRepo,
        llama_cpp_release: info.tag,
        llama_cpp_commit: bundledCommit,
        binary: llama.buildType,
        system_info: llama.systemInfo.trim(),
    };
    return {mod, llama, build};
}

// parseArgs splits argv into flags and positional arguments. spec maps a flag
// name (without "--") to "string", "number", "list" (repeatable) or "bool".
// Unknown flags and missing or malformed values are errors.
export function parseArgs(argv, spec) {
    const flags = {};
    const positional = [];
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (!arg.startsWith("--")) {
            positional.push(arg);
            continue;
        }
        const name = arg.slice(2);
        const kind = spec[name];
        if (kind === undefined) throw new Error(`unknown flag ${arg}`);
        if (kind === "bool") {
            flags[name] = true;
            continue;
        }
        if (i + 1 >= argv.length) throw new Error(`flag ${arg} needs a value`);
        const value = argv[++i];
        if (kind === "number") {
            const n = Number(value);
            if (!Number.isInteger(n) || n < 0) throw new Error(`flag ${arg}: want a non-negative integer, got ${JSON.stringify(value)}`);
            flags[name] = n;
        } else if (kind === "list") {
            (flags[name] ??= []).push(value);
        } else {
            flags[name] = value;
        }
    }
    return {flags, positional};
}
