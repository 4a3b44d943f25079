#!/usr/bin/env bash
# run.sh: the training-step benchmark, normlab against PyTorch, in one run.
#
#   1. bench/.venv (gitignored): a venv of the system python3 with torch and numpy from PyPI,
#      created and filled only when missing (torch is a large download; that is expected).
#   2. builds normlab in build/ (Release, Ninja): targets bench_step, sgemm_peak and fma_peak.
#   3. measures the machine's sgemm rate and FMA peaks (fma_peak.cpp), then for every precision (fp32 bf16), shape (a b c) and
#      placement (pre post, and llama: the Llama-family block on that shape: pre-RMSNorm, RoPE,
#      SwiGLU with d_ff 8d/3, H/4 key-value heads, no biases) runs build/bench/bench_step --precision P and bench/torch_step.py
#      --precision P (bf16: torch.autocast) --mode eager and --mode compile, each in its own process
#      (peak RSS is per process).
#   4. writes every JSON line to bench/results/latest.jsonl (stderr of the runs to latest.log) and
#      prints the markdown table of bench/table.py (also written to latest.md).
#
# Before each measurement bench/measure.py waits (up to QUIET_TIMEOUT s, default 900) until the
# machine is quiet (less than QUIET_BUSY cores, default 0.25, busy over 2 s): the machine has 2
# shared cores and a busy neighbour halves the numbers. Each result gets "other_cpu" (cores used by
# other processes during the run); a run with other_cpu >= QUIET_BUSY is repeated up to twice and
# the quietest kept. QUIET_TIMEOUT=0 skips the wait.
#
# --repeats N measures every row N times in rotation (normlab, eager, compile, normlab, ...) and the
# table shows each side's median and range: on a shared host whose speed drifts by minutes (the same
# binary's step doubled a minute apart on 2026-12-02) a ratio of two single measurements is not.
#
# --isa avx2 runs both sides on AVX2 and FMA only, on a CPU that has AVX-512 too (an AVX2-only
# machine, emulated): normlab with NORMLAB_ISA=avx2 and OpenBLAS's Haswell kernels
# (OPENBLAS_CORETYPE=Haswell, the sgemm peak too), PyTorch with ATEN_CPU_CAPABILITY=avx2 (its own
# kernels and torch.compile's generated code), MKL_ENABLE_INSTRUCTIONS=AVX2 and oneDNN capped at AVX2;
# the FMA peak is the 256-bit one. Every line records what ran ("kernels", "cpu_capability"). An
# emulation: the core's caches, clocks and memory are still the AVX-512 machine's.
#
# Usage: bench/run.sh [--iters N] [--repeats N] [--shapes "a b c"] [--placements "pre post llama"]
#                     [--modes "eager compile"] [--precisions "fp32 bf16"] [--isa native|avx2] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

ITERS=10
REPEATS=1
SHAPES="a b c"
PLACEMENTS="pre post llama"
MODES="eager compile"
PRECISIONS="fp32 bf16"
BUILD=1
ISA=native
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --placements) PLACEMENTS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$ISA" in
  native) ISA_ENV=() ; TORCH_ISA_ENV=() ;;
  avx2)
    grep -q avx512f /proc/cpuinfo || { echo "run.sh: --isa avx2 emulates an AVX2 machine on an AVX-512 one; this CPU has no AVX-512: run without it" >&2; exit 2; }
    ISA_ENV=(NORMLAB_ISA=avx2 OPENBLAS_CORETYPE=Haswell)
    # torch.compile's kernel cache does not key on ATEN_CPU_CAPABILITY: with the native run's cache the
    # AVX2 run's compiled step gave a non-finite loss at step 1-2 (PyTorch 2.15, 2026-12-02); its own cache
    # dir, it trains
    TORCH_ISA_ENV=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2
                   TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/normlab-bench-inductor-avx2") ;;
  *) echo "run.sh: --isa wants native or avx2, not '$ISA'" >&2; exit 2 ;;
esac
QUIET_TIMEOUT=${QUIET_TIMEOUT:-900}
QUIET_BUSY=${QUIET_BUSY:-0.25}

log() { echo "[run.sh] $*" >&2; }

