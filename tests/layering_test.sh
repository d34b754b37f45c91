#!/usr/bin/env bash
# The layers' include rules (docs/architecture.md): nothing in model/ or backend/ includes engine/ (the seam is
# plain data going down); engine/, server/, router/, cli/ and bench/ know a model only through the family's interface
# (model/model.h, model/model_family.h), never a variant's folder (model/deepseek_v4/); and the family's own
# headers in model/ name no variant either (model_family.cpp is the one file that picks one).
# Usage: layering_test.sh SRC_ROOT, or layering_test.sh --self-test (a tree that breaks each rule must fail).
set -euo pipefail

check() {
  local src=$1 bad=0 hits
  hits=$(grep -rnE '#include "engine/' "$src/model" "$src/backend" 2>/dev/null || true)
  [ -n "$hits" ] && { echo "model/ or backend/ includes engine/:"; echo "$hits"; bad=1; }
  hits=$(grep -rnE '#include "model/deepseek_v4/' "$src/engine" "$src/server" "$src/router" "$src/cli" "$src/bench" 2>/dev/null || true)
  [ -n "$hits" ] && { echo "engine/, server/, router/, cli/ or bench/ include a model variant's folder:"; echo "$hits"; bad=1; }
  hits=$(grep -nE '#include "model/deepseek_v4/' "$src"/model/*.h 2>/dev/null || true)
  [ -n "$hits" ] && { echo "a family header in model/ includes a variant's folder:"; echo "$hits"; bad=1; }
  return $bad
}

if [ "${1:-}" = "--self-test" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for rule in 'backend/x.cpp:#include "engine/engine.h"' 'cli/x.cpp:#include "model/deepseek_v4/model.h"' \
              'model/x.h:#include "model/deepseek_v4/forward.h"'; do
    rm -rf "${tmp:?}"/*
    mkdir -p "$tmp"/{model,backend,engine,server,cli,bench}
    printf '%s\n' "${rule#*:}" > "$tmp/${rule%%:*}"
    if check "$tmp" > /dev/null; then echo "self-test: a tree with ${rule%%:*} including ${rule#*:} passed"; exit 1; fi
  done
  echo "layering self-test: every broken rule is caught"
  exit 0
fi
check "${1:?usage: layering_test.sh SRC_ROOT | --self-test}"
echo "layering: the include rules hold"
