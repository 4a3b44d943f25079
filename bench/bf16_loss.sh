#!/usr/bin/env bash
# bf16_loss.sh: the accuracy side of mixed precision (bf16): the built-in default model (4-layer
# Pre-LN GPT over the King James Bible bytes) trained for STEPS steps (default 2,000) once in fp32
# and once with train.precision = "bf16", same seed and data order, the two runs side by side (one
# thread each, niced, so they also fit on a busy 2-core machine); then bench/loss_curves.py prints
# the validation-loss curves next to each other and checks the final difference against the target
# (0.02 nats). Not a timing.
#
# Usage: bench/bf16_loss.sh [--steps N] [--out DIR] [--no-build]     (results in DIR, default
#        bench/results/bf16_loss: fp32/ and bf16/ run directories, curves.md)
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=2000
OUT=bench/results/bf16_loss
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "bf16_loss.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "bf16_loss.sh: --steps must be a positive integer, got '$STEPS'" >&2; exit 2; }

if [ "$BUILD" = 1 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j2 --target normlab
fi
[ -x build/normlab ] || { echo "bf16_loss.sh: build/normlab missing (build failed?)" >&2; exit 1; }
BIN=$(mktemp -d /tmp/normlab-bf16loss.XXXXXX)   # a concurrent rebuild must not swap the binary
trap 'rm -rf "$BIN"' EXIT
cp build/normlab "$BIN/"

mkdir -p "$OUT"
pids=()
for prec in fp32 bf16; do
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 10 "$BIN/normlab" train --force \
    --set train.steps="$STEPS" --set train.precision="$prec" --set train.out_dir="$OUT/$prec" \
    --set train.checkpoint_every=0 >"$OUT/$prec.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
[ "$rc" = 0 ] || { echo "bf16_loss.sh: a run failed (exit $rc), see $OUT/fp32.log and $OUT/bf16.log" >&2; exit 1; }
python3 bench/loss_curves.py "$OUT/fp32/metrics.jsonl" "$OUT/bf16/metrics.jsonl" | tee "$OUT/curves.md"
