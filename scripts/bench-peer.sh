#!/usr/bin/env bash
# bench-peer.sh: rill's engine next to llama.cpp's llama-bench on the same
# GGUF files, in the same run, at the same thread count, and the ratios.
#
#   scripts/bench-peer.sh [--threads N] [--reps N] [--pp N] [--tg N] [--depth N]
#                         [--types "F16 Q8_0 ..."] [--models DIR] [--moe]
#                         [--depths "0 8192 16384 32768"] [--depth-pp N]
#                         [--shape 245m|llama3.2-1b|qwen3-1.7b]
#
# --moe runs the mixture-of-experts benchmark model instead (testmodel's
# BenchMoE, qwen3moe shaped like Qwen3-30B-A3B: 64 experts, 8 used per
# token; 634M parameters, 106M active), default types "Q8_0 Q4_0 Q4_K_M
# Q6_K"; its MiB column is total/active weights, and decode's bandwidth
# share counts the active bytes, what one token reads.
#
# It writes the 245M benchmark model as F16 (scripts/testmodel), quantises it
# with llama-quantize to each type, BF16 included (DIR keeps the files
# between runs; default a temporary folder), then for each type runs
# llama-bench (flash attention on, F16 KV cache, as rill computes
# attention) and scripts/rillbench:
# prompt processing of --pp tokens, generation of --tg tokens, and
# generation of 32 tokens after --depth tokens. It also measures the
# machine's read bandwidth and prints, for decode, the share of the
# bandwidth bound (weight bytes x tokens/s over bandwidth).
#
# The two engines take turns, one repetition each, --reps times, and each
# figure is the best of its repetitions: on a shared machine other work
# only ever slows a run down, and alternating keeps a change of load from
# landing on one engine's runs only. (llama-bench's OpenMP threads spin at
# barriers and suffer more from other processes than rill's pool; the
# header and the last line record the load.)
#
# llama-bench and llama-quantize come from scripts/peer/build-llama.sh
# (llama.cpp from node-llama-cpp's bundled source, OpenMP, native CPU), in
# $LLAMA_BUILD_DIR/bin (default /work/llama-build/bin). The machine is
# shared: run it when `uptime` shows little load, and read the ratios.
# Its ratios are the per-type table of docs/performance.md: a rerun updates
# that page (with the commit it ran at), not the README.
#
# --shape picks the benchmark model: the 245M one (default), or one with the
# shape and vocabulary size of Llama 3.2 1B or Qwen3 1.7B (scripts/testmodel
# -model bench-llama3.2-1b, bench-qwen3-1.7b; 2.5 and 3.4 GB as F16).
#
# With --depths, it measures attention at long context instead: for each
# type and each depth D of the list, prefill of --depth-pp tokens (default
# 512) and generation of 32 tokens after D tokens in the cache (llama-bench
# -d D; the same for rillbench), and each engine's prefill rate at D over
# its rate at the list's first depth (give 0 first for the short-prompt
# rate). Filling the cache takes most of the time: a 32k depth runs for
# many minutes per repetition on 2 threads.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 pp=494 tg=128 depth=2048 depths="" dpp=512 shape=245m
types="F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K IQ4_XS"
models="" moe=0 typesset=0
while [ $# -gt 0 ]; do
  case "$1" in
    --moe) moe=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --tg) tg=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --types) types=$2; typesset=1; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --depths) depths=$2; shift 2 ;;
    --depth-pp) dpp=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    *) sed -n '2,50p' "$0" >&2; exit 2 ;;
  esac
done
bin=${LLAMA_BUILD_DIR:-/work/llama-build}/bin
for tool in llama-bench llama-quantize; do
  if [ ! -x "$bin/$tool" ]; then
    echo "$bin/$tool is missing: run scripts/peer/build-llama.sh (about 25 minutes)" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$models" ] || models=$tmp/models
mkdir -p "$models"
go build -o "$tmp/rillbench" ./scripts/rillbench

case "$shape" in
  245m) spec=bench ;;
  llama3.2-1b | qwen3-1.7b) spec=bench-$shape ;;
  *) echo "--shape $shape: want 245m, llama3.2-1b or qwen3-1.7b" >&2; exit 2 ;;
esac
base=rill-bench-$shape
if [ "$moe" = 1 ]; then
  base=rill-bench-moe spec=bench-moe
  [ "$typesset" = 1 ] || types="Q8_0 Q4_0 Q4_K_M Q6_K"
fi
f16=$models/$base-F16.gguf
[ -f "$f16" ] || go run ./scripts/testmodel -model "$spec" -type F16 -out "$f16"

# json FILE KEY N_PROMPT N_GEN N_DEPTH: the best (largest) KEY of the
# matching records (llama-bench's -o jsonl lines, or rillbench's).
json() {
  python3 - "$@" <<'EOF'
import json, sys
path, key, p, n, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
recs = [json.loads(l) for l in open(path) if l.startswith('{')]
best = None
for r in recs:
    if 'n_prompt' in r:
        ok = r['n_prompt'] == p and r['n_gen'] == n and r['n_depth'] == d
    else:
        ok = r['test'] == (f'pp{p}' if p else f'tg{n}') and r['n_depth'] == d
    if ok:
        best = max(best or 0, r[key])
print('' if best is None else '%.1f' % best)
EOF
}
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)) if a and b else '?')" "$1" "$2"; }

