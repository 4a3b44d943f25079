#!/usr/bin/env bash
# cli_compare.sh: `normlab compare` end to end on a tiny study (every output file, the run table,
# the written summary, divergence recorded as a result, a self-contained report, a snapshot after each run
# while it runs), `normlab report`,
# Ctrl-C and SIGTERM (the finished runs and a report of them are kept, exit 130), and bad study input (one
# clear message, exit 1, nothing overwritten).
# Usage: cli_compare.sh path/to/normlab path/to/tests/data
set -uo pipefail
NL=$(realpath "$1")
DATA=$(realpath "$2")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

# jq-free JSON queries through the results file
q() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# --- end to end, with a Ctrl-C during the theory table and the resume that computes it ----------
"$NL" compare --config "$DATA/tiny_study.toml" --out tiny > out.txt 2>&1 &
pid=$!
for _ in $(seq 1 6000); do grep -q '^\[theory\]' out.txt && break; sleep 0.1; done
sleep 1
kill -INT $pid
wait $pid
rc=$?
check "[[ $rc -eq 130 ]]" "Ctrl-C in the theory table: exit $rc, wanted 130; output: $(tail -5 out.txt)"
check "grep -q 'interrupted during the theory table: every run finished' out.txt" \
  "Ctrl-C in the theory table: not said; output: $(tail -3 out.txt)"
check "[[ \$(q tiny/results.json \"'theory' in d\") == False && \$(q tiny/results.json \"d['interrupted']\") == True ]]" \
  "Ctrl-C in the theory table: results.json has claims, or is not marked interrupted"
timeout 600 "$NL" compare --resume tiny > resumed.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "tiny study's resume: exit $rc; output: $(tail -20 resumed.txt)"
check "[[ \$(q tiny/results.json \"d['interrupted']\") == False ]]" "the resumed study is still marked interrupted"
for f in study.json results.json summary.txt report.html; do check "[[ -s tiny/$f ]]" "missing tiny/$f"; done
check "[[ \$(ls tiny/runs | wc -l) -eq 4 ]]" "expected 4 run directories, got $(ls tiny/runs 2>/dev/null)"
for d in tiny/runs/*/; do
  for f in metrics.jsonl config.json checkpoint.safetensors instruments.json; do
    check "[[ -s $d$f ]]" "missing $d$f"
  done
done
check "[[ \$(q tiny/results.json \"[r['status'] for r in d['runs']]\") == \"['finished', 'diverged', 'finished', 'diverged']\" ]]" \
  "statuses: $(q tiny/results.json "[r['status'] for r in d['runs']]")"
check "[[ \$(q tiny/results.json \"len(d['theory'])\") -ge 16 ]]" "theory claims missing from results.json"
check "[[ \$(q tiny/results.json \"len(d['runs'][0]['train']['loss'])\") -eq 30 ]]" "training curve of run 1 is not 30 steps"
check "[[ \$(q tiny/results.json \"len(d['runs'][2]['instruments']['init']['dynamics']['layers'])\") -eq 2 ]]" "init instruments missing"
check "[[ \$(q tiny/results.json \"'final' in d['runs'][2]['instruments']\") == True ]]" "after-training instruments missing"
# the table and the written summary, on the terminal and in summary.txt
check "grep -q 'placement=post lr=1e+30 *diverged' out.txt" "table row of the diverged run"
check "grep -q 'Diverged: placement=post lr=1e+30 (step' out.txt" "written summary names the diverged run"
check "grep -q 'Theory claims on fresh models (44 measured)' tiny/summary.txt && grep -q 'Theory claims on trained (to a plateau, at most 30 steps) models' tiny/summary.txt" "summary.txt lacks the theory lines"
check "grep -q '\[2/4\] placement=post lr=1e+30' out.txt" "progress names the run"
# the metrics of a run are the trainer's own
check "grep -q '\"type\":\"summary\"' tiny/runs/01-*/metrics.jsonl" "run metrics lack a summary record"
# self-contained: no external scripts, styles or images
check "! grep -Eiq '<(script|link|img|iframe)[^>]+(src|href)=' tiny/report.html" "report.html references external files"
check "grep -q 'Chart.js v4.6.1' tiny/report.html" "vendored Chart.js not inlined"

