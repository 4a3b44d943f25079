#!/usr/bin/env bash
# smollm2.sh: normlab on a real 30-layer model, SmolLM2-135M-Instruct (GGUF), against the speed
# targets for a real model and against transformers (current torch and transformers from PyPI, in
# bench/.venv): load, a forward of 8 x 128 tokens, `analyze dynamics`, the token-local Jacobians of
# all 30 blocks, `analyze sinks` on 8 x 128 tokens, and 64 greedy tokens with the KV cache. Builds normlab and its Python module in
# build/ if needed, fetches the model once into the cache (scripts/fetch_model.sh), and prints a
# markdown table naming the CPU. Not part of the tests: timings belong to benchmarks. Run on a quiet
# machine.
#
# Usage: bench/smollm2.sh [--repeat N] [--no-peer]
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "smollm2.sh: $*" >&2; }
source bench/venv.sh
ensure_bench_venv
if ! "$PY" -c 'import transformers, gguf, accelerate' >/dev/null 2>&1; then
  log "installing transformers, gguf and accelerate from PyPI into $VENV"
  "$PY" -m pip install --quiet transformers gguf accelerate
fi
cmake --build build --target normlab normlab_python >&2
gguf=$(bash scripts/fetch_model.sh SmolLM2-135M-Instruct | tail -1)
OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python "$PY" bench/smollm2.py --normlab build/normlab --gguf "$gguf" "$@"
