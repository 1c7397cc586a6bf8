#!/usr/bin/env bash
# catalog-rss.sh: the resident memory of `rill serve --models-dir` as a
# catalogue of three models loads, evicts (cap of two) and unloads them.
# Usage: scripts/catalog-rss.sh [model type, default Q4_0]. Writes three
# copies of the 245M-parameter bench model to a temp folder (about 140 MB
# each at Q4_0), prints VmRSS at each step. Run it niced; it takes a minute.
set -euo pipefail
typ=${1:-Q4_0}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/rill" ./cmd/rill
go run ./scripts/testmodel -model bench -type "$typ" -out "$work/m.gguf"
mkdir "$work/models"
for id in a b c; do cp "$work/m.gguf" "$work/models/$id.gguf"; done
rm "$work/m.gguf"
port=$((20000 + RANDOM % 20000))
"$work/rill" serve --addr 127.0.0.1:$port --models-dir "$work/models" --models-max-loaded 2 \
	--kv-cache-mem 32MiB --threads 2 --log-level warn &
pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 100); do curl -sf $url/health >/dev/null && break; sleep 0.1; done
rss() { awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' /proc/$pid/status; }
states() { curl -s $url/v1/models | grep -o '"id":"[abc]"[^}]*"status":{"value":"[a-z]*"' | sed 's/"id":"\(.\)".*"value":"\(.*\)"/\1=\2/' | tr '\n' ' '; }
ask() { curl -sf $url/v1/completions -H 'Content-Type: application/json' \
	-d "{\"model\":\"$1\",\"prompt\":\"The fox\",\"max_tokens\":4}" >/dev/null; }
settle() { sleep 3; }
echo "start:            $(rss)  $(states)"
ask a; echo "a loaded:         $(rss)  $(states)"
ask b; echo "a, b loaded:      $(rss)  $(states)"
ask c; settle; echo "c loaded, a out:  $(rss)  $(states)"
curl -sf $url/models/unload -H 'Content-Type: application/json' -d '{"model":"b"}' >/dev/null
curl -sf $url/models/unload -H 'Content-Type: application/json' -d '{"model":"c"}' >/dev/null
settle; echo "all unloaded:     $(rss)  $(states)"
ask a; echo "a loaded again:   $(rss)  $(states)"
curl -sf $url/models/unload -H 'Content-Type: application/json' -d '{"model":"a"}' >/dev/null
settle; echo "all unloaded:     $(rss)  $(states)"
curl -s $url/metrics | grep -E '^rill_model_(loads|unloads)_total' | grep -v ' 0$'
