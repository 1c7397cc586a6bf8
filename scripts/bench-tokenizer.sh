#!/usr/bin/env bash
# bench-tokenizer.sh: rill's tokenizer next to llama.cpp's (node-llama-cpp
# 3.21.1, vocab-only GGUFs) and Hugging Face tokenizers (Rust, via npm), on
# the same text in the same run, with the ratios. The text is the first
# --bytes of the Go standard library's sources (sorted .go files outside
# testdata), the corpus BenchmarkEncodeVocab uses by default.
#
#   PEER_DIR=/work/peer HF_DIR=/work/peer-tok scripts/bench-tokenizer.sh [--bytes N] [--reps N]
#
# Needs ../shared/models/vocab, node-llama-cpp (PEER_DIR or scripts/peer, see
# scripts/peer/README.md) and, for the Hugging Face column, HF_DIR with the
# packages that scripts/peer/tokbench.mjs names. Token counts are printed so
# that a disagreement shows; llama.cpp and rill agree on every token.
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=1048576
reps=5
while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) bytes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text="$tmp/text.txt"
# head closes the pipe early; the producers' SIGPIPE is expected.
{ find "$(go env GOROOT)/src" -name '*.go' -not -path '*testdata*' | LC_ALL=C sort | xargs cat 2>/dev/null || true; } |
  head -c "$bytes" > "$text"
# Drop a character cut in half at the end, so every tokenizer sees valid UTF-8.
python3 - "$text" <<'EOF'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
while b and (b[-1] & 0xC0) == 0x80:
    b = b[:-1]
if b and b[-1] >= 0xC0:
    b = b[:-1]
open(p, "wb").write(b)
EOF

node scripts/peer/tokbench.mjs --text "$text" --reps "$reps" 2>/dev/null | grep '^{' > "$tmp/peers.jsonl"
TOKENIZER_BENCH_TEXT="$text" go test ./engine/tokenizer/ -run '^$' -bench 'BenchmarkEncodeVocab$' \
  -benchtime "${reps}x" > "$tmp/rill.txt"

python3 - "$tmp/peers.jsonl" "$tmp/rill.txt" <<'EOF'
import json, re, sys
peers = [json.loads(l) for l in open(sys.argv[1])]
rill = {}
for line in open(sys.argv[2]):
    m = re.match(r"BenchmarkEncodeVocab/(\S+?)-\d+\s", line)
    if not m:
        continue
    f = dict((k, float(v)) for v, k in re.findall(r"([\d.]+) (tokens/s|tokens/op|allocB/inputB)", line))
    rill[m.group(1)] = f
print(f"{'vocab':<10} {'peer':<14} {'peer tokens':>11} {'rill tokens':>11} {'peer tok/s':>11} {'rill tok/s':>11} {'rill/peer':>9}")
for p in peers:
    r = rill.get(p["set"])
    if not r:
        continue
    print(f"{p['set']:<10} {p['peer']:<14} {p['tokens']:>11} {int(r['tokens/op']):>11} "
          f"{p['tokens_per_s']:>11.0f} {r['tokens/s']:>11.0f} {r['tokens/s'] / p['tokens_per_s']:>9.2f}")
for s, r in rill.items():
    print(f"rill {s}: {r['allocB/inputB']:.2f} bytes allocated per input byte")
EOF
