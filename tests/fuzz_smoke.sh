#!/usr/bin/env bash
# fuzz_smoke.sh: a short libFuzzer run of every parser harness (fuzz/fuzz_*.cpp) under AddressSanitizer
# and UndefinedBehaviorSanitizer: the committed seeds (fuzz/corpus/<name>/, the regression inputs
# among them) and then FUZZ_SECONDS (default 6) of mutations each. Fails on any crash, sanitizer
# report, leak, exception other than normlab::Error, input slower than 10 s, a single allocation
# above 128 MB (no input of a few kB justifies one) or a process above 1.5 GB.
# Configures and builds the clang build in BUILD_DIR first (only the parsing sources: fuzz/CMakeLists.txt).
# Exit 77 (ctest: skipped) when clang or libFuzzer's runtime is not installed (scripts/setup.sh --tests
# installs both). A failing input is kept in BUILD_DIR/artifacts/ and its command printed.
# Usage: fuzz_smoke.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$(realpath "$1")
build=$2
seconds=${FUZZ_SECONDS:-6}
export OMP_WAIT_POLICY=PASSIVE

if ! command -v clang++ >/dev/null || ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "SKIP: clang++ and libFuzzer (Debian: clang, libclang-rt-14-dev; scripts/setup.sh --tests) are not installed"
  exit 77
fi
start=$(date +%s)
if [[ ! -f "$build/build.ninja" ]]; then
  CXX=clang++ cmake -S "$src/fuzz" -B "$build" -G Ninja >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; echo "FAIL: configuring the fuzz build"; exit 1; }
fi
nice -n 10 ninja -C "$build" -j "${FUZZ_JOBS:-1}" >/dev/null || { echo "FAIL: building the fuzz harnesses"; exit 1; }
built=$(date +%s)
echo "fuzz build: $((built - start)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"
names=$(sed -n 's/^set(NORMLAB_FUZZERS \(.*\))$/\1/p' "$src/fuzz/CMakeLists.txt")
[[ -n "$names" ]] || { echo "FAIL: no NORMLAB_FUZZERS list in fuzz/CMakeLists.txt"; exit 1; }
fail=0
for name in $names; do
  [[ -d "$src/fuzz/corpus/$name" ]] || { echo "FAIL: $name has no seed corpus fuzz/corpus/$name"; fail=1; continue; }
  mkdir -p "$work/$name"  # new inputs go here; the committed seeds are only read
  opts=(-max_total_time="$seconds" -timeout=10 -malloc_limit_mb=128 -rss_limit_mb=1536 -max_len=8192
        -seed=1 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-")
  TMPDIR=$work ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz_$name" "${opts[@]}" "$work/$name" "$src/fuzz/corpus/$name" >"$work/$name.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log")
  if [[ $rc -ne 0 ]]; then
    fail=1
    echo "FAIL: fuzz_$name (exit $rc):"
    grep -E -A30 "ERROR|runtime error|terminate called|what\(\)" "$work/$name.log" | head -60
    echo "reproduce: $build/fuzz_$name $(ls -t "$build/artifacts/$name-"* 2>/dev/null | head -1)"
  else
    echo "ok: fuzz_$name: ${runs:-?} inputs in ${seconds} s, seeds $(ls "$src/fuzz/corpus/$name" | wc -l)"
  fi
done
echo "fuzz smoke: build $((built - start)) s, fuzzing $(( $(date +%s) - built )) s"
exit $fail
