#!/usr/bin/env bash
# cli_mpi.sh: `mpirun -np 2 --oversubscribe normlab train|compare` (src/distributed/). Data parallelism: a
# decoder-only run (dropout, grad_accum 2, a batch of 5 rows split 3 + 2, QK-Clip), today's blocks in bf16
# (Gemma 2's and OLMo 2's layers, DyT's LLaMA recipe, gated attention, sink logits) and an encoder-decoder on a
# padded translation corpus (ranks holding different numbers of target tokens) give the losses of
# one process with the same global batch within TOL (relative), and two P = 2 runs are bit-identical
# (losses, parameters, AdamW moments); a P = 2 run resumed from its step-10 checkpoint is
# bit-identical to the uninterrupted one; a resume with another P is refused naming both; a tiny
# study spread over 2 ranks gives the results table of the serial study; bad input (a batch smaller
# than P, a one-process command under mpirun) is one message and exit 1. Threads: one per rank and
# for the single process (OMP_NUM_THREADS=1), so the comparisons do not depend on the machine.
# Usage: cli_mpi.sh path/to/normlab
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh"
# (each command's exit code is saved in rc at once: a check's message may run commands of its own)
export OMP_NUM_THREADS=1
(( EUID == 0 )) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=${MPIRUN:-mpirun}  # ctest passes the one CMake found
# (under AddressSanitizer, scripts/sanitize.sh: OpenMPI's own never-freed allocations are matched to
# its libraries by scripts/sanitize_lsan.supp only when malloc unwinds slowly, through its plugins;
# a binary without ASan ignores the option)
mpi() {
  local p=$1; shift
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0" \
    timeout 300 "$MPIRUN" --oversubscribe -np "$p" "$NL" "$@"
}
# TOL: float32 sums in another order (the gradient over 2 shards, then summed) move each loss by a
# few ulps at step 1 (the gradients are summed in double and rounded once); AdamW and 20 steps of
# training carry it on. Measured here: at most 1.5e-9 (decoder-only) and 1.0e-9 (encoder-decoder);
# the bound leaves a wide margin for other machines' BLAS kernels.
TOL=1e-6

# "type step loss" of every train and validation record
losses() { jq -r 'select(.type == "train" or .type == "val") | "\(.type) \(.step) \(.loss)"' "$1/metrics.jsonl"; }
# the largest relative difference between two runs' losses, or "mismatch" if their records differ
max_rel() {
  paste <(losses "$1") <(losses "$2") | awk '
    { if ($1 != $4 || $2 != $5) bad = 1; d = $3 - $6; if (d < 0) d = -d; b = $6 < 0 ? -$6 : $6; if (d / b > m) m = d / b }
    END { if (bad || NR == 0) print "mismatch"; else printf "%.3g\n", m }'
}
within() { [[ "$1" != mismatch ]] && awk -v x="$1" -v t="$TOL" 'BEGIN { exit !(x <= t) }'; }

# --- decoder-only: P = 2 against one process, and against itself ---------------------------------
# (QK-Clip at a threshold every step's largest score passes: the ranks' maxima meet before the rescale)
gpt=(--set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=32
     --set model.dropout=0.1 --set train.batch_size=5 --set train.grad_accum=2 --set train.steps=20
     --set train.eval_every=10 --set train.eval_batches=2 --set train.checkpoint_every=5
     --set train.keep_checkpoints=10 --set train.qk_clip=0.03 -q)
"$NL" train "${gpt[@]}" --set train.out_dir=gpt1 > gpt1.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "one process: $(tail -2 gpt1.txt)"
mpi 2 train "${gpt[@]}" --set train.out_dir=gpt2a > gpt2a.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "mpirun -np 2 train: $(tail -5 gpt2a.txt)"
mpi 2 train "${gpt[@]}" --set train.out_dir=gpt2b > gpt2b.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "mpirun -np 2 train (repeat): $(tail -5 gpt2b.txt)"
rel=$(max_rel gpt2a gpt1)
echo "decoder-only: P = 2 against one process, largest relative loss difference $rel"
check "within $rel" "decoder-only: P = 2 differs from one process by $rel (TOL $TOL)"
check "[[ \"\$(fingerprint gpt2a)\" == \"\$(fingerprint gpt2b)\" ]]" "decoder-only: two P = 2 runs differ"
clipped() { jq -r 'select(.type == "train") | .qk_clipped' "$1/metrics.jsonl" | tr '\n' ' '; }
check "[[ \"\$(clipped gpt1)\" == \"\$(clipped gpt2a)\" && \"\$(clipped gpt1)\" == *[1-9]* ]]" \
  "QK-Clip: groups clipped per step, one process '$(clipped gpt1)' vs P = 2 '$(clipped gpt2a)'"
