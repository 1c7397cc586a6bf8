#!/usr/bin/env bash
# Runs three coding agents non-interactively against rill, one turn each,
# on a tiny model with a long context, and shows what each sent and got:
#
#   Claude Code  claude -p          POST /v1/messages        (a second turn too,
#                                                            for its cache reads)
#   Codex CLI    codex exec         POST /v1/responses
#   Qwen Code    qwen -p            POST /v1/chat/completions
#
#   scripts/agents/run.sh                    # all three
#   AGENTS="codex qwen" scripts/agents/run.sh
#
# Steps: install the agents from npm into $AGENTS_DIR when they are missing
# (outside the repository); build rill and scripts/agents/tap (a logging
# proxy); then, in a network namespace of its own whose only interface is
# loopback (unshare; OFFLINE=0 skips it), so that no agent can reach the
# internet, serve the embedded test model with a long context on
# 127.0.0.1:$PORT, put the tap in front of it on $TAP_PORT, and run each
# agent in an empty folder against the tap. For each agent it prints the
# tap's lines (method, path, tools by type, output cap, status, finish,
# usage), rill's access-log lines (prompt, completion and cached tokens,
# time to first token) and the agent's own verdict, and at the end PASS or
# FAIL per agent: a turn that completed (and, for Claude Code, a second turn
# whose usage shows cache_read_input_tokens > 0). It exits 1 if any failed.
#
# The model: the embedded test model (random weights; its words are noise)
# at --ctx $CTX: the agents send 25k to 45k prompt tokens with 9 to 12
# tools, and the model's RoPE takes any context. It is served with
# Qwen 2.5's chat template (TEMPLATE), whose Hermes tool syntax the random
# model never writes, so every turn is one answer in words that ends where
# the model samples its end token. TEMPLATE=model keeps the model's own
# ChatML template: rill then holds replies to the generic tool format by a
# grammar, the model calls tools at random, and each agent runs its tools
# and comes back with the results, which takes longer (set MAX_OUTPUT: Codex
# sends no output cap, and a string the random model never closes runs to
# the end of the context).
#
# Environment (defaults in brackets):
#   AGENTS      which agents ["claude codex qwen"]
#   AGENTS_DIR  npm prefix the agents are installed in [/work/agents]
#   WORK        folder for logs, dumps and the agents' homes [a new temp dir]
#   PORT        rill's port [18431];  TAP_PORT  the tap's port [18432]
#   CTX         context length in tokens [131072]
#   TEMPLATE    chat template file, or "model" [engine/chat/testdata/templates/qwen2.5.jinja]
#   MAX_OUTPUT  output cap given to Claude Code and Qwen Code [their own: 32000]
#   TIMEOUT     seconds per agent run [600]
#   OFFLINE     1: run in a loopback-only network namespace [1 when unshare works]
#   PROMPT      the first turn ["say hi"]
#
# Not part of CI: it downloads the agents (about 900 MB) once and takes a
# few minutes of CPU. Node.js 22 is what the agents ask for; they run on 20.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
AGENTS=${AGENTS:-"claude codex qwen"}
AGENTS_DIR=${AGENTS_DIR:-/work/agents}
PORT=${PORT:-18431}
TAP_PORT=${TAP_PORT:-18432}
CTX=${CTX:-131072}
TEMPLATE=${TEMPLATE:-engine/chat/testdata/templates/qwen2.5.jinja}
MAX_OUTPUT=${MAX_OUTPUT:-}
TIMEOUT=${TIMEOUT:-600}
PROMPT=${PROMPT:-"say hi"}
MODEL_ID=rill-tiny

CLAUDE_PKG=@anthropic-ai/claude-code@2.1.328
CODEX_PKG=@openai/codex@0.169.0
QWEN_PKG=@qwen-code/qwen-code@0.24.4

say() { printf '\n== %s\n' "$*"; }

# setup runs with the host's network: npm and the Go module cache.
setup() {
	export PATH="/usr/local/go/bin:$PATH"
	WORK=${WORK:-$(mktemp -d /tmp/rill-agents.XXXXXX)}
	mkdir -p "$WORK/bin"
	local missing=()
	for bin in claude codex qwen; do
		[ -x "$AGENTS_DIR/node_modules/.bin/$bin" ] || missing+=("$bin")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing the agents into $AGENTS_DIR (missing: ${missing[*]})"
		mkdir -p "$AGENTS_DIR"
		npm install --prefix "$AGENTS_DIR" --no-fund --no-audit "$CLAUDE_PKG" "$CODEX_PKG" "$QWEN_PKG"
	fi
	say "building rill and the tap into $WORK/bin"
	(cd "$REPO" && go build -o "$WORK/bin/rill" ./cmd/rill && go build -o "$WORK/bin/tap" ./scripts/agents/tap)
	export WORK
}