# normlab report redoes the outputs from results.json, identically
cp tiny/report.html before.html
"$NL" report tiny > /dev/null 2>&1
check "cmp -s before.html tiny/report.html" "normlab report produced a different report.html"
# report --csv: the same numbers as tables (every run, every logged point; a run's metrics.csv)
"$NL" report tiny --csv > /dev/null 2>&1
check "python3 - <<'PY'
import csv, json
res = json.load(open('tiny/results.json'))
runs = list(csv.DictReader(open('tiny/runs.csv', newline='')))
assert [r['name'] for r in runs] == [r['name'] for r in res['runs']], 'run names'
for row, r in zip(runs, res['runs']):
    assert row['status'] == r['status']
    v = r['summary']['val_loss']
    assert (row['val_loss'] == '' and v is None) or float(row['val_loss']) == v, (row['val_loss'], v)
curves = list(csv.DictReader(open('tiny/curves.csv', newline='')))
want = sum(len(r['train']['step']) + len(r['val']['step']) for r in res['runs'])
assert len(curves) == want, (len(curves), want)
first = res['runs'][0]
assert float(curves[0]['loss']) == first['train']['loss'][0]
PY" "report --csv: runs.csv / curves.csv differ from results.json"
run_dir=$(ls -d tiny/runs/*/ | head -1)
"$NL" report "$run_dir" --csv > /dev/null 2>&1
check "[[ \$(tail -n +2 ${run_dir}metrics.csv | wc -l) -eq \$(jq -c 'select(.type == \"train\" or .type == \"val\")' ${run_dir}metrics.jsonl | wc -l) ]]" \
  "report --csv of a run: metrics.csv does not have a row per train and val record"

# --- bad input --------------------------------------------------------------------------------
expect_error() {  # NEEDLE ARGS...: exit 1, one message naming the problem
  local needle=$1
  shift
  local err rc
  err=$(timeout 120 "$NL" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 1 && "$err" == *"$needle"* && "$err" == *"normlab: error:"* ]]; then ok
  else bad "normlab $* -> exit $rc, wanted 1 with '$needle'; stderr: $err"; fi
}
cp tiny/results.json results.before
expect_error "already holds a study" compare --config "$DATA/tiny_study.toml" --out tiny
check "cmp -s results.before tiny/results.json" "a refused compare changed the existing results"
expect_error "no built-in study 'nosuch'" compare --study nosuch --out x1
expect_error "no such file" compare --config missing.toml --out x2
printf '[study]\nname = "x"\nspeed = 3\n' > unknown_key.toml
expect_error "unknown [study] key 'speed'" compare --config unknown_key.toml --out x3
printf '[[grid]]\nmodel.placement = "post"\n' > scalar_grid.toml
expect_error "needs a non-empty array" compare --config scalar_grid.toml --out x4
printf '[[grid]]\nmodel.placement = ["post", "sideways"]\n' > bad_value.toml
expect_error "sideways" compare --config bad_value.toml --out x5
printf '[[grid]]\nmodel.wings = [1, 2]\n' > bad_key.toml
expect_error "wings" compare --config bad_key.toml --out x6
printf '[[grid]]\noptim.lr = [1, 2]\n' > bad_section.toml
expect_error "the section must be model, train or data" compare --config bad_section.toml --out x7
printf '[grids]\n' > bad_table.toml
expect_error "unknown table 'grids'" compare --config bad_table.toml --out x8
printf '[study\n' > syntax.toml
expect_error "syntax.toml" compare --config syntax.toml --out x9
expect_error "is a grid key" compare --config "$DATA/tiny_study.toml" --set model.placement=pre --out x10
expect_error "cannot create" compare --config "$DATA/tiny_study.toml" --out /proc/normlab-cannot
expect_error "either --study or --config" compare --study default --config "$DATA/tiny_study.toml" --out x11
printf '[data]\n' > empty.txt
: > empty_corpus.txt
printf '[base.data]\ncorpus = "empty_corpus.txt"\n' > empty_corpus.toml
expect_error "empty_corpus.txt" compare --config empty_corpus.toml --out x12
expect_error "no results.json" report nowhere
mkdir corrupt && head -c 300 tiny/results.json > corrupt/results.json
expect_error "not a normlab results file" report corrupt
check "[[ ! -e x1 && ! -e x3 && ! -e x4 && ! -e x10 && ! -e x12 ]]" "a refused study left an output directory"

# --- runs side by side (--jobs: study/jobs.h) ------------------------------------------------
# the same runs as one process at the same threads per run, to the bit (only the timings differ)
sed 's/^theory = true/theory = false/' "$DATA/tiny_study.toml" > no_theory.toml
OMP_NUM_THREADS=1 timeout 300 "$NL" compare --config no_theory.toml --jobs 1 --out seq > seq.txt 2>&1
OMP_NUM_THREADS=2 timeout 300 "$NL" compare --config no_theory.toml --jobs 2 --out par > par.txt 2>&1
check "grep -q 'left' seq.txt" "progress shows time left"
check "grep -q '(4 runs, 2 at a time with 1 thread each)' par.txt && grep -q '^job 1: \[' par.txt" \
  "--jobs 2 does not say it runs two at a time, or job 1 ran nothing: $(head -5 par.txt)"
check "python3 - <<'PY'
import json
a, b = json.load(open('seq/results.json')), json.load(open('par/results.json'))
assert b['jobs'] == {'processes': 2, 'threads_each': 1}, b.get('jobs')
timing = {'seconds', 'tokens_per_s', 'elapsed_s', 'instruments_seconds', 'out_dir'}
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if k not in timing}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
for x, y in zip(a['runs'], b['runs']):
    assert strip(x) == strip(y), x['name']
PY" "--jobs 2 gave other numbers than one process at one thread per run"
check "[[ -z \$(ls -A par | grep '^\.jobs') ]]" "--jobs left its queue or a job's records in the study directory"
expect_error "not by hand" compare --config no_theory.toml --worker 1 --out x13

# --- a study that starts from another study's finished runs (study/start.h) -----------------------
# fine-tuning each placement's finished run of `seq` (lr 3e-3; the runs at 1e30 diverged) on the
# first whole lines of 200 KB of the corpus, beside the same from a fresh model
cat > fine.toml <<'EOF'
[study]
name = "fine"
instruments = false
theory = false
start_from = "seq"
[study.starts]
pretrained = "model.placement={model.placement} train.lr=3e-3"
[base.model]
d_model = 32
n_heads = 2
n_layers = 2
seq_len = 32
[base.train]
steps = 10
batch_size = 4
lr = 1e-3
eval_every = 5
eval_batches = 2
checkpoint_every = 0
[base.data]
max_bytes = 200000
[[grid]]
model.placement = ["post", "pre"]
train.init_from = ["start:pretrained", ""]
EOF
OMP_NUM_THREADS=1 timeout 300 "$NL" compare --config fine.toml --jobs 1 --out fine > fine.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "the fine-tuning study: exit $rc; $(tail -5 fine.txt)"
labels() { q fine/results.json "[r['label'] for r in d['runs']]" 2>&1; }
check "[[ \"\$(labels)\" == \"['placement=post init_from=start:pretrained', 'placement=post init_from=none', 'placement=pre init_from=start:pretrained', 'placement=pre init_from=none']\" ]]" \
  "fine-tuning labels: $(labels)"
check "q fine/results.json \"d['runs'][2]['input']\" | grep -q \"its first 200000 bytes (whole lines); parameters from the checkpoint 'seq/runs/03-placement=pre_lr=0.003'\"" \
  "the pre fine-tuning run does not start from seq's pre run: $(q fine/results.json "d['runs'][2].get('input')" 2>&1)"
# the summary's legend names the data once and counts the starts (2 runs from 2 checkpoints), not each path
check "grep -q \"input: .*its first 200000 bytes (whole lines); 2 runs start from the parameters of a checkpoint (2 distinct\" fine/summary.txt && ! grep -q \"parameters from the checkpoint '\" fine/summary.txt" \
  "the summary's input legend: $(grep -o 'input: .*' fine/summary.txt | cut -c1-400)"
# the oracle: `normlab train` from that run directory by hand, the same losses to the bit
sed -e '/^\[study/,/^pretrained/d' -e '/^\[\[grid\]\]/,$d' -e 's/^\[base\./[/' fine.toml > by_hand.toml
OMP_NUM_THREADS=1 "$NL" train -c by_hand.toml --set model.placement=pre --set train.init_from=seq/runs/03-placement=pre_lr=0.003 \
  --set train.out_dir=by_hand > by_hand.txt 2>&1
check "python3 - <<'PY'
import glob, json
def losses(path):
    return [(r['step'], r['loss']) for r in map(json.loads, open(path)) if r.get('type') in ('train', 'val')]
a, b = losses(glob.glob('fine/runs/03-*/metrics.jsonl')[0]), losses('by_hand/metrics.jsonl')
assert a and a == b, (a, b)
PY" "the fine-tuning run differs from training from seq's pre run by hand: $(tail -3 by_hand.txt)"
# a start whose directory is gone (run directories stay on the machine that ran them): trained again
# from the config seq's results.json records for it, then the study runs; the same start to 4 digits,
# and the fine-tuning run from it the same to the bit
mkdir gone && cp seq/results.json gone/ && cp -r seq/runs gone/ && rm -r "gone/runs/03-placement=pre_lr=0.003"
sed 's/start_from = "seq"/start_from = "gone"/' fine.toml > gone.toml
OMP_NUM_THREADS=1 timeout 300 "$NL" compare --config gone.toml --jobs 1 --out fine_gone > fine_gone.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]] && grep -q '03-placement=pre_lr=0.003: its directory holds no finished training' fine_gone.txt && \
       grep -Eq 'trained: validation loss ([0-9.]+) \(its study recorded \1\), test loss' fine_gone.txt" \
  "a gone start trained again: exit $rc; $(grep -A3 'start 1/1' fine_gone.txt)"
