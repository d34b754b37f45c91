#!/usr/bin/env bash
# `strata serve` over plain curl: a whole response, a stream (server-sent events over chunked transfer), error
# bodies, /health and /metrics, and a clean exit on SIGTERM. Needs only bash, curl and grep.
# Usage: curl_test.sh STRATA_BINARY MODEL_DIR WORK_DIR   (run by tests/integration/run.sh)
set -euo pipefail
binary=$1 model=$2 work=$3
mkdir -p "$work"
log=$work/serve.log
key=curl-test-key

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# expect_match WHAT TEXT REGEX: TEXT matches the extended regex.
expect_match() {
  if ! grep -Eq -- "$3" <<<"$2"; then fail "$1: expected to match /$3/, got: $(head -c 2000 <<<"$2")"; fi
}

"$binary" serve --model "$model" --port 0 --api-key "$key" --served-model-name curl-model --max-model-len 512 \
  --shutdown-grace 5 >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
trap 'exit 1' INT TERM HUP PIPE  # so the EXIT trap runs
port=
for _ in $(seq 1200); do  # up to 120 s: the ASan build loads the checkpoint slowly
  port=$(grep -Eo 'listening on http://127\.0\.0\.1:[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "FAIL: strata serve exited before listening" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "FAIL: strata serve did not start" >&2; exit 1; }
url=http://127.0.0.1:$port
auth=(-H "Authorization: Bearer $key")
json=(-H "Content-Type: application/json")

# --- a whole chat response
out=$(curl -sS -D "$work/head" -o "$work/body" -w '%{http_code}' "${auth[@]}" "${json[@]}" "$url/v1/chat/completions" \
  -d '{"model":"curl-model","messages":[{"role":"user","content":"Hello there"}],"max_tokens":5,"ignore_eos":true}')
body=$(cat "$work/body")
[ "$out" = 200 ] || fail "chat: status $out, body $body"
expect_match "chat content type" "$(cat "$work/head")" '^[Cc]ontent-[Tt]ype: application/json'
expect_match "chat id" "$body" '^\{"id":"chatcmpl-[0-9a-f]{24}","object":"chat\.completion","created":[0-9]+,"model":"curl-model",'
expect_match "chat message" "$body" '"message":\{"role":"assistant","content":"'
expect_match "chat finish" "$body" '"finish_reason":"length"'
expect_match "chat usage" "$body" '"usage":\{"prompt_tokens":[1-9][0-9]*,"completion_tokens":5,"total_tokens":[0-9]+,"prompt_tokens_details":\{"cached_tokens":0\},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":[1-9][0-9]*\}\}$'

# --- a stream, with the usage chunk
curl -sS -N -D "$work/head" -o "$work/stream" "${auth[@]}" "${json[@]}" "$url/v1/completions" \
  -d '{"model":"curl-model","prompt":"Once upon a time","max_tokens":6,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}'
head=$(cat "$work/head")
stream=$(cat "$work/stream")
expect_match "stream status" "$head" '^HTTP/1\.1 200'
expect_match "stream content type" "$head" '^[Cc]ontent-[Tt]ype: text/event-stream'
expect_match "stream chunked" "$head" '^[Tt]ransfer-[Ee]ncoding: chunked'
# Every event is one "data: " line followed by a blank line; the last is [DONE].
events=$(grep -c '^data: ' "$work/stream" || true)
blank=$(grep -c '^$' "$work/stream" || true)
other=$(grep -Evc '^(data: .*)?$' "$work/stream" || true)
[ "$events" -ge 3 ] && [ "$events" = "$blank" ] && [ "$other" = 0 ] || fail "stream framing ($events events, $blank blank lines, $other other lines): $stream"
[ "$(grep '^data: ' <<<"$stream" | tail -1)" = "data: [DONE]" ] || fail "stream does not end with [DONE]: $stream"
[ "$(grep -c '"finish_reason":"length"' <<<"$stream" || true)" = 1 ] || fail "stream: one choice ends, once: $stream"
expect_match "stream chunks" "$stream" '^data: \{"id":"cmpl-[0-9a-f]{24}","object":"text_completion",'
expect_match "stream usage" "$stream" '^data: \{.*"choices":\[\],"usage":\{"prompt_tokens":[0-9]+,"completion_tokens":6,'

# --- error bodies: {"error":{"message","type","param","code"}}
out=$(curl -sS -D "$work/head" -o "$work/body" -w '%{http_code}' "${auth[@]}" "${json[@]}" "$url/v1/chat/completions" \
  -d '{"model":"curl-model","messages":[{"role":"user","content":"Hi"}],"frobnicate":1}')
body=$(cat "$work/body")
[ "$out" = 400 ] || fail "unknown parameter: status $out, body $body"
expect_match "400 content type" "$(cat "$work/head")" '^[Cc]ontent-[Tt]ype: application/json'
expect_match "400 body" "$body" '^\{"error":\{"message":"frobnicate: unknown parameter","type":"invalid_request_error","param":"frobnicate","code":null\}\}$'

out=$(curl -sS -D "$work/head" -o "$work/body" -w '%{http_code}' -H "Authorization: Bearer wrong" "$url/v1/models")
[ "$out" = 401 ] || fail "bad key: status $out"
expect_match "401 header" "$(cat "$work/head")" '^[Ww][Ww][Ww]-[Aa]uthenticate: Bearer'
expect_match "401 body" "$(cat "$work/body")" '"type":"invalid_request_error","param":null,"code":"invalid_api_key"'

out=$(curl -sS -o "$work/body" -w '%{http_code}' "${auth[@]}" "$url/v1/completions" -d '{"model":"curl-model","prompt":')
[ "$out" = 400 ] || fail "malformed JSON: status $out"
expect_match "malformed JSON body" "$(cat "$work/body")" '"message":"the request body is not valid JSON'

out=$(curl -sS -o "$work/body" -w '%{http_code}' "${auth[@]}" "$url/v1/completions" -d '{"model":"other","prompt":"x"}')
[ "$out" = 404 ] || fail "unknown model: status $out"
expect_match "404 body" "$(cat "$work/body")" '"param":"model","code":"model_not_found"'

out=$(curl -sS -o /dev/null -w '%{http_code}' "$url/v1/nowhere")
[ "$out" = 404 ] || fail "unknown route: status $out"

# --- open endpoints, then the engine is idle
[ "$(curl -sS -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] || fail "/health"
metrics=$(curl -sS "$url/metrics")
for name in strata_num_requests_running strata_num_requests_waiting strata_state_pool_used_blocks; do
  expect_match "$name" "$metrics" "^$name\\{model_name=\"curl-model\"\\} 0$"
done
expect_match "errors counted" "$metrics" '^strata_http_errors_total\{model_name="curl-model",status="400"\} 2$'

# --- SIGTERM: a clean exit
kill -TERM $pid
status=0
wait $pid || status=$?
trap - EXIT
[ "$status" = 0 ] || fail "strata serve exited with $status after SIGTERM"
grep -q 'strata serve: stopped' "$log" || fail "no 'stopped' line in the log"

if [ "$failures" -gt 0 ]; then
  echo "--- server log" >&2
  cat "$log" >&2
  exit 1
fi
echo "curl test: all checks passed"