check "[[ \$(find gpt2a -name '*.tmp*' | wc -l) -eq 0 && \$(jq -c 'select(.type == \"summary\")' gpt2a/metrics.jsonl | wc -l) -eq 1 ]]" \
  "P = 2: not one summary, or temporary files left"

# --- today's blocks: Gemma 2's (sandwich, RoPE, GeGLU, grouped queries, soft caps) and OLMo 2's
# (reordered, QK-norm) layers in one stack, DyT's LLaMA recipe (a learned embedding scale), gated
# attention with sink logits, value residual learning, CompleteP, bf16 --------------------------------
modern=(--set model.d_model=32 --set model.n_heads=4 --set model.n_kv_heads=2 --set model.n_layers=2
        --set model.seq_len=32 --set model.norm=dyt --set model.norm_bias=false --set model.norm_alpha_attn=0.8
        --set model.positions=rope --set model.activation=geglu --set model.bias=none
        --set 'model.placement=["sandwich","reordered"]' --set model.qk_norm=whole --set model.attn_softcap=5
        --set model.logit_softcap=3 --set model.embed_scale=5.6 --set model.embed_scale_learned=true
        --set model.attn_gate=headwise --set model.attn_sink=true --set model.value_residual=0.5
        --set model.completep_base_depth=1
        --set train.precision=bf16 --set train.batch_size=5 --set train.grad_accum=2 --set train.steps=12
        --set train.eval_every=6 --set train.eval_batches=2 -q)
"$NL" train "${modern[@]}" --set train.out_dir=mod1 > mod1.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "today's blocks, one process: $(tail -2 mod1.txt)"
mpi 2 train "${modern[@]}" --set train.out_dir=mod2 > mod2.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "today's blocks, mpirun -np 2 train: $(tail -5 mod2.txt)"
rel=$(max_rel mod2 mod1)
echo "today's blocks (bf16): P = 2 against one process, largest relative loss difference $rel"
check "within $rel" "today's blocks: P = 2 differs from one process by $rel (TOL $TOL)"

# --- hyper-connections: mHC with 3 streams and dynamic HC with 2 -------------------------------------
# (in float32: the gradients of two shards differ from one process's by float rounding, ~1e-9, as every
# model's; in bf16 such a difference moves some activations across a bf16 rounding boundary, and after
# 12 steps the losses differ by ~1e-6, measured, more than TOL; the sharding itself is what is checked)
for form in "mhc 3" "hc 2"; do
  set -- $form
  hyper=(--set model.d_model=32 --set model.n_heads=4 --set model.n_layers=2 --set model.seq_len=32
         --set model.norm=rmsnorm --set model.positions=rope --set model.hyper=$1 --set model.hyper_streams=$2
         --set train.precision=fp32 --set train.batch_size=5 --set train.grad_accum=2 --set train.steps=12
         --set train.eval_every=6 --set train.eval_batches=2 -q)
  "$NL" train "${hyper[@]}" --set train.out_dir=hyp1_$1 > hyp1_$1.txt 2>&1; rc=$?
  check "[[ $rc -eq 0 ]]" "hyper $1, one process: $(tail -2 hyp1_$1.txt)"
  mpi 2 train "${hyper[@]}" --set train.out_dir=hyp2_$1 > hyp2_$1.txt 2>&1; rc=$?
  check "[[ $rc -eq 0 ]]" "hyper $1, mpirun -np 2 train: $(tail -5 hyp2_$1.txt)"
  rel=$(max_rel hyp2_$1 hyp1_$1)
  echo "hyper $1: P = 2 against one process, largest relative loss difference $rel"
  check "within $rel" "hyper $1: P = 2 differs from one process by $rel (TOL $TOL)"
done

# --- encoder-decoder on a padded translation corpus -----------------------------------------------
mkdir corpus
perl -e '
  my @w = qw(alpha beta gamma delta sun moon star sea land fire water stone tree bird fish);
  srand(7);
  for my $split (["train", 200], ["valid", 12]) {
    open(my $s, ">", "corpus/$split->[0].src") or die; open(my $t, ">", "corpus/$split->[0].tgt") or die;
    for (1 .. $split->[1]) {
      my @x = map { $w[int(rand(@w))] } 1 .. 1 + int(rand(5));
      print $s join(" ", @x), "\n"; print $t join(" ", reverse @x), "\n";
    }
  }'
