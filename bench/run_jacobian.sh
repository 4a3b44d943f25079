#!/usr/bin/env bash
# run_jacobian.sh: the Jacobian instruments' speed benchmark, normlab against PyTorch and JAX.
#
# One pre-LN GPT block (d_model 128, T 32, 4 heads, d_ff 512, B 1, LayerNorm eps 1e-5, GELU tanh,
# causal), float64: the 4096 x 4096 Jacobian of its output (T, d) with respect to its input stream
# (T, d). Three measurements, each side in its own process per measurement:
#   build      the full Jacobian             normlab: jvp_sublayers on the 4096 identity tangents
#                                            torch: torch.func.jacfwd and jacrev (the faster counts)
#                                            jax: jax.jit(jax.jacfwd(f))
#   build_svd  the Jacobian + all its singular values (normlab dgesdd; torch.linalg.svdvals with the
#              faster of jacfwd/jacrev; jnp.linalg.svd(compute_uv=False) under the same jit)
#   extremes   the 5 largest and 5 smallest singular values: normlab matrix-free (Lanczos on J^T J
#              for the largest, shift-invert by block substitution for the smallest;
#              analysis/lanczos.h); the peers' time is their full path, build_svd
#
#   1. bench/.venv: torch and numpy as bench/run.sh makes them; jax and jaxlib from PyPI if missing.
#   2. builds build/bench/bench_jacobian and build/normlab (Release, Ninja) and snapshots them.
#   3. in a temp dir: `normlab init` makes the 1-layer checkpoint both sides load (float32
#      parameters, widened to float64 on both sides); bench_jacobian dumps its J (untimed) so the
#      peers' build runs report their max |J_peer - J_normlab|.
#   4. every measurement through bench/measure.py (waits for a quiet machine, records other_cpu,
#      repeats a noisy run up to twice); JSON lines to bench/results/jacobian.jsonl, stderr to
#      jacobian.log; the markdown table of bench/jacobian_table.py to stdout and jacobian.md.
#
# Usage: bench/run_jacobian.sh [--iters N (3)] [--warmup N (1)] [--no-build] [--no-jax]
# Environment: QUIET_TIMEOUT (900 s), QUIET_BUSY (0.25 cores), QUIET_RETRIES (2) as bench/run.sh /
# bench/measure.py. A full quiet run takes about 15 minutes (the SVDs and the Lanczos runs dominate).
set -euo pipefail
cd "$(dirname "$0")/.."

ITERS=3
WARMUP=1
BUILD=1
JAX=1
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --no-jax) JAX=0; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "run_jacobian.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
QUIET_TIMEOUT=${QUIET_TIMEOUT:-900}
QUIET_BUSY=${QUIET_BUSY:-0.25}
QUIET_RETRIES=${QUIET_RETRIES:-2}

log() { echo "[run_jacobian.sh] $*" >&2; }

# ---- 1. the peers' venv --------------------------------------------------------------------------
source bench/venv.sh
ensure_bench_venv
if [ "$JAX" = 1 ] && ! "$PY" -c 'import jax, jaxlib' >/dev/null 2>&1; then
  log "installing jax and jaxlib (CPU) from PyPI into $VENV"
  if ! "$PY" -m pip install --quiet jax jaxlib; then
    log "WARNING: jax could not be installed; continuing with torch only"
    JAX=0
  fi
fi
log "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
    "$([ "$JAX" = 1 ] && echo "jax $("$PY" -c 'import jax; print(jax.__version__)' 2>/dev/null)")"

