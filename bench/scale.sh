#!/usr/bin/env bash
# scale.sh: normlab's instruments at the size of the models people publish, on this machine: a
# randomly initialized Llama-family model of the shape of Qwen3-0.6B, Llama 3.2 1B and SmolLM2-1.7B
# (random weights are enough for time and memory), each through
#   init      `normlab init` writing the float32 checkpoint (not a target: the setup of the rest)
#   forward   the Python module's load and a forward of 8 x 128 tokens (`normlab.load`, `Model.forward`;
#             the load's time and the forward's, the median of 3 after one, in the last column)
#   peer      transformers' forward of the same shape (bench/hf_forward.py in bench/.venv: Qwen3 or
#             Llama, random weights, float32, the median of 3 after one, 2 threads) beside it
#   dynamics  `normlab analyze dynamics --checkpoint M --seq-len 128 --batches 1 --batch-size 8`
#   attention `normlab analyze attention --checkpoint M --seq-len 128`
#   jacobian  `normlab analyze jacobian --checkpoint M --no-full --lanczos-k 0 --seq-len 64` (every norm
#             site and the token-local Jacobian extremes of every block at T = 64)
#   sinks     `normlab analyze sinks --checkpoint M --seq-len 128 --batches 1 --batch-size 8`
#   theory    `normlab theory --checkpoint M --seeds 2`
# with the wall time and the peak resident memory of each (GNU time), against the targets of a 24 GB,
# 2-core machine (docs/BENCHMARK.md, "Scale": a 1.7B model loads in < 30 s, a forward of 8 x 128
# takes < 60 s, dynamics and theory --checkpoint < 10 min each, peak RSS < 16 GB; a 1B model in half).
# A command that fails (out of memory, a refusal) is a row with its exit code and the last line it
# printed: what does not work at a size is reported, not hidden. Prints a markdown table naming the
# CPU. Not part of the tests; run on a quiet machine (hours at 1.7B). bench/.venv (bench/venv.sh: torch,
# and transformers here) is made or filled when missing; --no-peer skips transformers' rows. The real
# SmolLM2-135M against transformers is bench/smollm2.sh's.
#
# Usage: bench/scale.sh [--shapes "qwen3-0.6b llama3.2-1b smollm2-1.7b"] [--keep DIR] [--no-peer]
#        bench/scale.sh --shapes tiny   (a 2-layer model: checks the script in seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
shapes="qwen3-0.6b llama3.2-1b smollm2-1.7b" keep="" peer=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --no-peer) peer=0; shift ;;
    *) echo "scale.sh: unknown option $1 (see the header)" >&2; exit 2 ;;
  esac
