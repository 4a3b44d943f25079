#!/usr/bin/env bash
# test.sh: sets up (with the test oracles), builds, and runs every test with ctest; then the C++
# unit tests (ctest label `unit`) once more with the AVX-512 kernels switched off (NORMLAB_ISA=avx2),
# so the AVX2 path that AVX2-only machines run stays tested on an AVX-512 machine (ops/isa.h).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
ctest --output-on-failure --timeout 1500 -j 1 "$@"
NORMLAB_ISA=avx2 ctest --output-on-failure --timeout 1500 -j 1 -L unit "$@"
