#!/usr/bin/env bash
# isa_baseline.sh: the AVX2 baseline holds in the binary itself. Outside the functions compiled for
# AVX-512 (ops/isa.h: names ending in _avx512, and the OpenMP parts outlined from them) no
# instruction may be EVEX-encoded (every AVX-512 instruction is: first opcode byte 0x62 after any
# legacy prefixes), so a CPU without AVX-512 never meets one whatever NORMLAB_ISA says. Forcing the
# AVX2 path on an AVX-512 machine cannot show this; disassembling can. Also checks that the AVX-512
# variants are there (the dispatch has something to choose).
# Last, OpenBLAS runs the kernels of the same ISA (see the end).
# Usage: isa_baseline.sh path/to/binary
set -euo pipefail
bin=$1
objdump -d -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; next }
  # instruction lines: "  addr:\tbyte byte ...\tmnemonic"; the bytes field is the second tab field
  /^ *[0-9a-f]+:\t/ {
    if (split($0, f, "\t") < 3) next  # a continuation line of a long instruction: bytes only
    n = split(f[2], b, " ")
    i = 1
    while (i <= n && b[i] ~ /^(26|2e|36|3e|64|65|66|67|f2|f3)$/) i++
    if (i <= n && b[i] == "62") {
      if (fn ~ /_avx512/) variants[fn] = 1
      else if (!(fn in bad)) { bad[fn] = 1; nbad++; print "AVX-512 instruction outside an _avx512 function: " fn " " f[3] }
    }
  }
  END {
    nv = 0; for (k in variants) nv++
    printf "isa_baseline: %d functions with AVX-512 code, all named _avx512; %d outside\n", nv, nbad
    if (nbad > 0 || nv == 0) exit 1
  }'

# OpenBLAS's kernels follow the CPU's features, not OpenBLAS's table of CPU models (which gives a
# model newer than itself SSE3 kernels): with OPENBLAS_CORETYPE unset, normlab runs SkylakeX kernels
# where its own kernels run AVX-512 and Haswell where they run AVX2 (ops/isa.h openblas_coretype)
version=$(env -u OPENBLAS_CORETYPE "$bin" --version)
isa=$(sed -n 's/^kernels: \([a-z0-9]*\) .*/\1/p' <<< "$version")
want=$([[ $isa == avx512 ]] && echo SkylakeX || echo Haswell)
if ! grep -q "OpenBLAS ($want kernels" <<< "$version"; then
  echo "FAIL: kernels $isa, but OpenBLAS does not run its $want kernels: $(grep '^gemm' <<< "$version")"; exit 1
fi
# a value the user set is kept
if ! OPENBLAS_CORETYPE=Prescott "$bin" --version | grep -q "OpenBLAS (Prescott kernels"; then
  echo "FAIL: OPENBLAS_CORETYPE=Prescott was not kept"; exit 1
fi
echo "isa_baseline: OpenBLAS runs its $want kernels with the $isa kernels"
