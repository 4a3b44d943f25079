#!/usr/bin/env bash
# hyper.sh: what a training step of a hyper-connected block costs against Pre-LN's at the same width
# (docs/METHODS.md, "Hyper-connections"; the target: n = 4 at most 1.5x): `normlab train` of the small
# Llama-family byte GPT (RMSNorm, SwiGLU, RoPE) for each form (none, hc_static, hc, mhc, mhc_lite; 4
# streams; attn_res in blocks of 2 layers, 4 streams at 6 layers) at each width, one after another in one sitting, and the ratio of each step time to Pre-LN's
# of the same width. Prints a markdown table naming the CPU and the threads. Not part of the tests:
# timings belong to benchmarks. Run on a quiet machine (the ratios of one sitting are what compare).
#
# --repeats N measures every form N times in rotation (none, hc_static, ..., none, ...) and prints each
# one's median step time, its range and the ratio of the medians: one measurement a cell moves by about
# 10% between sittings on a shared machine.
#
# Usage: bench/hyper.sh [--threads N] [--steps N] [--widths "64 128 256"] [--layers N] [--repeats N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 steps=40 widths="64 128 256" layers=6 repeats=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --widths) widths=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) echo "hyper.sh: unknown option $1 (see the header)" >&2; exit 2 ;;
  esac
done
cmake --build build --target normlab >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qm1 avx512f /proc/cpuinfo && echo "AVX-512" || echo "AVX2")
echo "hyper.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $cpu ($isa), $threads thread(s), $layers layers, batch 16 x 128 tokens, $steps steps per run (the first 5 not timed)"
echo
echo "| width | form | s / step (median of $repeats) | range | x Pre-LN |"
echo "|---|---|---|---|---|"
# one run of `form` at width `d`: its step time (the wall clock between the 5th and the last train record)
step_time() {
  local d=$1 form=$2
  # attn_res: blocks of 4 sub-layers (2 layers), its streams from the depth (4 at 6 layers)
  local streams=(--set model.hyper_streams=4)
  [[ $form == attn_res ]] && streams=(--set model.attn_res_block=4)
  OMP_NUM_THREADS=$threads build/normlab train -q --force --set train.out_dir="$out/run" "${streams[@]}" \
    --set model.d_model="$d" --set model.n_heads=4 --set model.n_layers="$layers" --set model.seq_len=128 \
    --set model.norm=rmsnorm --set model.activation=swiglu --set model.bias=none --set model.positions=rope \
    --set model.hyper="$form" --set train.batch_size=16 \
    --set train.steps="$steps" --set train.eval_every=0 --set train.log_every=1 > /dev/null 2>&1
  python3 - "$out/run/metrics.jsonl" <<'PY'
import json, sys
t = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train"]
a, b = t[4], t[-1]
print((b["elapsed_s"] - a["elapsed_s"]) / (b["step"] - a["step"]))
PY
}
forms="none hc_static hc mhc mhc_lite attn_res"
for d in $widths; do
  declare -A times=()
  for rep in $(seq 1 "$repeats"); do  # in rotation: a drift of the machine reaches every form alike
    for form in $forms; do times[$form]+="$(step_time "$d" "$form") "; done
  done
  base=""
  for form in $forms; do
    # the median of the repeats, and the ratio of medians to Pre-LN's
    read -r med lo hi <<< "$(python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print(statistics.median(v), min(v), max(v))" ${times[$form]})"
    [[ -z "$base" ]] && base=$med
    printf '| %s | %s | %.4f | %.4f-%.4f | %.2f |\n' "$d" "$form" "$med" "$lo" "$hi" "$(python3 -c "print($med / $base)")"
  done
  unset times
done
