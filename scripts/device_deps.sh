#!/usr/bin/env bash
# Fills the ignored .deps/ with what a build on the GPU machine needs and that machine cannot download (it has no
# network): nlohmann-json's headers (.deps/include), PCRE2's and xxHash's headers and static libraries (.deps/pcre2,
# .deps/xxhash), and the Debian package of Boost's headers as a .deb (.deps/debs; ~10 MB, where the unpacked headers
# would exceed the device tool's 64 MiB carry limit). tests/gpu/run.sh unpacks the .deb there, so `strata serve` and
# `strata bench serve` are built on the device too. Run here (Debian 12, network), then carry .deps/include,
# .deps/pcre2, .deps/xxhash and .deps/debs. Usage: bash scripts/device_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/include .deps/pcre2 .deps/xxhash .deps/debs
if [ ! -d .deps/include/nlohmann ]; then
  [ -d /usr/include/nlohmann ] || { echo "device_deps: install nlohmann-json3-dev first (scripts/setup.sh)" >&2; exit 1; }
  cp -r /usr/include/nlohmann .deps/include/
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libpcre2-dev libpcre2-8-0 libxxhash-dev libboost1.81-dev >/dev/null 2>&1) ||
  { echo "device_deps: apt-get download failed (no network, or another Debian release?)" >&2; exit 1; }
if [ ! -f .deps/pcre2/usr/include/pcre2.h ]; then
  dpkg -x "$work"/libpcre2-dev_*.deb .deps/pcre2
  dpkg -x "$work"/libpcre2-8-0_*.deb .deps/pcre2
fi
[ -f .deps/xxhash/usr/include/xxhash.h ] || dpkg -x "$work"/libxxhash-dev_*.deb .deps/xxhash
rm -f .deps/debs/libboost*.deb
cp "$work"/libboost1.81-dev_*.deb .deps/debs/
du -sh .deps/include .deps/pcre2 .deps/xxhash .deps/debs
