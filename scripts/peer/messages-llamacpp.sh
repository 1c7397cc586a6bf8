#!/usr/bin/env bash
# messages-llamacpp.sh: rill in front of llama.cpp's llama-server (kind
# llamacpp), checked end to end: Anthropic Messages requests go through to
# llama.cpp's /v1/messages, and the conformance suite's `messages` label
# (then, with --full, the whole suite) passes against rill.
#
#   scripts/peer/messages-llamacpp.sh [--full] [--runs N] [--model FILE]
#
# It starts llama-server on the model (default ../shared/models/stories260K.gguf,
# else the mirror in testdata/shared), builds rill and serves the model in
# front of it, then:
#
#  1. checks which route llama.cpp served: a streamed Messages request
#     through rill must reach llama.cpp's /v1/messages, a streamed chat
#     request with continuous_usage_stats its chat completions. It tells
#     them apart by GET /slots: rill asks chat completions for
#     timings_per_token when a stream wants running counts, and
#     /v1/messages takes no such field, so the slot that ran the request
#     shows timings_per_token true after chat and false after Messages;
#  2. runs `go test ./conformance/ -args -ginkgo.label-filter=messages`
#     against rill, --runs times (default 1), and with --full the whole
#     suite once more per run; each run's "Ran N of M Specs" line and
#     result are printed.
#
# llama-server comes from scripts/peer/build-llama.sh, in
# $LLAMA_BUILD_DIR/bin (default /work/llama-build/bin); the route check
# needs its /slots endpoint (on by default), curl and jq. Ports: $LLAMA_PORT
# (default 18481) and $RILL_PORT (18480). It exits non-zero when a check or
# a run failed; the servers' logs are kept in a temporary folder it names.
set -euo pipefail
cd "$(dirname "$0")/../.."

full=0 runs=1 model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "usage: $0 [--full] [--runs N] [--model FILE]" >&2; exit 2 ;;
  esac
done
if [ -z "$model" ]; then
  model=../shared/models/stories260K.gguf
  [ -f "$model" ] || model=testdata/shared/models/stories260K.gguf
fi
server=${LLAMA_BUILD_DIR:-/work/llama-build}/bin/llama-server
lport=${LLAMA_PORT:-18481} rport=${RILL_PORT:-18480}
[ -x "$server" ] || { echo "no llama-server at $server (scripts/peer/build-llama.sh builds it)" >&2; exit 2; }
[ -f "$model" ] || { echo "no model at $model" >&2; exit 2; }

dir=$(mktemp -d /tmp/rill-messages-llamacpp.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs: $dir"
}
trap cleanup EXIT

# wait_for URL: until it answers 200, for at most a minute.
wait_for() {
  for _ in $(seq 120); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; then return 0; fi
    sleep 0.5
  done
  echo "$1 did not come up" >&2
  return 1
}

"$server" -m "$model" --port "$lport" -t 1 >"$dir/llama-server.log" 2>&1 &
pids+=($!)
go build -o "$dir/rill" ./cmd/rill
cat >"$dir/rill.yaml" <<YAML
models:
  - id: stories260K
    upstream:
      kind: llamacpp
      replicas: [{url: "http://127.0.0.1:$lport"}]
YAML
wait_for "http://127.0.0.1:$lport/health"
"$dir/rill" serve --config "$dir/rill.yaml" --addr "127.0.0.1:$rport" >"$dir/rill.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$rport/v1/models"
echo "llama-server $(cat "${LLAMA_BUILD_DIR:-/work/llama-build}/bin/COMMIT" 2>/dev/null || echo '(commit unknown)') on $model; rill at 127.0.0.1:$rport"

status=0

# route PATH BODY: POST BODY to rill's PATH (streamed), then print the
# timings_per_token of the llama.cpp slot that ran the latest task.
route() {
  curl -sN "http://127.0.0.1:$rport$1" -H 'content-type: application/json' -d "$2" >/dev/null
  curl -s "http://127.0.0.1:$lport/slots" | jq -r 'max_by(.id_task) | .params.timings_per_token'
}
msg='{"model":"stories260K","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Once upon a time"}]}'
chat='{"model":"stories260K","max_tokens":4,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"messages":[{"role":"user","content":"Once upon a time"}]}'
via_chat=$(route /v1/chat/completions "$chat")
via_msg=$(route /v1/messages "$msg")
if [ "$via_chat" = true ] && [ "$via_msg" = false ]; then
  echo "route: Messages requests reach llama.cpp's /v1/messages (timings_per_token: chat $via_chat, messages $via_msg)"
else
  echo "route: FAILED (timings_per_token after chat: $via_chat, after Messages: $via_msg; want true, false)"
  status=1
fi

# suite NAME ARGS...: one conformance run against rill.
suite() {
  local name=$1 log="$dir/conformance-$1-$2.log"
  shift 2
  if RILL_CONFORMANCE_URL="http://127.0.0.1:$rport/v1" go test ./conformance/ -count=1 -v -args -ginkgo.no-color "$@" >"$log" 2>&1; then
    echo "$name: $(grep -E '^Ran [0-9]+ of' "$log") — $(grep -E '^(SUCCESS|FAIL)!' "$log")"
  else
    echo "$name: $(grep -E '^Ran [0-9]+ of' "$log" || echo 'no summary') — $(grep -E '^(SUCCESS|FAIL)!' "$log" || echo 'failed') (see $log)"
    grep -E '^\s+\[FAIL\]' "$log" || true
    status=1
  fi
}
for i in $(seq "$runs"); do
  suite messages "$i" -ginkgo.label-filter=messages
  if [ "$full" = 1 ]; then
    suite full "$i"
  fi
done
exit $status