done
[[ -x /usr/bin/time ]] || { echo "scale.sh: needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 2; }
cmake --build build --target normlab normlab_python >&2
PY=${PY:-build/pyenv/bin/python}
[[ -x $PY ]] || PY=python3
NL_PY=$PY
if [[ $peer == 1 ]]; then
  log() { echo "scale.sh: $*" >&2; }
  source bench/venv.sh
  ensure_bench_venv  # sets PY to the venv's
  if ! "$PY" -c 'import transformers' >/dev/null 2>&1; then
    log "installing transformers from PyPI into $VENV"
    "$PY" -m pip install --quiet transformers
  fi
  PEER_PY=$PY
  PY=$NL_PY
fi
out=${keep:-$(mktemp -d)}
mkdir -p "$out"
[[ -z $keep ]] && trap 'rm -rf "$out"' EXIT

# the shapes (model keys over configs/llama.toml: RMSNorm, SwiGLU, RoPE, no biases, Pre-LN); the
# instruments read the built-in corpus through the GPT-2 tokenizer, whose ids must fit the vocabulary:
# SmolLM2's 49,152 is raised to 50,304 (GPT-2's padded; 2.4 M parameters more, 0.14%).
# seq_len is what an import of the real model gives (the longest sequence within normlab's activation
# limit, ModelConfig::longest_sequence_within_limit; the instruments read 64 or 128 tokens)
shape_sets() {
  case "$1" in
    qwen3-0.6b) echo "d_model=1024 n_layers=28 n_heads=16 n_kv_heads=8 head_dim=128 d_ff=3072 vocab=151936 qk_norm=heads rope_base=1000000 eps=1e-6 seq_len=3801" ;;
    llama3.2-1b) echo "d_model=2048 n_layers=16 n_heads=32 n_kv_heads=8 d_ff=8192 vocab=128256 rope_base=500000 seq_len=3473" ;;
    smollm2-1.7b) echo "d_model=2048 n_layers=24 n_heads=32 n_kv_heads=32 d_ff=8192 vocab=50304 rope_base=130000 seq_len=2755" ;;
    tiny) echo "d_model=64 n_layers=2 n_heads=4 n_kv_heads=2 d_ff=176 vocab=50304 seq_len=256" ;;
    *) echo "scale.sh: unknown shape '$1' (qwen3-0.6b, llama3.2-1b, smollm2-1.7b, tiny)" >&2; exit 2 ;;
  esac
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qm1 avx512f /proc/cpuinfo && echo "AVX-512" || echo "AVX2")
echo "scale.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $cpu ($isa), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo)"
echo
echo "| model | step | wall s | peak RSS GB | timing, or why it failed |"
echo "|---|---|---|---|---|"
# one row: the command's wall time and peak RSS, or its exit code and last line
row() {
  local name=$1 step=$2
  shift 2
  if /usr/bin/time -f '%e %M' -o "$out/time.txt" "$@" > "$out/log.txt" 2>&1; then
    read -r wall kb < "$out/time.txt"
    printf '| %s | %s | %.1f | %.2f | %s |\n' "$name" "$step" "$wall" "$(echo "$kb / 1048576" | bc -l)" \
      "$(grep '^timing: ' "$out/log.txt" | tail -1 | sed 's/^timing: //')"
  else
    local rc=$?
    printf '| %s | %s | - | - | failed (exit %s): %s |\n' "$name" "$step" "$rc" "$(grep -v '^Command' "$out/log.txt" | tail -1 | cut -c1-160)"
  fi
}
for shape in $shapes; do
  sets=()
  for kv in $(shape_sets "$shape"); do sets+=(--set "model.$kv"); done
  m="$out/$shape.safetensors"
  row "$shape" init build/normlab init -c configs/llama.toml "${sets[@]}" --set model.seed=1 --out "$m" --force
  [[ -s $m ]] || continue
  row "$shape" "load + forward 8 x 128" env PYTHONPATH=build/python "$PY" -c "
import numpy as np, normlab, statistics, sys, time
t0 = time.perf_counter()
m = normlab.load(sys.argv[1])
load = time.perf_counter() - t0
ids = np.random.default_rng(0).integers(0, m.config['vocab'], size=(8, 128)).astype(np.int32)
times = []
for rep in range(4):
    t0 = time.perf_counter()
    m.forward(ids)
    if rep:
        times.append(time.perf_counter() - t0)
print(f'timing: load {load:.1f} s, forward {statistics.median(times):.2f} s')" "$m"
  [[ $peer == 1 ]] && row "$shape" "transformers: init + forward 8 x 128" env OMP_WAIT_POLICY=PASSIVE \
    "$PEER_PY" bench/hf_forward.py $(shape_sets "$shape")
  row "$shape" dynamics build/normlab analyze dynamics --checkpoint "$m" --tokenizer gpt2 --seq-len 128 --batches 1 --batch-size 8
  row "$shape" attention build/normlab analyze attention --checkpoint "$m" --tokenizer gpt2 --seq-len 128
  row "$shape" "jacobian T = 64" build/normlab analyze jacobian --checkpoint "$m" --tokenizer gpt2 --no-full --lanczos-k 0 --seq-len 64
  row "$shape" sinks build/normlab analyze sinks --checkpoint "$m" --tokenizer gpt2 --seq-len 128 --batches 1 --batch-size 8
  row "$shape" "theory --checkpoint" build/normlab theory --checkpoint "$m" --tokenizer gpt2 --seeds 2
  [[ -z $keep ]] && rm -f "$m"
done
