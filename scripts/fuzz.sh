#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp) with clang-14 into build-fuzz/ and runs each for a while.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 20 seconds each, every target)
#   scripts/fuzz.sh 10               # CI (scripts/test.sh): every target, 10 s each
#   scripts/fuzz.sh 600 output_parser_fuzz
# A target's seeds (fuzz/corpus/TARGET/) and dictionary (fuzz/TARGET.dict) are used when present; inputs it
# finds go to build-fuzz/corpus/TARGET/, and a crashing input to build-fuzz/artifacts/ (rerun it with
# build-fuzz/TARGET FILE). Exits non-zero on the first target that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
[ $# -gt 0 ] && shift
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, found '$seconds'" >&2; exit 2 ;; esac

packages=(clang-14 libclang-rt-14-dev cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=build-fuzz
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
ninja -C "$build"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for source in fuzz/*_fuzz.cpp; do
    [ -e "$source" ] || continue
    name=$(basename "$source" .cpp)
    targets+=("$name")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no targets (fuzz/*_fuzz.cpp)" >&2
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p "$build/artifacts"
for target in "${targets[@]}"; do
  if [ ! -x "$build/$target" ]; then
    echo "fuzz: unknown target '$target' (expected fuzz/$target.cpp)" >&2
    exit 2
  fi
  corpus="$build/corpus/$target"
  mkdir -p "$corpus"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$build/artifacts/$target-")
  [ -f "fuzz/$target.dict" ] && args+=(-dict="fuzz/$target.dict")
  dirs=("$corpus")  # libFuzzer writes new inputs to the first folder only; the seeds stay untouched
  [ -d "fuzz/corpus/$target" ] && dirs+=("fuzz/corpus/$target")
  echo "fuzz: $target for ${seconds}s"
  if ! "$build/$target" "${args[@]}" "${dirs[@]}" 2>"$build/$target.log"; then
    tail -n 60 "$build/$target.log" >&2
    echo "fuzz: $target FAILED; crashing input in $build/artifacts/ (full log: $build/$target.log)" >&2
    exit 1
  fi
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)" "$build/$target.log" || true
done
echo "fuzz: all targets passed"