check "python3 - <<'PY'
import glob, json
def losses(path):
    return [(r['step'], r['loss']) for r in map(json.loads, open(path)) if r.get('type') in ('train', 'val')]
a, b = losses(glob.glob('fine/runs/03-*/metrics.jsonl')[0]), losses(glob.glob('fine_gone/runs/03-*/metrics.jsonl')[0])
assert a and a == b, (a, b)
PY" "fine-tuning from the start trained again differs from fine-tuning from the recorded one"
# both starts gone, the study with --jobs 2: they train side by side (job 0 and a worker), each the
# recorded start to 4 digits, and the fine-tuning runs from them the same to the bit
mkdir gone2 && cp seq/results.json gone2/ && cp -r seq/runs gone2/ && \
  rm -r "gone2/runs/03-placement=pre_lr=0.003" gone2/runs/*-placement=post_lr=0.003
sed 's/start_from = "seq"/start_from = "gone2"/' fine.toml > gone2.toml
OMP_NUM_THREADS=2 timeout 300 "$NL" compare --config gone2.toml --jobs 2 --out fine_gone2 > fine_gone2.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]] && [[ \$(grep -Ec 'trained: validation loss ([0-9.]+) \\(its study recorded \\1\\), test loss' fine_gone2.txt) -eq 2 ]] && \
       [[ ! -e fine_gone2/.starts ]]" \
  "two gone starts trained side by side: exit $rc; $(grep 'start' fine_gone2.txt | head -8)"
check "python3 - <<'PY'
import glob, json
def losses(path):
    return [(r['step'], r['loss']) for r in map(json.loads, open(path)) if r.get('type') in ('train', 'val')]
for run in ('01', '03'):
    a, b = losses(glob.glob(f'fine/runs/{run}-*/metrics.jsonl')[0]), losses(glob.glob(f'fine_gone2/runs/{run}-*/metrics.jsonl')[0])
    assert a and a == b, (run, a, b)
