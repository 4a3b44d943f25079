#!/usr/bin/env bash
# scaling.sh: data parallelism over MPI ranks on this machine (not a test; docs/BENCHMARK.md "Scaling over MPI
# ranks"). For the benchmark shapes b and c (bench/bench_step.cpp; byte vocabulary, the built-in
# corpus) it trains 14 steps with one process (all cores) and with `mpirun -np 2` (one core each),
# the same global batch, and with one process on one core, and reports the median tokens/s and ms per
# step of steps 5..14 (efficiency: docs/BENCHMARK.md); then the
# fixed-order gradient sum's time per gradient size (bench_allreduce). The load average is recorded
# beside every measurement: the machine may be shared. Prints JSON lines.
# Usage: bench/scaling.sh [build dir]
set -uo pipefail
BUILD=$(realpath "${1:-build}")
NL=$BUILD/normlab
(( EUID == 0 )) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=PASSIVE
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
declare -A shape=([b]="256 256 6 8 128 16" [c]="256 128 48 4 64 8")  # V d L H T B (bench_step.cpp)
for s in b c; do
  read -r V d L H T B <<< "${shape[$s]}"
  args=(--set model.vocab=$V --set model.d_model=$d --set model.n_layers=$L --set model.n_heads=$H
        --set model.seq_len=$T --set train.batch_size=$B --set train.steps=14 --set train.eval_batches=1 -q)
  for mode in "1 2" "1 1" "2 1"; do  # ranks, threads per rank
    read -r P threads <<< "$mode"
    before=$(load)
    if (( P == 1 )); then
      OMP_NUM_THREADS=$threads "$NL" train "${args[@]}" --set train.out_dir="$W/$s-$P-$threads" > /dev/null
    else
      mpirun --oversubscribe -np "$P" "$NL" train "${args[@]}" --set train.out_dir="$W/$s-$P-$threads" > /dev/null
    fi
    jq -s --arg s "$s" --argjson P "$P" --argjson t "$threads" --arg load "$before $(load)" '
      [.[] | select(.type == "train" and .step >= 5)] as $r
      | ($r | map(.tokens_per_s) | sort | .[length / 2 | floor]) as $tps
      | {shape: $s, ranks: $P, threads_per_rank: $t, tokens_per_s: $tps, load_before_after: $load}' \
      "$W/$s-$P-$threads/metrics.jsonl" | jq -c --argjson tokens "$((B * T))" '.ms_per_step = 1000 * $tokens / .tokens_per_s'
  done
done
echo "{\"allreduce_load_before\": \"$(load)\"}"
mpirun --oversubscribe -np 2 "$BUILD/bench/bench_allreduce"
