#!/usr/bin/env bash
# cli_resume.sh: `normlab train --resume` and `normlab compare --resume` through the CLI. A run
# stopped by Ctrl-C (exit 130) and resumed, and a run killed with SIGKILL at 20 random moments and
# resumed each time, end bit-identical to a run never stopped (train losses, validation losses,
# per-layer records, parameters and AdamW moments), with no temporary files left (and so does a
# hyper-connected model's); a study stopped by
# Ctrl-C mid-way and resumed gives the same results as one never stopped; bad resume input (no such
# directory, not a run, no checkpoint yet, a mismatched config, a different study) is one message,
# exit 1, and changes nothing. Threads are fixed: bit-identity holds at one thread count.
# Usage: cli_resume.sh path/to/normlab
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh"
export OMP_NUM_THREADS=1
run=(--set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=32
     --set model.dropout=0.1 --set train.batch_size=4 --set train.grad_accum=2 --set train.eval_every=50
     --set train.eval_batches=2 --set train.checkpoint_every=5 --set train.log_every_layers=25
     --set train.log_model_update=true --set train.steps=400 --set train.log_every=1)

"$NL" train "${run[@]}" --set train.out_dir=whole -q > whole.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "the uninterrupted run failed: $(tail -2 whole.txt)"
reference=$(fingerprint whole)

