#!/usr/bin/env bash
# bench-peer.sh: rill's engine next to llama.cpp (node-llama-cpp 3.21.1) on
# the same GGUF files, in the same run, with the same thread count, and the
# ratios. Decode is llama-bench's tg128, prefill its pp64.
#
#   scripts/bench-peer.sh [--threads N] [--reps N] MODEL.gguf...
#
# Without MODEL arguments it uses ../shared/models/stories260K.gguf and writes
# the 245M benchmark model (Q8_0) to a temporary folder.
#
# Needs node-llama-cpp installed in scripts/peer (see scripts/peer/README.md).
# node-llama-cpp's prebuilt binary has no OpenMP: with 2 threads it spends
# most of its time in a thread barrier, so compare at --threads 1 (default).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1
reps=3
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ${#models[@]} -eq 0 ]; then
  [ -f ../shared/models/stories260K.gguf ] && models+=(../shared/models/stories260K.gguf)
  go run ./scripts/testmodel -model bench -type Q8_0 -out "$tmp/rill-bench-245m-Q8_0.gguf"
  models+=("$tmp/rill-bench-245m-Q8_0.gguf")
fi
if [ ! -d scripts/peer/node_modules/node-llama-cpp ] && [ -z "${PEER_DIR:-}" ]; then
  echo "node-llama-cpp is not installed: cd scripts/peer && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts" >&2
  exit 1
fi

printf '%-26s %-8s %12s %12s %8s\n' model test rill_tok_s llama_tok_s ratio
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  abs=$(cd "$(dirname "$m")" && pwd)/$(basename "$m")
  RILL_BENCH_GGUF="$abs" GOMAXPROCS="$threads" go test -run '^$' -bench "(Decode|Prefill)/${name}\$" \
    -benchtime 3x -count "$reps" ./engine/model/ > "$tmp/rill.txt"
  node scripts/peer/bench.mjs --threads "$threads" --reps "$reps" --parallel 0 "$abs" > "$tmp/peer.json"
  for test in Decode Prefill; do
    r=$(awk -v t="Benchmark$test/$name" '$1 ~ "^"t"(-[0-9]+)?$" { for (i=1;i<=NF;i++) if ($(i+1)=="tokens/s") { s+=$i; n++ } } END { if (n) printf "%.1f", s/n }' "$tmp/rill.txt")
    key=tg128; [ "$test" = Prefill ] && key=pp64
    p=$(python3 -c "import json; d=json.load(open('$tmp/peer.json')); print(next('%.1f' % r['avg_ts'] for r in d['results'] if r['test'] == '$key'))" 2>/dev/null || echo "")
    ratio=$(python3 -c "print('%.2f' % ($r/$p))" 2>/dev/null || echo "?")
    printf '%-26s %-8s %12s %12s %8s\n' "$name" "$key" "$r" "$p" "$ratio"
  done
done
