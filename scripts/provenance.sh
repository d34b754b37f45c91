#!/usr/bin/env bash
# What every results file records about the run that made it (issue 23): the device, the date and the commit, with
# "-dirty" appended when tracked files differed from that commit (uncommitted edits were part of the run).
# Usage: bash scripts/provenance.sh            three lines, "device: …", "date: …", "commit: …" (a results header)
#        bash scripts/provenance.sh --commit   the commit alone (for --commit of strata bench / bench serve)
#        bash scripts/provenance.sh --gpu      the first GPU's short name for result file names (h100, h200, …;
#                                              "gpu" when nvidia-smi names none), so a run on an H100 is not filed
#                                              as an H200's
# The GPU machine gets a copy of the tree without .git: there, set STRATA_COMMIT to what `bash scripts/provenance.sh
# --commit` printed where the copy was made. Without git and without STRATA_COMMIT the commit says so rather than
# guess. Untracked files do not count as dirty (result folders inside the tree would make every run dirty); a run
# that rewrites a tracked results file should write elsewhere first and copy, or it records itself as dirty.
set -euo pipefail
cd "$(dirname "$0")/.."

commit() {
  if [ -n "${STRATA_COMMIT:-}" ]; then
    echo "$STRATA_COMMIT"
  elif sha=$(git rev-parse HEAD 2>/dev/null); then
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo "$sha-dirty"; else echo "$sha"; fi
  else
    echo "unknown (no git here and no STRATA_COMMIT)"
  fi
}

device() {
  # GPU names and the CPU model; never the host name.
  local gpus="" cpu
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, - | sed 's/,/, /g' || true)
  fi
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
  echo "${gpus:+$gpus; }${cpu:-unknown CPU} ($(nproc) threads)"
}

gpu_short_name() {
  local name=""
  command -v nvidia-smi >/dev/null 2>&1 && name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  name=$(echo "$name" | tr '[:upper:]' '[:lower:]' | grep -oE '\b[a-z][0-9]{2,4}[a-z]?\b' | head -1 || true)
  echo "${name:-gpu}"
}

case "${1:-}" in
  --commit) commit ;;
  --gpu) gpu_short_name ;;
  "") echo "device: $(device)"; echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "commit: $(commit)" ;;
  *) echo "usage: scripts/provenance.sh [--commit | --gpu]" >&2; exit 2 ;;
esac
