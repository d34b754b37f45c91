#!/usr/bin/env bash
# Runs every example that `strata <command> --help` shows, as written, from the repository root with the strata
# under test first on PATH: the examples must work for whoever copies them (issue 19). Each help's examples run in
# order, as a user would paste them. The only changes: ports 8000-8002 become free ports (CI runs tests side by side),
# and a line ending in "&" (a server) is followed by a wait until the server answers /health, then killed after
# its help's last example. Skipped, and reported as such: examples for --device cuda on a build or machine without
# a GPU.
# Usage: help_examples.sh STRATA_BINARY REPOSITORY_ROOT
set -uo pipefail
binary=$1 root=$2
bin_dir=$(mktemp -d)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$bin_dir"
}
trap cleanup EXIT
ln -s "$binary" "$bin_dir/strata"
export PATH="$bin_dir:$PATH" OMP_WAIT_POLICY=PASSIVE
cd "$root" || exit 2
[ -f .deps/tokenizer-deepseek_v3/tokenizer.json ] || { echo "SKIP: no .deps/tokenizer-deepseek_v3 (scripts/setup.sh)"; exit 77; }
[ -f models/demo/config.json ] || { echo "SKIP: no models/demo/ (the examples use the demo model)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/setup.sh installs it)"; exit 77; }

gpu=yes
strata generate --device cuda --prompt-ids 1 --max-tokens 1 >/dev/null 2>&1 || gpu=no
# Ports nothing listens on (a connection to them is refused): 8000 becomes $port, and 8001, 8002 (the replicas of
# the route example) the two after it.
port=$((20000 + RANDOM % 20000))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || (exec 3<>"/dev/tcp/127.0.0.1/$((port + 1))") 2>/dev/null ||
      (exec 3<>"/dev/tcp/127.0.0.1/$((port + 2))") 2>/dev/null; do port=$((port + 3)); done

# The example lines of one help text: from "example:" / "examples ...:" to the end, continuation lines joined.
examples() {
  awk '/^examples?( \(.*\))?:$/ { on = 1; next } on && !NF { on = 0 } on { print }' | sed 's/^  //' |
    awk '{ if (sub(/\\$/, "")) { held = held $0; next } print held $0; held = "" }'
}

failed=0 ran=0 skipped=0
for help in "generate" "generate --input x" "model" "tokenize" "chat-template" "serve" "bench" "bench serve" "route"; do
  # shellcheck disable=SC2086
  text=$(strata $help --help) || { echo "FAIL: strata $help --help"; failed=$((failed + 1)); continue; }
  while IFS= read -r line; do
    command=${line//8000/$port}
    command=${command//8001/$((port + 1))}
    command=${command//8002/$((port + 2))}
    if [[ $gpu == no && $command == *"--device cuda"* ]]; then
      echo "skip (no GPU): $line"; skipped=$((skipped + 1)); continue
    fi
    echo "run ($help): $line"
    ran=$((ran + 1))
    if [[ $command =~ \&[[:space:]]*(#.*)?$ ]]; then
      bash -c "exec ${command%%&*}" >"$bin_dir/server.log" 2>&1 &
      servers+=($!)
      up=no
      listen=$port  # the server's own --port when the line names one
      [[ $command =~ --port[[:space:]]+([0-9]+) ]] && listen=${BASH_REMATCH[1]}
      for _ in $(seq 600); do
        if curl -sf "http://127.0.0.1:$listen/health" >/dev/null 2>&1; then up=yes; break; fi
        kill -0 "${servers[-1]}" 2>/dev/null || break
        sleep 0.1
      done
      [ $up == yes ] || { echo "FAIL: the server did not come up"; cat "$bin_dir/server.log"; failed=$((failed + 1)); }
      continue
    fi
    if ! out=$(timeout 300 bash -c "$command" 2>&1 </dev/null); then
      echo "FAIL: $line"; echo "$out" | tail -20; failed=$((failed + 1))
    fi
  done < <(examples <<<"$text")
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  servers=()
done
echo "help examples: $ran run, $skipped skipped, $failed failed"
[ $failed -eq 0 ] && [ $ran -gt 0 ]
