#!/usr/bin/env bash
# test.sh: sets up (with the test oracles), builds, and runs every test with ctest; then the whole
# suite once more with AVX-512 switched off everywhere in normlab's processes: normlab's own kernels
# and oneDNN by NORMLAB_ISA=avx2 (ops/isa.h, ops/gemm_backend.h), OpenBLAS by OPENBLAS_CORETYPE=Haswell
# (it picks its kernels when it loads), so what an AVX2-only machine runs stays tested on an AVX-512
# machine. (On an AVX2-only machine both passes run the AVX2 paths.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
ctest --output-on-failure --timeout 1500 -j 1 "$@"
NORMLAB_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --output-on-failure --timeout 1500 -j 1 "$@"