encdec=(--set model.arch=encdec --set model.n_layers=1 --set model.dec_layers=1 --set model.d_model=32
        --set model.n_heads=2 --set model.d_ff=64 --set model.seq_len=48 --set model.dropout=0.1
        --set data.parallel=corpus --set data.bleu_sentences=0 --set train.batch_size=5
        --set train.grad_accum=2 --set train.steps=12 --set train.eval_every=6 --set train.eval_batches=1 -q)
"$NL" train "${encdec[@]}" --set train.out_dir=ed1 > ed1.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "encdec, one process: $(tail -2 ed1.txt)"
mpi 2 train "${encdec[@]}" --set train.out_dir=ed2a > ed2a.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "encdec, mpirun -np 2: $(tail -5 ed2a.txt)"
mpi 2 train "${encdec[@]}" --set train.out_dir=ed2b > ed2b.txt 2>&1
rel=$(max_rel ed2a ed1)
echo "encoder-decoder: P = 2 against one process, largest relative loss difference $rel"
check "within $rel" "encdec: P = 2 differs from one process by $rel (TOL $TOL)"
check "[[ \"\$(fingerprint ed2a)\" == \"\$(fingerprint ed2b)\" ]]" "encdec: two P = 2 runs differ"

# --- resume with P = 2 from the step-10 checkpoint -------------------------------------------------
cp -r gpt2a cut
rm cut/checkpoints/step-00000001[5-9].safetensors cut/checkpoints/step-00000002*.safetensors cut/checkpoint.safetensors
mpi 2 train --resume cut -q > cut.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "mpirun -np 2 train --resume: $(tail -5 cut.txt)"
check "[[ \"\$(fingerprint cut)\" == \"\$(fingerprint gpt2a)\" ]]" "P = 2 resumed at step 10 differs from the uninterrupted run"

# --- a study over 2 ranks: the serial study's results table --------------------------------------
cat > study.toml <<'TOML'
[study]
name = "spread"
theory = false
instruments = false
loss_target = 3.0

[base.model]
d_model = 32
n_heads = 2
n_layers = 2
seq_len = 32

[base.train]
steps = 30
batch_size = 4
eval_every = 15
eval_batches = 2

[[grid]]
model.placement = ["post", "pre", "sandwich"]
TOML
# per run: name, status, every train and validation loss, the summary's losses (no timings)
results() {
  jq -c '[.runs[] | {name, status, steps_to_target, train: .train.loss, val: .val.loss,
          s: (.summary | {steps, train_loss, val_loss, diverged})}]' "$1/results.json"
}
table() { grep -E '^placement=[^ ]+ +(finished|diverged|failed|interrupted) ' "$1/summary.txt" | awk '{$7 = ""; print}'; }  # the rows (the answer above may wrap onto a line starting placement=); tokens/s left out
"$NL" compare --config study.toml --out st1 > st1.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "serial study: $(tail -3 st1.txt)"
mpi 2 compare --config study.toml --out st2 > st2.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "study over 2 ranks: $(tail -5 st2.txt)"
check "[[ -n \"\$(results st1)\" && \"\$(results st2)\" == \"\$(results st1)\" ]]" "study over 2 ranks: results differ from the serial study"
check "[[ \$(table st2 | wc -l) -eq 3 && \"\$(table st2)\" == \"\$(table st1)\" ]]" "study over 2 ranks: tables differ: $(table st2)"
check "grep -q '^rank 1: ' st2.txt && grep -q '^rank 0: ' st2.txt" "study over 2 ranks: not both ranks ran runs"
# a run that fails (on whichever rank holds it) is marked failed; the others finish; exit 1
sed 's/^model.placement = .*/model.placement = ["post", "pre"]\ntrain.init_from = ["", "nothere.safetensors"]/' study.toml > failing.toml
mpi 2 compare --config failing.toml --out st3 > st3.txt 2> st3.err; rc=$?
check "[[ $rc -ne 0 && \$(jq -c '[.runs[].status] | sort' st3/results.json) == '[\"failed\",\"failed\",\"finished\",\"finished\"]' ]]" \
  "a failing run over 2 ranks: $(jq -c '[.runs[].status]' st3/results.json 2>&1) $(tail -3 st3.err)"