PY" "fine-tuning from the starts trained side by side differs from fine-tuning from the recorded ones"
# a start that matches no finished run: one message, nothing run
sed 's/train.lr=3e-3/train.lr=1e-3/' fine.toml > nomatch.toml
expect_error "matches no finished runs of 'seq'" compare --config nomatch.toml --out x14
check "[[ ! -e x14 ]]" "a study whose start matches nothing left an output directory"
# a start study's results.json that is a directory, or whose run holds a number for its status: one
# message naming the file and the field
mkdir -p startdir/results.json && sed 's/start_from = "seq"/start_from = "startdir"/' fine.toml > startdir.toml
expect_error "startdir/results.json' is a directory" compare --config startdir.toml --out x15
mkdir -p startnum && python3 -c "
import json; d = json.load(open('seq/results.json')); d['runs'][1]['status'] = 3; json.dump(d, open('startnum/results.json', 'w'))"
sed 's/start_from = "seq"/start_from = "startnum"/' fine.toml > startnum.toml
expect_error "startnum/results.json' is not a normlab results file (corrupt, truncated or edited?): runs[1].status is a number" \
  compare --config startnum.toml --out x16
# --resume with a truncated results.json: refused, naming it, and nothing changed (it was replaced by
# a rerun of every run)
cp -r fine fine_cut && head -c 500 fine/results.json > fine_cut/results.json && cp fine_cut/results.json cut.before
expect_error "resume 'fine_cut': the study's results 'fine_cut/results.json' is not a normlab results file (corrupt, truncated or edited?): not valid JSON" compare --resume fine_cut
check "cmp -s cut.before fine_cut/results.json" "a refused --resume changed the truncated results.json"
# a grid whose values make a run's name longer than a file name may be: its directory name is cut
# (the number in front keeps it unique), and the run trains
long=$(printf '"pre", %.0s' $(seq 1 60))
printf '[study]\nname = "long"\ninstruments = false\ntheory = false\n[base.model]\nd_model = 16\nn_heads = 2\nn_layers = 61\nseq_len = 8\n[base.train]\nsteps = 1\neval_every = 1\n[[grid]]\nmodel.placement = [[%s"post"]]\n' "$long" > long.toml
OMP_NUM_THREADS=1 timeout 300 "$NL" compare --config long.toml --out long > long.txt 2>&1
rc=$?
check "[[ $rc -eq 0 ]] && q long/results.json \"d['runs'][0]['status']\" | grep -qx finished && [[ \$(ls long/runs | head -1 | wc -c) -le 121 ]]" \
  "a run with a long grid value: $(tail -3 long.txt)"