# --- Ctrl-C, then --resume ----------------------------------------------------------------------
# interrupt ARGS...: `normlab train ARGS` into DIR (its last argument's out_dir, log DIR.txt), Ctrl-C
# (or signal $SIG) once it has logged step 10-19; rc holds its exit code
interrupt() {
  local dir=${*: -1}
  dir=${dir#train.out_dir=}
  "$NL" train "$@" > "$dir.txt" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    grep -qE '^step +1[0-9]/' "$dir.txt" && break
    sleep 0.05
  done
  kill -"${SIG:-INT}" $pid
  wait $pid
  rc=$?
}
# SIGTERM (timeout, a batch scheduler, a shutdown) stops after the step as Ctrl-C does
SIG=TERM interrupt "${run[@]}" --set train.out_dir=term
check "[[ $rc -eq 130 ]] && grep -q 'continue it with: normlab train --resume term' term.txt" \
  "SIGTERM: exit $rc, wanted 130 and the resume command: $(tail -1 term.txt)"
interrupt "${run[@]}" --set train.out_dir=int
check "[[ $rc -eq 130 ]]" "Ctrl-C: exit $rc, wanted 130"
check "grep -q 'continue it with: normlab train --resume int' int.txt" "Ctrl-C does not print the resume command: $(tail -1 int.txt)"
"$NL" train --resume int -q > int2.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "resume after Ctrl-C failed: $(tail -2 int2.txt)"
check "[[ \"\$(fingerprint int)\" == \"\$reference\" ]]" "Ctrl-C then --resume differs from the uninterrupted run"
check "[[ \$(jq -c 'select(.type == \"train\") | .step' int/metrics.jsonl | tr '\n' ' ') == \"\$(seq -s ' ' 400) \" ]]" \
  "Ctrl-C then --resume: train steps are not 1..400 once each"
check "[[ \$(jq -c 'select(.type == \"summary\")' int/metrics.jsonl | wc -l) -eq 1 ]]" "more than one summary after resume"

# --- 20 kills at random moments, each followed by --resume (or a fresh start before the first checkpoint)
"$NL" train "${run[@]}" --set train.out_dir=killed -q > /dev/null 2>&1 &
pid=$!
RANDOM=14
for k in $(seq 20); do
  sleep "0.$((RANDOM % 20 + 3))"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  if [[ -e killed/checkpoint.safetensors || -d killed/checkpoints ]]; then
    "$NL" train --resume killed -q > /dev/null 2> kill_err.txt &
  else
    "$NL" train "${run[@]}" --set train.out_dir=killed --force -q > /dev/null 2> kill_err.txt &
  fi
  pid=$!
done
wait $pid
rc=$?
if [[ $rc -ne 0 ]]; then  # the last process may have been started on a finished run: resume once more
  "$NL" train --resume killed -q > /dev/null 2> kill_err.txt
  rc=$?
fi
check "[[ $rc -eq 0 ]]" "after 20 kills the run does not finish: $(cat kill_err.txt)"
check "[[ \"\$(fingerprint killed)\" == \"\$reference\" ]]" "20 kills and resumes differ from the uninterrupted run"
check "[[ -z \"\$(find killed -name '*.tmp*')\" ]]" "temporary files left after the kills: $(find killed -name '*.tmp*')"
check "[[ \$(ls killed/checkpoints | wc -l) -eq 2 ]]" "not the 2 newest step files kept: $(ls killed/checkpoints)"

# --- hyper-connections (mHC, 3 streams, dropout): Ctrl-C and --resume, bit-identical ---------------
hrun=(--set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=32
      --set model.dropout=0.1 --set model.hyper=mhc --set model.hyper_streams=3 --set train.batch_size=4
      --set train.checkpoint_every=5 --set train.steps=200 --set train.log_every=1)
"$NL" train "${hrun[@]}" --set train.out_dir=hwhole -q > /dev/null 2>&1
interrupt "${hrun[@]}" --set train.out_dir=hint
"$NL" train --resume hint -q > hint2.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "hyper-connections: resume after Ctrl-C failed: $(tail -2 hint2.txt)"
check "[[ \"\$(fingerprint hint)\" == \"\$(fingerprint hwhole)\" ]]" \
  "hyper-connections: Ctrl-C then --resume differs from the uninterrupted run"

# --- bad input -----------------------------------------------------------------------------------
mkdir -p notrun young
echo '{"type":"train","step":1,"loss":5}' > young/metrics.jsonl
expect_error "no such directory" -- train --resume nowhere
expect_error "not a normlab run directory" -- train --resume notrun
expect_error "no checkpoint yet" -- train --resume young
before=$(md5sum int/metrics.jsonl int/checkpoint.safetensors int/config.json)
expect_error "train.lr: checkpoint 0.002, now 0.001" -- train --resume int --set train.lr=1e-3
expect_error "model.d_model: checkpoint 32, now 48" -- train --resume int --set model.d_model=48
expect_error "--force replaces it" -- train --resume int --force
check "[[ \"\$(md5sum int/metrics.jsonl int/checkpoint.safetensors int/config.json)\" == \"\$before\" ]]" \
  "a refused resume changed the run"
# data-loss class 2 (a refusal changes nothing): a resume refused for what it reads (a NaN weight; a
# NaN AdamW moment, named) writes nothing: the run's config.json and metrics.jsonl (whose summary
# follows the last checkpoint) stay
poison() {  # run-dir tensor-name-prefix: a NaN into the first tensor with that prefix, in every checkpoint file
  find "$1" -name '*.safetensors' | while read -r f; do
    python3 - "$f" "$2" <<'PY'
import json, struct, sys
path, prefix = sys.argv[1], sys.argv[2]
data = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', data[:8])[0]
header = json.loads(data[8:8 + n])
name = sorted(k for k in header if k.startswith(prefix))[0]
begin = 8 + n + header[name]['data_offsets'][0]
data[begin:begin + 4] = struct.pack('<f', float('nan'))
open(path, 'wb').write(bytes(data))
PY
  done
}
for what in "wte.weight" "optimizer.v."; do
  rm -rf poisoned && cp -r int poisoned && poison poisoned "$what"
  before=$(md5sum poisoned/metrics.jsonl poisoned/config.json)
  expect_error "non-finite" -- train --resume poisoned --set train.steps=420
  check "[[ \"\$(md5sum poisoned/metrics.jsonl poisoned/config.json)\" == \"\$before\" ]]" \
    "a resume refused for a NaN in $what changed the run's config.json or metrics.jsonl"
done
# class 3: a newer step checkpoint of another model in a run's checkpoints/ is refused, naming the file
# and the difference, and nothing changes
"$NL" train --set model.d_model=48 --set model.n_heads=2 --set model.n_layers=1 --set model.seq_len=32 \
  --set train.steps=5 --set train.checkpoint_every=5 --set train.out_dir=stranger -q > /dev/null 2>&1
rm -rf adopted && cp -r int adopted && cp stranger/checkpoints/step-000000005.safetensors adopted/checkpoints/step-000000999.safetensors
before=$(md5sum adopted/metrics.jsonl adopted/config.json adopted/checkpoints/*)
expect_error "its newest checkpoint adopted/checkpoints/step-000000999.safetensors is not of this run" -- train --resume adopted
expect_error "model.d_model: checkpoint 48, now 32" -- train --resume adopted
check "[[ \"\$(md5sum adopted/metrics.jsonl adopted/config.json adopted/checkpoints/*)\" == \"\$before\" ]]" \
  "a resume refused for another model's checkpoint changed the run"
# raising train.steps trains on; the summary covers the whole run
"$NL" train --resume int --set train.steps=410 -q > more.txt 2>&1
rc=$?
check "[[ $rc -eq 0 && \$(jq -c 'select(.type == \"summary\") | .steps' int/metrics.jsonl) == 410 ]]" \
  "--resume --set train.steps=410: $(tail -2 more.txt)"

# --- compare --resume ----------------------------------------------------------------------------
cat > study.toml <<'EOF'
[study]
name = "resumable"
theory = false
instruments = false
loss_target = 3.0

[base.model]
d_model = 32
n_heads = 2
n_layers = 2
seq_len = 32

[base.train]
steps = 600
batch_size = 4
eval_every = 100
eval_batches = 2
checkpoint_every = 20

[[grid]]
model.placement = ["post", "pre", "sandwich"]
EOF
# the results that must agree: per run its status, every train and validation loss, the summary losses
results() {
  jq -c '[.runs[] | {name, status, steps_to_target, train: .train.loss, val: .val.loss,
          s: (.summary | {steps, train_loss, val_loss, diverged})}]' "$1/results.json" | md5sum
}
"$NL" compare --config study.toml --set train.lr=3e-3 --out sw > sw.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "the uninterrupted study failed: $(tail -3 sw.txt)"
"$NL" compare --config study.toml --set train.lr=3e-3 --out si > si.txt 2>&1 &
pid=$!
for _ in $(seq 1 600); do  # stop during the second run
  [[ -e si/runs/02-placement=pre/checkpoint.safetensors ]] && break
  sleep 0.02
done
kill -INT $pid
wait $pid
rc=$?
check "[[ $rc -eq 130 ]]" "compare Ctrl-C: exit $rc, wanted 130"
check "grep -q 'normlab compare --resume si' si.txt" "compare Ctrl-C does not print the resume command: $(tail -1 si.txt)"
check "[[ \$(jq -c '[.runs[].status]' si/results.json) == '[\"finished\",\"interrupted\",\"not run\"]' ]]" \
  "compare Ctrl-C statuses: $(jq -c '[.runs[].status]' si/results.json)"
sed 's/^steps = 600/steps = 500/' study.toml > other.toml
expect_error "base.train.steps: study.json 600, now 500" -- compare --resume si --config other.toml --set train.lr=3e-3
expect_error "--set: " -- compare --resume si --set train.lr=1e-3
expect_error "no study.json" -- compare --resume notrun
# the interrupted run finished by train --resume says whose results it is and how to take it in; the
# study's resume then keeps it (its records equal the uninterrupted study's below)
"$NL" train --resume si/runs/02-placement=pre/ > trs.txt 2>&1
check "grep -q \"note: this run belongs to the study in '.*si'\" trs.txt" "train --resume of a study's run did not say so: $(tail -2 trs.txt)"
"$NL" compare --resume si > si2.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "compare --resume failed: $(tail -3 si2.txt)"
check "grep -q 'kept: finished before --resume' si2.txt" "compare --resume did not keep the finished run"
check "[[ \"\$(results si)\" == \"\$(results sw)\" ]]" "compare interrupted and resumed differs from uninterrupted"
table() { grep -E '^placement=[^ ]+ +(finished|diverged|failed|interrupted) ' "$1/summary.txt" | awk '{$7 = ""; print}'; }  # the rows (the answer above may wrap onto a line starting placement=); tokens/s left out
check "[[ \"\$(table si)\" == \"\$(table sw)\" && \$(table sw | wc -l) -eq 3 ]]" \
  "the summary tables differ: $(table si) vs $(table sw)"
# reproductions are analysis: a study that differs only in [[reproduce]] resumes (nothing reruns) and
# the report gains the table; a malformed one is refused before anything is written
cat study.toml - > repro.toml <<'EOF'

[[reproduce]]
claim = "Pre-LN ends lower than Post-LN"
source = "test"
paper = "no paper"
a = "model.placement=pre"
b = "model.placement=post"
expect = "a < b"
EOF
before=$(results si)
"$NL" compare --resume si --config repro.toml --set train.lr=3e-3 > si3.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "compare --resume with a new [[reproduce]] failed: $(tail -3 si3.txt)"
check "[[ \$(grep -c 'kept: finished before --resume' si3.txt) -eq 3 ]]" "a new [[reproduce]] reran runs"
check "[[ \"\$(results si)\" == \"\$before\" ]]" "a new [[reproduce]] changed the runs' results"
check "grep -q 'Pre-LN ends lower than Post-LN (test): ' si/summary.txt && jq -e '.reproductions | length == 1' si/results.json > /dev/null && jq -e '.reproduce | length == 1' si/study.json > /dev/null" \
  "the reproduction is not in summary.txt, results.json and study.json"
sed 's/^expect = "a < b"/expect = "a <= b"/' repro.toml > badrepro.toml
expect_error 'must be "a < b" or "a > b"' -- compare --resume si --config badrepro.toml --set train.lr=3e-3
check "jq -e '.reproductions | length == 1' si/results.json > /dev/null" "a refused resume changed results.json"

# a study whose grid adds runs extends the one in DIR (a sweep whose optimum sat at an edge gains a
# value): the runs there are kept and only the new one runs; one that drops or renames a run is refused
printf '\n[[grid]]\nmodel.placement = ["deepnorm"]\n' | cat repro.toml - > extended.toml
"$NL" compare --resume si --config extended.toml --set train.lr=3e-3 > si4.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "compare --resume with an extended grid failed: $(tail -3 si4.txt)"
check "grep -q '4 runs, 1 of them new' si4.txt && [[ \$(grep -c 'kept: finished before --resume' si4.txt) -eq 3 ]]" \
  "an extended grid did not keep the 3 runs and run 1: $(head -3 si4.txt)"
names=$(jq -c '[.runs[] | [.name, .status]]' si/results.json)
check "[[ '$names' == '[[\"01-placement=post\",\"finished\"],[\"02-placement=pre\",\"finished\"],[\"03-placement=sandwich\",\"finished\"],[\"04-placement=deepnorm\",\"finished\"]]' ]]" \
  "extended study's runs: $names"
kept=$(jq -c '[.runs[:3][] | {name, train: .train.loss, val: .val.loss}]' si/results.json | md5sum)
uninterrupted=$(jq -c '[.runs[] | {name, train: .train.loss, val: .val.loss}]' sw/results.json | md5sum)
check "[[ '$kept' == '$uninterrupted' ]]" "extending the study changed the runs it kept"
check "jq -e '.grid | length == 2' si/study.json > /dev/null" "study.json does not hold the extended grid"
sed 's/^model.placement = \["post", "pre", "sandwich"\]/model.placement = ["post", "pre"]/' extended.toml > dropped.toml
expect_error "run '03-placement=sandwich' of study.json is not in the study given" -- compare --resume si --config dropped.toml --set train.lr=3e-3
printf '\n[[grid]]\nmodel.placement = ["pre"]\ntrain.warmup_steps = [7]\n' | cat extended.toml - > renamed.toml
expect_error "of study.json is not in the study given" -- compare --resume si --config renamed.toml --set train.lr=3e-3
check "jq -e '.runs | length == 4' si/results.json > /dev/null && jq -e '.grid | length == 2' si/study.json > /dev/null" \
  "a refused extension changed results.json or study.json"

# what resume reads must be a study's: a results.json that is a FIFO is refused by name (reading it
# blocked forever), and a "finished" record without a summary object is not kept (it is run again)
cp -r sw swfifo && rm swfifo/results.json && mkfifo swfifo/results.json
expect_error "is a FIFO" -- compare --resume swfifo --config study.toml --set train.lr=3e-3
cp -r sw swother && jq '.runs[0].config.model.d_model = 16' sw/results.json > swother/r.json && mv swother/r.json swother/results.json
expect_error "results.json's run '01-placement=post' was made with another config than the study gives it now (model.d_model differs" \
  -- compare --resume swother --config study.toml --set train.lr=3e-3
cp -r sw swbad && jq '.runs[0].summary = "fine"' sw/results.json > swbad/r.json && mv swbad/r.json swbad/results.json
"$NL" compare --resume swbad --config study.toml --set train.lr=3e-3 > swbad.txt 2>&1
check "jq -e '.runs[0].summary | type == \"object\"' swbad/results.json > /dev/null" \
  "compare --resume kept a finished record whose summary is not an object"

finish cli_resume
