#!/usr/bin/env bash
# The prefix cache across processes, over curl: two `strata serve` processes share one --cache-dir. A prompt
# server A computed is a hit on server B (usage.prompt_tokens_details.cached_tokens), with the same answer; a
# restarted A hits what it saved; a damaged file is a miss for the next server, never an error; `strata cache
# stats|verify|gc` read the directory. Needs bash, curl, grep and python3 (JSON).
# Usage: cache_test.sh STRATA_BINARY MODEL_DIR WORK_DIR   (run by tests/integration/run.sh)
set -euo pipefail
binary=$1 model=$2 work=$3
mkdir -p "$work"
dir=$work/shared-cache
rm -rf "$dir"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pids=()
trap 'for p in "${pids[@]}"; do kill -9 $p 2>/dev/null || true; done' EXIT
trap 'exit 1' INT TERM HUP PIPE

start() {  # NAME: starts a server on the shared directory, sets $port
  local log=$work/$1.log
  "$binary" serve --model "$model" --port 0 --cache-dir "$dir" --max-model-len 1024 --shutdown-grace 2 >"$log" 2>&1 &
  pids+=($!)
  port=
  for _ in $(seq 1200); do
    port=$(grep -Eo 'listening on http://127\.0\.0\.1:[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
    [ -n "$port" ] && return
    sleep 0.1
  done
  cat "$log"
  echo "FAIL: strata serve ($1) did not start" >&2
  exit 1
}
stop() {  # PID
  kill -TERM "$1"
  wait "$1" 2>/dev/null || true
}
prompt=$(python3 -c 'print(",".join(str(1000 + (i * 37 + 11) % 500) for i in range(300)))')
body='{"prompt":['$prompt'],"max_tokens":6,"temperature":0,"logprobs":2}'
complete() {  # PORT -> response body
  curl -sS -H "Content-Type: application/json" "http://127.0.0.1:$1/v1/completions" -d "$body"
}
field() {  # JSON EXPR
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}
# Waits until a server's writer thread has written everything it queued.
drain() {  # PORT
  for _ in $(seq 200); do
    # Into a variable first: with pipefail, grep -q leaving early would fail curl's write, and the pipeline.
    local metrics
    metrics=$(curl -s "http://127.0.0.1:$1/metrics")
    grep -q '^strata_prefix_cache_pending_writes{[^}]*} 0$' <<<"$metrics" && return
    sleep 0.05
  done
  fail "server on port $1 kept cache writes pending"
}

start a
port_a=$port pid_a=${pids[-1]}
cold=$(complete $port_a)
[ "$(field "$cold" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0 ] || fail "a cold prompt reported cached tokens: $cold"
drain $port_a

start b
port_b=$port pid_b=${pids[-1]}
hit=$(complete $port_b)
[ "$(field "$hit" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 256 ] ||
  fail "server B did not hit the 256 tokens server A saved: $hit"
[ "$(field "$hit" 'd["usage"]["prompt_cache_hit_tokens"], d["usage"]["prompt_cache_miss_tokens"]')" = "(256, 44)" ] ||
  fail "DeepSeek's hit/miss fields: $hit"
[ "$(field "$hit" 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')" = \
  "$(field "$cold" 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')" ] || fail "B's answer differs from A's: $hit vs $cold"
metrics_b=$(curl -s "http://127.0.0.1:$port_b/metrics")
grep -Eq '^strata_prefix_cache_hit_tokens_total\{[^}]*tier="disk"\} 256$' <<<"$metrics_b" ||
  fail "B's /metrics does not count 256 hit tokens from disk: $(grep hit_tokens <<<"$metrics_b")"
stop $pid_b

# A restarted A (a fresh index, rebuilt from the directory) hits too.
stop $pid_a
start a2
again=$(complete $port)
[ "$(field "$again" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 256 ] || fail "a restarted server missed: $again"
stop ${pids[-1]}

stats=$("$binary" cache stats --cache-dir "$dir" --json)
[ "$(field "$stats" 'sum(m["blocks"] for m in d.values()) >= 2 and sum(m["rows"] for m in d.values()) >= 1')" = True ] ||
  fail "strata cache stats: $stats"
"$binary" cache verify --cache-dir "$dir" >/dev/null || fail "strata cache verify found damage in a clean directory"

# Damage every file's payload: the next server computes instead (a miss), with the same answer.
for f in $(find "$dir" -name '*.kv'); do printf '\x7f' | dd of="$f" bs=1 seek=100 conv=notrunc status=none; done
"$binary" cache verify --cache-dir "$dir" >/dev/null && fail "strata cache verify passed damaged files"
start c
damaged=$(complete $port)
[ "$(field "$damaged" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0 ] || fail "damaged files were served: $damaged"
[ "$(field "$damaged" 'd["choices"][0]["text"]')" = "$(field "$cold" 'd["choices"][0]["text"]')" ] || fail "the answer changed"
stop ${pids[-1]}
"$binary" cache gc --cache-dir "$dir" >/dev/null
"$binary" cache verify --cache-dir "$dir" >/dev/null || fail "damage left after strata cache gc"

if [ $failures -gt 0 ]; then
  echo "cache_test: $failures failure(s); logs in $work" >&2
  exit 1
fi
echo "cache_test: PASS"