# compare --resume over 2 ranks: the finished runs kept, the rest run, the same table
cp -r st1 st4 && jq '.runs[1].status = "interrupted" | .runs[2].status = "not run"' st1/results.json > st4/results.json
rm -r st4/runs/02-* st4/runs/03-*
mpi 2 compare --resume st4 > st4.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]] && grep -q 'kept: finished before --resume' st4.txt" "compare --resume over 2 ranks: $(tail -3 st4.txt)"
check "[[ \"\$(results st4)\" == \"\$(results st1)\" ]]" "compare --resume over 2 ranks: results differ from the serial study"

# --- Ctrl-C to mpirun: Open MPI ends the ranks (SIGTERM, then SIGKILL), so the run stops where it is;
# its newest checkpoint is complete and `mpirun -np 2 train --resume` ends bit-identical to a P = 2
# run never stopped
long=(--set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=32
      --set train.batch_size=4 --set train.steps=1500 --set train.checkpoint_every=5 --set train.eval_every=500 -q)
mpi 2 train "${long[@]}" --set train.out_dir=whole2 > whole2.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "mpirun -np 2 train (1,500 steps): $(tail -3 whole2.txt)"
"$MPIRUN" --oversubscribe -np 2 "$NL" train "${long[@]}" --set train.out_dir=ctrlc > ctrlc.txt 2>&1 &
pid=$!
for _ in $(seq 1 600); do [[ -e ctrlc/checkpoints ]] && break; sleep 0.05; done
sleep 1
kill -INT $pid
wait $pid
# the ranks are gone (or zombies, which pgrep -f does not match: their temporary files are stale);
# under load ending them takes a while, and a rank still alive may still write: its files stay
for _ in $(seq 1 1200); do pgrep -f "out_dir=ctrlc" > /dev/null || break; sleep 0.05; done
mpi 2 train --resume ctrlc -q > ctrlc2.txt 2>&1; rc=$?
check "[[ $rc -eq 0 ]]" "mpirun -np 2 train --resume after Ctrl-C: $(tail -3 ctrlc2.txt)"
check "[[ \"\$(fingerprint ctrlc)\" == \"\$(fingerprint whole2)\" ]]" "Ctrl-C to mpirun, then --resume, differs from the run never stopped"
check "[[ -z \"\$(find ctrlc -name '*.tmp*')\" ]]" "temporary files left after Ctrl-C and resume: $(find ctrlc -name '*.tmp*')"

# --- bad input ---------------------------------------------------------------------------------------
before=$(md5sum gpt2a/metrics.jsonl gpt2a/checkpoint.safetensors)
expect_error "trained on 2 MPI ranks" -- train --resume gpt2a --set train.steps=30
err=$(mpi 3 train --resume gpt2a --set train.steps=30 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \"\$err\" == *'trained on 2 MPI ranks'*'this launch has 3: resume it with mpirun -np 2'* ]]" \
  "resume with -np 3: $err"
check "[[ \$(grep -c 'normlab: error:' <<< \"\$err\") -eq 1 ]]" "resume with -np 3: not one message: $err"
err=$(mpi 2 train --resume gpt1 --set train.steps=30 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \"\$err\" == *'trained on 1 MPI rank'*'this launch has 2'* ]]" "resume of a one-process run with -np 2: $err"
check "[[ \"\$(md5sum gpt2a/metrics.jsonl gpt2a/checkpoint.safetensors)\" == \"\$before\" ]]" "a refused resume changed the run"
err=$(mpi 2 train "${gpt[@]}" --set train.batch_size=1 --set train.out_dir=tiny 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \"\$err\" == *'train.batch_size must be at least the number of ranks'* && ! -e tiny/metrics.jsonl ]]" \
  "a batch of 1 over 2 ranks: $err"
err=$(mpi 2 init --out x.safetensors 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \"\$err\" == *'normlab init runs in one process'* && ! -e x.safetensors ]]" "init under mpirun: $err"
# a parse error, an unknown command and --version are the same on every rank: printed once
err=$(mpi 2 train --no-such-option 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \$(grep -c 'normlab: error:' <<< \"\$err\") -eq 1 ]]" "a parse error under mpirun: not one message: $err"
err=$(mpi 2 trian 2>&1 >/dev/null); rc=$?
check "[[ $rc -ne 0 && \$(grep -c 'normlab: error:' <<< \"\$err\") -eq 1 ]]" "an unknown command under mpirun: not one message: $err"
out=$(mpi 2 --version 2>&1); rc=$?
check "[[ $rc -eq 0 && \$(grep -c '^normlab ' <<< \"\$out\") -eq 1 ]]" "--version under mpirun: not printed once: $out"

finish cli_mpi