bw=$("$tmp/rillbench" -bandwidth -t "$threads" | python3 -c "import json,sys; print(json.load(sys.stdin)['gb_s'])")
echo "# $(date -u +%FT%TZ) threads=$threads, best of $reps alternating runs, load: $(cut -d' ' -f1-3 /proc/loadavg), read bandwidth: $bw GB/s"
echo "# llama.cpp: $(cat "$bin/COMMIT" 2>/dev/null || echo unknown) (llama-bench -fa 1, OpenMP); rill: $(git rev-parse --short HEAD)"
if [ -n "$depths" ]; then
  # Attention at depth: pp$dpp and tg32 after each depth, alternating.
  printf '%-8s %6s | %9s %9s %6s | %6s %6s | %9s %9s %6s\n' type depth "pp$dpp" llama ratio "rill/0" "llama/0" tg32 llama ratio
  for t in $types; do
    m=$models/$base-$t.gguf
    if [ "$t" != F16 ] && [ ! -f "$m" ]; then
      "$bin/llama-quantize" "$f16" "$m" "$t" > "$tmp/quantize.log" 2>&1 || { cat "$tmp/quantize.log" >&2; exit 1; }
    fi
    rp0="" lp0=""
    for d in $depths; do
      : > "$tmp/ld.json"; : > "$tmp/rd.json"
      for rep in $(seq "$reps"); do
        "$bin/llama-bench" -m "$m" -t "$threads" -r 1 -fa 1 -p "$dpp" -n 32 -d "$d" -o jsonl >> "$tmp/ld.json" 2> "$tmp/l.err"
        "$tmp/rillbench" -model "$m" -t "$threads" -r 1 -p "$dpp" -n 32 -d "$d" >> "$tmp/rd.json"
      done
      rp=$(json "$tmp/rd.json" avg_ts "$dpp" 0 "$d"); lp=$(json "$tmp/ld.json" avg_ts "$dpp" 0 "$d")
      rt=$(json "$tmp/rd.json" avg_ts 0 32 "$d"); lt=$(json "$tmp/ld.json" avg_ts 0 32 "$d")
      [ -n "$rp0" ] || { rp0=$rp; lp0=$lp; }
      printf '%-8s %6s | %9s %9s %6s | %6s %6s | %9s %9s %6s\n' "$t" "$d" "$rp" "$lp" "$(ratio "$rp" "$lp")" \
        "$(ratio "$rp" "$rp0")" "$(ratio "$lp" "$lp0")" "$rt" "$lt" "$(ratio "$rt" "$lt")"
    done
  done
  echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
printf '%-8s %8s | %9s %9s %6s | %9s %9s %6s %6s | %9s %9s %6s\n' type MiB "pp$pp" llama ratio "tg$tg" llama ratio bw% "tg32@$depth" llama ratio
for t in $types; do
  m=$models/$base-$t.gguf
  if [ "$t" != F16 ] && [ ! -f "$m" ]; then
    "$bin/llama-quantize" "$f16" "$m" "$t" > "$tmp/quantize.log" 2>&1 || { cat "$tmp/quantize.log" >&2; exit 1; }
  fi
  : > "$tmp/l1.json"; : > "$tmp/l2.json"; : > "$tmp/r1.json"; : > "$tmp/r2.json"
  for rep in $(seq "$reps"); do
    "$bin/llama-bench" -m "$m" -t "$threads" -r 1 -fa 1 -p "$pp" -n "$tg" -o jsonl >> "$tmp/l1.json" 2> "$tmp/l.err"
    "$tmp/rillbench" -model "$m" -t "$threads" -r 1 -p "$pp" -n "$tg" >> "$tmp/r1.json"
    "$bin/llama-bench" -m "$m" -t "$threads" -r 1 -fa 1 -p 0 -n 32 -d "$depth" -o jsonl >> "$tmp/l2.json" 2>> "$tmp/l.err"
    "$tmp/rillbench" -model "$m" -t "$threads" -r 1 -p 0 -n 32 -d "$depth" >> "$tmp/r2.json"
  done
  rp=$(json "$tmp/r1.json" avg_ts "$pp" 0 0); lp=$(json "$tmp/l1.json" avg_ts "$pp" 0 0)
  rt=$(json "$tmp/r1.json" avg_ts 0 "$tg" 0); lt=$(json "$tmp/l1.json" avg_ts 0 "$tg" 0)
  rd=$(json "$tmp/r2.json" avg_ts 0 32 "$depth"); ld=$(json "$tmp/l2.json" avg_ts 0 32 "$depth")
  mib=$(( $(stat -L -c %s "$m") / 1048576 )) col=
  if [ "$moe" = 1 ]; then
    # Decode reads the active weights: the share counts those bytes.
    active=$("$tmp/rillbench" -model "$m" -weights | python3 -c "import json,sys; print(json.load(sys.stdin)['active_bytes'] // 1048576)")
    col=$mib/$active mib=$active
  fi
  share=$(python3 -c "import sys; print('%.0f' % (100*$mib*1.048576e-3*float('${rt:-0}')/float('$bw')))")
  printf '%-8s %8s | %9s %9s %6s | %9s %9s %6s %6s | %9s %9s %6s\n' "$t" "${col:-$mib}" \
    "$rp" "$lp" "$(ratio "$rp" "$lp")" "$rt" "$lt" "$(ratio "$rt" "$lt")" "$share" "$rd" "$ld" "$(ratio "$rd" "$ld")"
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