# ---- 2. build ------------------------------------------------------------------------------------
if [ "$BUILD" = 1 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j2 --target bench_jacobian normlab
fi
# Snapshot the binaries (a concurrent rebuild must not swap them mid-run) and keep the checkpoint
# and the dumped Jacobian (128 MB) next to them.
WORK=$(mktemp -d /tmp/normlab-jacobian.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for exe in build/bench/bench_jacobian build/normlab; do
  [ -x "$exe" ] || { echo "run_jacobian.sh: $exe missing (build failed?)" >&2; exit 1; }
  cp "$exe" "$WORK/"
done
CKPT=$WORK/block.safetensors
JDUMP=$WORK/J.f64
"$WORK/normlab" init --set model.d_model=128 --set model.n_heads=4 --set model.n_layers=1 \
  --set model.seq_len=32 --set model.placement=pre --set model.eps=1e-5 --out "$CKPT" >&2
"$WORK/bench_jacobian" --checkpoint "$CKPT" --measure none --dump-jacobian "$JDUMP"

# ---- 3. measure ----------------------------------------------------------------------------------
mkdir -p bench/results
OUT=bench/results/jacobian.jsonl
LOG=bench/results/jacobian.log
: >"$OUT"
: >"$LOG"
MEASURE=(python3 bench/measure.py --max-other "$QUIET_BUSY" --retries "$QUIET_RETRIES" --quiet-timeout "$QUIET_TIMEOUT" --)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$([ -n "$(git status --porcelain -- src CMakeLists.txt 2>/dev/null)" ] && echo true || echo false)
echo "{\"impl\": \"meta\", \"commit\": \"$COMMIT\", \"src_dirty\": $DIRTY, \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"nproc\": $(nproc), \"iters\": $ITERS, \"warmup\": $WARMUP}" >>"$OUT"

# run IMPL MODE MEASUREMENT CMD...: one measurement in its own process; appends its JSON line (or an
# error line) to $OUT and its stderr to $LOG.
run() {
  local impl=$1 mode=$2 what=$3; shift 3
  log "$impl $mode $what"
  echo "### $impl $mode $what: $*" >>"$LOG"
  local line rc=0
  line=$("${MEASURE[@]}" "$@" 2>>"$LOG" | grep '^{' | tail -1) || rc=$?
  if [ -n "$line" ] && [ "$rc" = 0 ]; then
    echo "$line" >>"$OUT"
    log "  $(echo "$line" | cut -c1-300)"
  else
    local err
    err=$(grep -v '^\s*$' "$LOG" | tail -1 | tr -d '"\\' | cut -c1-200)
    echo "{\"impl\": \"$impl\", \"mode\": \"$mode\", \"measurement\": \"$what\", \"error\": \"exit $rc: $err\"}" >>"$OUT"
    log "  FAILED (exit $rc), see $LOG"
  fi
}

NL=("$WORK/bench_jacobian" --checkpoint "$CKPT" --iters "$ITERS" --warmup "$WARMUP")
PEER=("$PY" bench/jacobian_peers.py --checkpoint "$CKPT" --iters "$ITERS" --warmup "$WARMUP" --threads 2)
TORCH_ENV=(env OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4)

for what in build build_svd extremes; do
  run normlab - "$what" "${NL[@]}" --measure "$what"
done

run torch jacfwd build "${TORCH_ENV[@]}" "${PEER[@]}" --impl torch --measurement build --mode jacfwd \
  --compare-jacobian "$JDUMP"
run torch jacrev build "${TORCH_ENV[@]}" "${PEER[@]}" --impl torch --measurement build --mode jacrev \
  --compare-jacobian "$JDUMP"
# build_svd with the faster of the two
BEST=$(python3 - "$OUT" <<'EOF'
import json, sys
ms = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("impl") == "torch" and r.get("measurement") == "build" and "ms" in r:
        ms[r["mode"]] = r["ms"]
print(min(ms, key=ms.get) if ms else "jacfwd")
EOF
)
run torch "$BEST" build_svd "${TORCH_ENV[@]}" "${PEER[@]}" --impl torch --measurement build_svd --mode "$BEST"

if [ "$JAX" = 1 ]; then
  run jax jacfwd build "${PEER[@]}" --impl jax --measurement build --mode jacfwd --compare-jacobian "$JDUMP"
  run jax jacfwd build_svd "${PEER[@]}" --impl jax --measurement build_svd --mode jacfwd
fi

# ---- 4. table ------------------------------------------------------------------------------------
python3 bench/jacobian_table.py "$OUT" | tee bench/results/jacobian.md
