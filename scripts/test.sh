#!/usr/bin/env bash
# test.sh: sets up (with the test oracles), builds, and runs every test with ctest. On a CPU with
# AVX-512 it then runs the tests labelled `kernels` (those that reach the ISA-dispatched kernels:
# tests/CMakeLists.txt) once more with AVX-512 switched off everywhere in normlab's processes:
# normlab's own kernels and oneDNN by NORMLAB_ISA=avx2 (ops/isa.h, ops/gemm_backend.h), OpenBLAS by
# OPENBLAS_CORETYPE=Haswell (it picks its kernels when it loads), so what an AVX2-only machine runs
# stays tested on an AVX-512 machine. On an AVX2-only CPU the first pass already ran the AVX2 paths,
# so the second would repeat it exactly; it is skipped and the script says so.
#
# ctest runs two tests at once (-j 2, the machine's 2 cores: most tests are one thread, Python or a
# browser, and the longest ones are split so that two overlap); OMP_WAIT_POLICY=PASSIVE makes an
# OpenMP thread that waits yield its core instead of spinning on it, so two tests that both use two
# threads share the cores instead of stalling each other. The pretrained models the tests read are
# fetched into the cache by the setup (once; scripts/fetch_model.sh), not by two tests racing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
export OMP_WAIT_POLICY=PASSIVE
jobs=${NORMLAB_TEST_JOBS:-2}
ctest --output-on-failure --timeout 1500 -j "$jobs" "$@"
# normlab's own detection decides (the line "kernels: avx512 (...)" of --version), not a second rule here
if NORMLAB_ISA= ./normlab --version | grep -q '^kernels: avx512'; then
  NORMLAB_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --output-on-failure --timeout 1500 -j "$jobs" -L kernels "$@"
else
  echo "test.sh: this CPU has no AVX-512, so the first pass ran the AVX2 kernels; no second pass"
fi