# offline re-runs this script in a network namespace with only loopback,
# when unshare allows one; it returns when it cannot.
offline() {
	[ "${OFFLINE:-1}" = 1 ] || return 0
	command -v unshare >/dev/null && command -v ip >/dev/null || {
		echo "no unshare or ip: the agents run with the host's network (their telemetry switches are off)"
		return 0
	}
	if ! unshare -rn true 2>/dev/null; then
		echo "unshare -rn is not allowed here: the agents run with the host's network (their telemetry switches are off)"
		return 0
	fi
	say "entering a network namespace with loopback only"
	exec unshare -rn env RILL_AGENTS_INSIDE=1 bash "$0"
}

# serve starts rill and the tap, and stops both when the script exits.
serve() {
	local tmpl=()
	if [ "$TEMPLATE" != model ]; then
		tmpl=(--chat-template-file "$REPO/$TEMPLATE")
		[ -f "$REPO/$TEMPLATE" ] || tmpl=(--chat-template-file "$TEMPLATE")
	fi
	say "rill: embedded model, --ctx $CTX, template ${TEMPLATE}"
	"$WORK/bin/rill" serve --addr "127.0.0.1:$PORT" --ctx "$CTX" --log-level debug "${tmpl[@]}" >"$WORK/rill.log" 2>&1 &
	RILL_PID=$!
	"$WORK/bin/tap" -listen "127.0.0.1:$TAP_PORT" -upstream "http://127.0.0.1:$PORT" -dump "$WORK/tap" >"$WORK/tap.log" 2>&1 &
	TAP_PID=$!
	trap 'kill $TAP_PID $RILL_PID 2>/dev/null; wait 2>/dev/null' EXIT
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$TAP_PORT/v1/models" >/dev/null && break
		sleep 0.1
	done
	curl -sf "http://127.0.0.1:$TAP_PORT/v1/models" >/dev/null || {
		cat "$WORK/rill.log" "$WORK/tap.log"
		echo "rill did not start" >&2
		exit 1
	}
	grep -m1 'msg="kv cache"' "$WORK/rill.log" | sed 's/^/  /'
	mkdir -p "$WORK/project" # the agents' working folder: empty
	export PATH="$AGENTS_DIR/node_modules/.bin:$PATH"
}

# exchanges prints what the tap and rill logged from line $1 and $2 on.
exchanges() {
	tail -n +"$1" "$WORK/tap.log" | grep '^tap #' | cut -c1-900 | sed 's/^/  /' || true
	tail -n +"$2" "$WORK/rill.log" | grep 'msg=request' | while read -r line; do
		echo "  rill: $(grep -oE '\b(method|path|status|ttft|duration|prompt_tokens|completion_tokens|cached_tokens)=[^ ]+' <<<"$line" | tr '\n' ' ')"
	done || true
}

mark() { echo "$(($(wc -l <"$WORK/tap.log") + 1)) $(($(wc -l <"$WORK/rill.log") + 1))"; }

declare -A RESULT

run_claude() {
	local home="$WORK/claude" out1="$WORK/claude-1.json" out2="$WORK/claude-2.json"
	mkdir -p "$home"
	local env=(HOME="$home" CLAUDE_CONFIG_DIR="$home/.claude"
		ANTHROPIC_BASE_URL="http://127.0.0.1:$TAP_PORT" ANTHROPIC_API_KEY=sk-local
		ANTHROPIC_MODEL="$MODEL_ID" ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL_ID"
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1)
	if [ -n "$MAX_OUTPUT" ]; then env+=(CLAUDE_CODE_MAX_OUTPUT_TOKENS="$MAX_OUTPUT"); fi
	say "Claude Code $(claude --version 2>/dev/null): claude -p \"$PROMPT\" --model $MODEL_ID --output-format json"
	read -r t r < <(mark)
	(cd "$WORK/project" && env "${env[@]}" timeout "$TIMEOUT" claude -p "$PROMPT" --model "$MODEL_ID" --output-format json </dev/null >"$out1" 2>"$WORK/claude-1.err") || true
	exchanges "$t" "$r"
	jq -c '{subtype, is_error, stop_reason, num_turns, usage: (.usage | {input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens}), result: (.result // "" | .[0:120])}' "$out1" 2>/dev/null | sed 's/^/  claude: /' || tail -5 "$out1" "$WORK/claude-1.err"
	say "Claude Code, second turn: claude -p \"and again\" --continue"
	read -r t r < <(mark)
	(cd "$WORK/project" && env "${env[@]}" timeout "$TIMEOUT" claude -p "and again" --continue --model "$MODEL_ID" --output-format json </dev/null >"$out2" 2>"$WORK/claude-2.err") || true
	exchanges "$t" "$r"
	jq -c '{subtype, is_error, stop_reason, usage: (.usage | {input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens})}' "$out2" 2>/dev/null | sed 's/^/  claude: /' || tail -5 "$out2" "$WORK/claude-2.err"
	local ok1 reads
	ok1=$(jq -r '(.is_error == false and .subtype == "success")' "$out1" 2>/dev/null || echo false)
	reads=$(jq -r '(.is_error == false) and (.usage.cache_read_input_tokens > 0)' "$out2" 2>/dev/null || echo false)
	if [ "$ok1" = true ] && [ "$reads" = true ]; then
		RESULT[claude]="PASS (second turn: $(jq -r .usage.cache_read_input_tokens "$out2") cache_read_input_tokens)"
	else
		RESULT[claude]="FAIL (first turn completed: $ok1; second turn read the cache: $reads)"
	fi
}