# Ctrl-C of job 0 alone (kill -INT, not the terminal's process group): every job stops, the runs
# they held are interrupted (resumable), the rest not run
wait_for_steps() {  # FILE PATTERN: until FILE shows PATTERN and a progress line after it
  for _ in $(seq 1 600); do
    grep -q "$2" "$1" && grep -qE 'step [0-9]+/[0-9]+ \|' "$1" && return 0
    sleep 0.1
  done
}
# interrupted_jobs OUT [ACTION...]: the slow study with --jobs 2 into OUT; once job 1 trains, ACTION,
# then a Ctrl-C of job 0 alone; sets rc to its exit code
interrupted_jobs() {
  local out=$1 pid
  shift
  "$NL" compare --config "$DATA/slow_study.toml" --jobs 2 --out "$out" > "$out.txt" 2>&1 &
  pid=$!
  wait_for_steps "$out.txt" '^job 1: \['
  "$@"
  sleep 1
  kill -"${SIG:-INT}" $pid
  wait $pid
  rc=$?
}
statuses() { q "$1/results.json" "[r['status'] for r in d['runs']]" 2>&1; }
# (while it runs: the study and its job are named after the program, as ps, top and pkill see them; a
# re-exec through /proc/self/exe would name them "exe")
process_names() { names="$(cat /proc/$pid/comm) $(cat /proc/"$(pgrep -f 'compare --resume slowj --worker 1')"/comm)"; }
interrupted_jobs slowj process_names
check "[[ \"$names\" == \"$(basename "$NL") $(basename "$NL")\" ]]" "the study's processes are named '$names', not after $(basename "$NL")"
check "[[ $rc -eq 130 ]]" "--jobs Ctrl-C: exit $rc, wanted 130; output: $(tail -5 slowj.txt)"
check "[[ \"\$(statuses slowj)\" == \"['not run', 'interrupted', 'interrupted']\" ]]" "--jobs Ctrl-C statuses: $(statuses slowj)"
check "! pgrep -f 'compare --resume slowj --worker' > /dev/null" "--jobs Ctrl-C left a job running"
# SIGTERM (what timeout, a batch scheduler or a shutdown sends) stops the study as Ctrl-C does
SIG=TERM interrupted_jobs slowt
check "[[ $rc -eq 130 ]]" "--jobs SIGTERM: exit $rc, wanted 130; output: $(tail -5 slowt.txt)"
check "[[ \"\$(statuses slowt)\" == \"['not run', 'interrupted', 'interrupted']\" ]]" "--jobs SIGTERM statuses: $(statuses slowt)"
check "[[ -s slowt/report.html ]] && ! pgrep -f 'compare --resume slowt --worker' > /dev/null" \
  "--jobs SIGTERM: no report, or a job left running"
