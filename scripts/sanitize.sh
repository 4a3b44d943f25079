#!/usr/bin/env bash
# sanitize.sh: the ctest suite under AddressSanitizer + UndefinedBehaviorSanitizer (GCC; every
# report is fatal: -fno-sanitize-recover=all, and float-to-int overflow is checked too, which GCC's
# -fsanitize=undefined leaves out). Builds in ./build-asan (-O1 -g, assertions on) and runs ctest
# there, niced; any arguments go to ctest, e.g. `scripts/sanitize.sh -R 'test_|tokenizer|corpus'`
# for the C++ unit tests only, or `TARGETS=normlab scripts/sanitize.sh -LE unit -E _NOT_BUILT` for
# the command's tests without building the unit tests. How long it takes is in docs/TESTING.md
# ("Fuzzing and sanitizers").
# Every test's timeout is the Release one times SCALE (tests/CMakeLists.txt, NORMLAB_TEST_TIMEOUT_SCALE;
# ctest's default for tests without one is scripts/test.sh's 1500 s times SCALE).
# The Python module's tests run the sanitized module in Debian's python with GCC's ASan and UBSan
# runtimes preloaded (NORMLAB_SANITIZER_PRELOAD in tests/CMakeLists.txt; leak checks off there).
set -euo pipefail
cd "$(dirname "$0")/.."
scale=${SCALE:-4}
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DNORMLAB_BENCH=OFF -DNORMLAB_TEST_TIMEOUT_SCALE="$scale" -DNORMLAB_PYTHON="${NORMLAB_PYTHON:-$PWD/build/pyenv/bin/python}" \
  -DNORMLAB_PYTHON_TF447="${NORMLAB_PYTHON_TF447:-$PWD/build/pyenv-tf447/bin/python}" \
  -DNORMLAB_SANITIZER_PRELOAD="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)" >/dev/null
time nice -n 15 ninja -C build-asan -j "${JOBS:-1}" ${TARGETS:-}
# halt at the first report; LeakSanitizer on; the Python oracles load no sanitized code, only the
# normlab command they run is checked
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
# LeakSanitizer's suppressions: system libraries' own allocations, each with its reason in the file
export LSAN_OPTIONS=suppressions=$PWD/scripts/sanitize_lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_WAIT_POLICY=PASSIVE
cd build-asan
time nice -n 15 ctest --output-on-failure -j "${CTEST_JOBS:-1}" --timeout $((1500 * scale)) "$@"
