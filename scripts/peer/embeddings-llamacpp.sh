#!/usr/bin/env bash
# embeddings-llamacpp.sh: rill and llama.cpp's llama-server --embeddings
# --pooling last on the tiny qwen3 decoder embedder, over HTTP: the same
# inputs must give the same vectors, and both serve a batch of short texts
# at a measured rate.
#
#   scripts/peer/embeddings-llamacpp.sh [--threads N] [--rounds N] [FILE.gguf]
#
# Without a file it writes the tiny qwen3 embedder (go run ./scripts/testmodel
# -model qwen3-embedding). It starts llama-server (--embeddings --pooling
# last, context 1024) and rill (--model FILE) on it, sends each input as
# token ids (no tokenizer in the way) and as text, and prints one line per
# input with the cosine distance of the two vectors (pass: < 1e-4) and the
# prompt_tokens each server counted. Then it sends a batch of 64 short
# texts --rounds times (default 5) to each server, one request at a time,
# and prints inputs per second for both. It exits non-zero when a distance
# is 1e-4 or more.
#
# llama-server comes from scripts/peer/build-llama.sh, in
# $LLAMA_BUILD_DIR/bin (default /work/llama-build/bin). Ports: $LLAMA_PORT
# (default 18493) and $RILL_PORT (18492). The servers' logs are kept in a
# temporary folder it names.
set -euo pipefail
cd "$(dirname "$0")/../.."

threads=2 rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -*) sed -n '2,22p' "$0" >&2; exit 2 ;;
    *) break ;;
  esac
done
server=${LLAMA_BUILD_DIR:-/work/llama-build}/bin/llama-server
lport=${LLAMA_PORT:-18493} rport=${RILL_PORT:-18492}
[ -x "$server" ] || { echo "no llama-server at $server (scripts/peer/build-llama.sh builds it)" >&2; exit 2; }

dir=$(mktemp -d /tmp/rill-embeddings-llamacpp.XXXXXX)
go build -o "$dir/rill" ./cmd/rill
model=${1:-}
if [ -z "$model" ]; then
  model=$dir/qwen3-embedding.gguf
  go run ./scripts/testmodel -model qwen3-embedding -out "$model"
fi
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

"$server" -m "$model" --port "$lport" -t "$threads" -c 1024 --embeddings --pooling last --no-warmup > "$dir/llama.log" 2>&1 &
pids+=($!)
"$dir/rill" --model "$model" --addr "127.0.0.1:$rport" --threads "$threads" --model-id m > "$dir/rill.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$lport/health"
wait_for "http://127.0.0.1:$rport/health"
echo "# $(basename "$model") (threads $threads)"
python3 - "$lport" "$rport" "$rounds" <<'PY'
import base64, json, math, struct, sys, time, urllib.request
lport, rport, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
def vectors(port, inputs):
    doc = post(port, {"model": "m", "input": inputs})
    out = []
    for d in sorted(doc["data"], key=lambda d: d["index"]):
        e = d["embedding"]
        out.append(list(struct.unpack(f"<{len(base64.b64decode(e))//4}f", base64.b64decode(e))) if isinstance(e, str) else e)
    return out, doc.get("usage", {}).get("prompt_tokens")
def cosdist(a, b):
    if len(a) != len(b):
        return 2.0
    dot = sum(x*y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x*x for x in a)), math.sqrt(sum(y*y for y in b))
    return 1 - dot/(na*nb) if na and nb else 2.0
ids = [[20, 21, 22, 23, 24, 25, 26, 27], [40, 41, 42, 43, 44], [5] * 30, list(range(100, 164)), [7]]
texts = ["Once upon a time there was a little fox", "The river ran past the old mill, and",
         "hello", "A cat sat on the mat. It was a sunny day and the birds sang in the trees."]
worst, bad = 0.0, 0
for kind, inputs in (("ids", ids), ("text", texts)):
    for x in inputs:
        (lv,), lp = vectors(lport, [x])
        (rv,), rp = vectors(rport, [x])
        d = cosdist(lv, rv)
        worst = max(worst, d)
        ok = d < 1e-4
        bad += not ok
        label = f"{len(x)} ids" if kind == "ids" else repr(x[:40])
        print(f"{'same' if ok else 'DIFF'}  {kind:4}  {label:44}  cosine distance {d:.2e}  prompt_tokens llama.cpp {lp} rill {rp}  dims {len(lv)}/{len(rv)}")
print(f"worst cosine distance {worst:.2e} over {len(ids) + len(texts)} inputs; {bad} at or over 1e-4")
words = "fox river mill cat mat sun bird tree stone cloud rain wind".split()
batch = [f"{words[i % 12]} {words[(i * 5) % 12]} number {i} walks by the {words[(i * 7) % 12]}" for i in range(64)]
for name, port in (("llama.cpp", lport), ("rill", rport)):
    vectors(port, batch)  # warm
    t0 = time.perf_counter()
    for _ in range(rounds):
        _, pt = vectors(port, batch)
    dt = time.perf_counter() - t0
    print(f"{name:9}  batch of {len(batch)} texts ({pt} tokens) x {rounds}: {len(batch) * rounds / dt:8.1f} inputs/s, {pt * rounds / dt:9.1f} tokens/s")
sys.exit(1 if bad else 0)
PY