# a job that dies (kill -9): the run it held is failed, naming why; job 0 goes on with the rest
interrupted_jobs slowk pkill -9 -f 'compare --resume slowk --worker 1'
check "[[ $rc -eq 130 ]]" "a killed job: exit $rc, wanted 130 (job 0 interrupted after it); output: $(tail -5 slowk.txt)"
check "[[ \"\$(statuses slowk)\" == \"['not run', 'interrupted', 'failed']\" ]]" "a killed job's statuses: $(statuses slowk)"
check "q slowk/results.json \"d['runs'][2]['error']\" | grep -q 'job 1 of the study ended while running it (signal 9'" \
  "a killed job's run does not say why it failed: $(q slowk/results.json "d['runs'][2].get('error')" 2>&1)"

# --- Ctrl-C -----------------------------------------------------------------------------------
"$NL" compare --config "$DATA/slow_study.toml" --jobs 1 --out slow > slow.txt 2>&1 &
pid=$!
for _ in $(seq 1 600); do  # wait until the first run has finished and the second one is training
  # (a progress line "step N/M | loss"; the run's label itself contains "steps=")
  grep -q '\[2/3\]' slow.txt && grep -qE 'step [0-9]+/[0-9]+ \|' <(sed -n '/\[2\/3\]/,$p' slow.txt) && break
  sleep 0.1
done
# while it runs: a snapshot of the study so far, after each run
check "[[ \$(q slow/results.json \"(d['running'], [r['status'] for r in d['runs']])\") == \"(True, ['finished', 'not run', 'not run'])\" ]]" \
  "no snapshot while the study runs: $(q slow/results.json "d.get('running'), [r['status'] for r in d['runs']]" 2>&1)"
check "grep -q 'The study is running: 1 of 3 runs finished so far' slow/summary.txt && [[ -s slow/report.html ]]" \
  "the snapshot's summary does not say the study is running"
kill -INT $pid
wait $pid
rc=$?
check "[[ $rc -eq 130 ]]" "Ctrl-C: exit $rc, wanted 130; output: $(tail -5 slow.txt)"
check "[[ -s slow/report.html && -s slow/results.json ]]" "Ctrl-C: no report of the finished runs"
check "[[ \$(q slow/results.json \"[r['status'] for r in d['runs']]\") == \"['finished', 'interrupted', 'not run']\" ]]" \
  "Ctrl-C statuses: $(q slow/results.json "[r['status'] for r in d['runs']]" 2>&1)"
check "[[ \$(q slow/results.json \"d['interrupted']\") == True ]]" "Ctrl-C: results not marked interrupted"
check "grep -q 'The study was interrupted: 1 of 3 runs finished' slow/summary.txt" "Ctrl-C: summary does not say so"
check "grep -q '\"interrupted\":true' slow/runs/02-*/metrics.jsonl" "Ctrl-C: the interrupted run's metrics lack its summary"

echo "cli_compare: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
