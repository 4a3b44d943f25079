#!/usr/bin/env bash
# test.sh: sets up (with the test oracles), builds, and runs every test with ctest. On a CPU with
# AVX-512 it then runs the tests labelled `kernels` (those that reach the ISA-dispatched kernels:
# tests/CMakeLists.txt) once more with AVX-512 switched off everywhere in normlab's processes:
# normlab's own kernels and oneDNN by NORMLAB_ISA=avx2 (ops/isa.h, ops/gemm_backend.h), OpenBLAS by
# OPENBLAS_CORETYPE=Haswell (it picks its kernels when it loads), so what an AVX2-only machine runs
# stays tested on an AVX-512 machine. On an AVX2-only CPU the first pass already ran the AVX2 paths,
# so the second would repeat it exactly; it is skipped and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
ctest --output-on-failure --timeout 1500 -j 1 "$@"
# normlab's own detection decides (the line "kernels: avx512 (...)" of --version), not a second rule here
if NORMLAB_ISA= ./normlab --version | grep -q '^kernels: avx512'; then
  NORMLAB_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --output-on-failure --timeout 1500 -j 1 -L kernels "$@"
else
  echo "test.sh: this CPU has no AVX-512, so the first pass ran the AVX2 kernels; no second pass"
fi
