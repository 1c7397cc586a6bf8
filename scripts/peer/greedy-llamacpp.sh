#!/usr/bin/env bash
# greedy-llamacpp.sh: rill and llama.cpp's llama-server on the same GGUF
# files, over HTTP: for each prompt, /tokenize must give the same ids and
# greedy decoding (temperature 0, --n tokens) the same text.
#
#   scripts/peer/greedy-llamacpp.sh [--n N] [--threads N] FILE.gguf...
#
# For each file it starts llama-server (context 1024, its defaults
# otherwise: flash attention auto, F16 cache) and rill (--model FILE, F16
# cache), asks both, prints one line per prompt (same/DIFF, the token
# counts, and on a difference both texts) and stops them. It exits
# non-zero when a text or a tokenisation differs. It is how quantised
# mixture-of-experts files (llama-quantize's Q8_0, Q4_0, Q4_K_M, Q6_K)
# were checked, where rill's test oracles cover F32 only. On rill's test
# models a difference is worth a look at the logprobs first: their output
# projections (bigram statistics) give some tokens exactly equal logits
# up to the layers' perturbation, which two llama.cpp builds already break
# differently.
#
# llama-server comes from scripts/peer/build-llama.sh, in
# $LLAMA_BUILD_DIR/bin (default /work/llama-build/bin). Ports: $LLAMA_PORT
# (default 18491) and $RILL_PORT (18490). The servers' logs are kept in a
# temporary folder it names.
set -euo pipefail
cd "$(dirname "$0")/../.."

n=32 threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -*) sed -n '2,20p' "$0" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
server=${LLAMA_BUILD_DIR:-/work/llama-build}/bin/llama-server
lport=${LLAMA_PORT:-18491} rport=${RILL_PORT:-18490}
[ -x "$server" ] || { echo "no llama-server at $server (scripts/peer/build-llama.sh builds it)" >&2; exit 2; }

dir=$(mktemp -d /tmp/rill-greedy-llamacpp.XXXXXX)
go build -o "$dir/rill" ./cmd/rill
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap 'stop; echo "logs: $dir"' EXIT

# wait_for URL: until it answers 200, for at most two minutes.
wait_for() {
  for _ in $(seq 600); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.2
  done
  echo "no answer from $1" >&2
  return 1
}

status=0
for model in "$@"; do
  name=$(basename "$model" .gguf)
  "$server" -m "$model" --port "$lport" -t "$threads" -c 1024 --no-warmup > "$dir/$name.llama.log" 2>&1 &
  pids+=($!)
  "$dir/rill" --model "$model" --addr "127.0.0.1:$rport" --threads "$threads" --model-id m > "$dir/$name.rill.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$lport/health"
  wait_for "http://127.0.0.1:$rport/health"
  echo "# $name"
  python3 - "$lport" "$rport" "$n" <<'EOF' || status=1
import json, sys, urllib.request
lport, rport, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
prompts = [
    "Once upon a time there was a little fox",
    "The river ran past the old mill, and",
    "Café crème 🚀 and 日本語",
    "First line\n\tIndented with a tab\n\nLast line",
]
bad = 0
for p in prompts:
    lt = post(lport, "/tokenize", {"content": p, "add_special": True})["tokens"]
    rt = post(rport, "/tokenize", {"model": "m", "prompt": p})["tokens"]
    ltext = post(lport, "/completion", {"prompt": p, "n_predict": n, "temperature": 0, "cache_prompt": False})["content"]
    rtext = post(rport, "/v1/completions", {"model": "m", "prompt": p, "max_tokens": n, "temperature": 0})["choices"][0]["text"]
    same = lt == rt and ltext == rtext
    bad += not same
    print(f"{'same' if same else 'DIFF'}  tokens {len(rt)}{'' if lt == rt else ' (llama.cpp: %d %s, rill: %s)' % (len(lt), lt, rt)}  {p[:40]!r}")
    if ltext != rtext:
        print(f"    llama.cpp: {ltext!r}\n    rill:      {rtext!r}")
sys.exit(1 if bad else 0)
EOF
  stop
done
exit $status