run_codex() {
	local home="$WORK/codex" out="$WORK/codex.jsonl"
	mkdir -p "$home"
	cat >"$home/config.toml" <<EOF
model = "$MODEL_ID"
model_provider = "rill"
check_for_update_on_startup = false

[analytics]
enabled = false

# The curated-plugins sync looks up api.github.com and chatgpt.com at start.
[features]
plugins = false

[model_providers.rill]
name = "rill"
base_url = "http://127.0.0.1:$TAP_PORT/v1"
wire_api = "responses"
env_key = "RILL_API_KEY"
EOF
	say "Codex CLI $(codex --version 2>/dev/null): codex exec --json --skip-git-repo-check \"$PROMPT\""
	read -r t r < <(mark)
	(cd "$WORK/project" && CODEX_HOME="$home" RILL_API_KEY=sk-local timeout "$TIMEOUT" codex exec --json --skip-git-repo-check "$PROMPT" </dev/null >"$out" 2>"$WORK/codex.err") || true
	exchanges "$t" "$r"
	jq -c 'select(.type == "turn.completed" or .type == "turn.failed" or .type == "error" or (.type == "item.completed" and .item.type != "reasoning")) |
		if .item.text then .item.text |= .[0:120] else . end' "$out" 2>/dev/null | cut -c1-400 | sed 's/^/  codex: /' || tail -5 "$out" "$WORK/codex.err"
	if jq -e 'select(.type == "turn.completed")' "$out" >/dev/null 2>&1; then
		RESULT[codex]="PASS (turn.completed)"
	else
		RESULT[codex]="FAIL (no turn.completed; see $out and $WORK/codex.err)"
	fi
}

run_qwen() {
	local home="$WORK/qwen" out="$WORK/qwen.json" sampling=""
	mkdir -p "$home"
	if [ -n "$MAX_OUTPUT" ]; then sampling=", \"model\": {\"generationConfig\": {\"samplingParams\": {\"max_tokens\": $MAX_OUTPUT}}}"; fi
	cat >"$home/settings.json" <<EOF
{"general": {"enableAutoUpdate": false}, "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false}$sampling}
EOF
	say "Qwen Code $(qwen --version 2>/dev/null): qwen -p \"$PROMPT\" --auth-type openai -o json"
	read -r t r < <(mark)
	(cd "$WORK/project" && QWEN_HOME="$home" QWEN_USAGE_STATISTICS_ENABLED=false QWEN_TELEMETRY_ENABLED=false \
		OPENAI_BASE_URL="http://127.0.0.1:$TAP_PORT/v1" OPENAI_API_KEY=sk-local OPENAI_MODEL="$MODEL_ID" \
		timeout "$TIMEOUT" qwen -p "$PROMPT" --auth-type openai -o json </dev/null >"$out" 2>"$WORK/qwen.err") || true
	exchanges "$t" "$r"
	jq -c '.[] | select(.type == "result") | {subtype, is_error, num_turns, usage, result: (.result // "" | .[0:120])}' "$out" 2>/dev/null | sed 's/^/  qwen: /' || tail -5 "$out" "$WORK/qwen.err"
	if [ "$(jq -r '.[] | select(.type == "result") | (.is_error == false and .subtype == "success")' "$out" 2>/dev/null)" = true ]; then
		RESULT[qwen]="PASS (result: success)"
	else
		RESULT[qwen]="FAIL (see $out and $WORK/qwen.err)"
	fi
}

if [ -z "${RILL_AGENTS_INSIDE:-}" ]; then
	setup
	offline
else
	ip link set lo up
fi
serve
for a in $AGENTS; do
	case $a in
	claude | codex | qwen) "run_$a" ;;
	*) echo "unknown agent $a (want claude, codex or qwen)" >&2 && exit 2 ;;
	esac
done
say "summary (logs, request and response bodies: $WORK)"
status=0
for a in $AGENTS; do
	echo "  $a: ${RESULT[$a]}"
	[[ ${RESULT[$a]} == PASS* ]] || status=1
done
exit $status