# ---- 1. the PyTorch venv -------------------------------------------------------------------------
source bench/venv.sh
ensure_bench_venv
log "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# ---- 2. build ------------------------------------------------------------------------------------
if [ "$BUILD" = 1 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j2 --target bench_step sgemm_peak fma_peak
fi
# Snapshot the binaries: a concurrent rebuild of build/ must not swap them in the middle of a run.
BIN=$(mktemp -d /tmp/normlab-bench.XXXXXX)
trap 'rm -rf "$BIN"' EXIT
for exe in bench_step sgemm_peak fma_peak; do
  [ -x "build/bench/$exe" ] || { echo "run.sh: build/bench/$exe missing (build failed?)" >&2; exit 1; }
  cp "build/bench/$exe" "$BIN/"
done

# ---- 3. measure ----------------------------------------------------------------------------------
mkdir -p bench/results
OUT=bench/results/latest.jsonl
LOG=bench/results/latest.log
: >"$OUT"
: >"$LOG"

# run IMPL PRECISION SHAPE PLACEMENT CMD...: one measurement in its own process; appends its JSON
# line (or an error line) to $OUT and its stderr to $LOG.
run() {
  local impl=$1 precision=$2 shape=$3 placement=$4; shift 4
  log "$impl precision=$precision shape=$shape placement=$placement"
  echo "### $impl $precision $shape $placement: $*" >>"$LOG"
  local line rc=0
  line=$("${MEASURE[@]}" "$@" 2>>"$LOG" | grep '^{' | tail -1) || rc=$?
  if [ -n "$line" ] && [ "$rc" = 0 ]; then
    echo "$line" >>"$OUT"
    log "  $line"
  else
    local err
    err=$(grep -v '^\s*$' "$LOG" | tail -1 | tr -d '"\\' | cut -c1-200)
    echo "{\"impl\": \"$impl\", \"precision\": \"$precision\", \"shape\": \"$shape\", \"placement\": \"$placement\", \"error\": \"exit $rc: $err\"}" >>"$OUT"
    log "  FAILED (exit $rc), see $LOG"
  fi
}

# Every measurement goes through bench/measure.py: wait for a quiet machine, run, add "other_cpu"
# (cores other processes kept busy meanwhile), rerun up to twice when that was >= QUIET_BUSY.
MEASURE=(python3 bench/measure.py --max-other "$QUIET_BUSY" --quiet-timeout "$QUIET_TIMEOUT" --)
log "sgemm_peak"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$([ -n "$(git status --porcelain -- src CMakeLists.txt 2>/dev/null)" ] && echo true || echo false)
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//; s/"//g')
echo "{\"impl\": \"meta\", \"commit\": \"$COMMIT\", \"src_dirty\": $DIRTY, \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"nproc\": $(nproc), \"isa\": \"$ISA\", \"cpu\": \"$CPU\"}" >>"$OUT"
"${MEASURE[@]}" env "${ISA_ENV[@]}" "$BIN/sgemm_peak" | tee -a "$OUT" >&2
log "fma_peak"
"${MEASURE[@]}" "$BIN/fma_peak" | tee -a "$OUT" >&2

# The same thread-pool environment for both sides: the normlab CLI runs with OMP_WAIT_POLICY=PASSIVE
# (it re-executes itself to set it), bench_step must too. Without it, on a shared machine, its
# spinning OpenMP threads stall: shape c, A/B/A/B at load average 7.5 on 2026-11-24: PASSIVE 972 and
# 1,075 ms per step, libgomp's default 16,648 and 26,259 ms. (docs/BENCHMARK.md's earlier quiet-machine
# numbers were taken with the default.)
TORCH_ENV=(env OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 "${TORCH_ISA_ENV[@]}")
NORMLAB_ENV=(env OMP_WAIT_POLICY=PASSIVE "${ISA_ENV[@]}")
case "$REPEATS" in ''|*[!0-9]*|0) echo "run.sh: --repeats wants a positive integer, not '$REPEATS'" >&2; exit 2 ;; esac
for prec in $PRECISIONS; do
  for s in $SHAPES; do
    for p in $PLACEMENTS; do
      for _ in $(seq "$REPEATS"); do
        run normlab "$prec" "$s" "$p" "${NORMLAB_ENV[@]}" "$BIN/bench_step" --shape "$s" --placement "$p" \
          --precision "$prec" --iters "$ITERS"
        for m in $MODES; do
          run "torch-$m" "$prec" "$s" "$p" "${TORCH_ENV[@]}" "$PY" bench/torch_step.py \
            --shape "$s" --placement "$p" --mode "$m" --precision "$prec" --iters "$ITERS"
        done
      done
    done
  done
done

# ---- 4. table ------------------------------------------------------------------------------------
python3 bench/table.py "$OUT" | tee bench/results/latest.md
