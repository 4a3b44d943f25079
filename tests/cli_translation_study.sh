#!/usr/bin/env bash
# cli_translation_study.sh: a tiny translation study end to end (no download): `normlab compare
# --config` on a study of 2 placements x 2 seeds of a small encoder-decoder trained on a synthetic
# parallel corpus. Checks that results.json, summary.txt and report.html carry the validation loss
# and BLEU of every run, equal to each run's own metrics.jsonl; that the mean and spread over seeds
# per placement equal a recomputation in Python; that the target unigram entropy and the steps to
# the loss target equal a recomputation in Python; that what does not apply to a translation run
# (the instruments, for now) is recorded as skipped with its reason; that
# `normlab report` redoes the outputs byte for byte; and that a bad translation study is one message
# with exit 1 before anything is written.
# Usage: cli_translation_study.sh path/to/normlab
set -uo pipefail
# OpenMP threads that sleep instead of spinning while they wait: with spinning ones (libgomp's default)
# a tiny model runs about ten times slower when another process holds one of the machine's cores
export OMP_WAIT_POLICY=PASSIVE
NL=$(realpath "$1")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
fail=0
check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what"
    fail=$((fail + 1))
  fi
}
expect_error() {  # expect_error NEEDLE -- ARGS...: exit 1, stderr containing NEEDLE, no output directory
  local needle=$1
  shift 2
  local err rc
  err=$(timeout 120 "$NL" "$@" --out bad-out 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 1 || "$err" != *"$needle"* || "$err" != *"normlab: error:"* || -e bad-out ]]; then
    echo "FAIL: normlab $* -> exit $rc, wanted 1 with '$needle' and no bad-out/; stderr: $err"
    fail=$((fail + 1))
  fi
  rm -rf bad-out
}

# a copy task over a handful of words: the target is the source
mkdir corpus
perl -e '
  my @w = qw(sun moon star sea fire);
  srand(11);
  for my $split (["train", 300], ["valid", 16], ["test", 4]) {
    open(my $s, ">", "corpus/$split->[0].src") or die; open(my $t, ">", "corpus/$split->[0].tgt") or die;
    for (1 .. $split->[1]) {
      my @x = map { $w[int(rand(@w))] } 1 .. 2 + int(rand(3));
      print $s join(" ", @x), "\n"; print $t join(" ", @x), "\n";
    }
  }'

cat > study.toml <<'EOF'
[study]
name = "tiny-translation"
title = "Tiny translation study"
description = "Post-LN and Pre-LN encoder-decoders on a synthetic copy task, two seeds each."
theory = false

[base.model]
arch = "encdec"
n_layers = 1
dec_layers = 1
d_model = 32
n_heads = 2
d_ff = 64
seq_len = 32

[base.train]
steps = 60
batch_size = 16
lr = 3e-3
lr_schedule = "invsqrt"
warmup_steps = 10
beta2 = 0.98
eval_every = 20
eval_batches = 1
checkpoint_every = 0

[base.data]
parallel = "corpus"
bleu_sentences = 16

[[grid]]
model.placement = ["post", "pre"]
train.seed = [1]
model.seed = [1]

[[grid]]
model.placement = ["post", "pre"]
train.seed = [2]
model.seed = [2]
EOF

check "compare runs the translation study" bash -c "timeout 120 '$NL' compare --config study.toml --out out > out.log 2>&1"
check "the outputs exist" test -s out/results.json -a -s out/report.html -a -s out/summary.txt
check "results.json agrees with every run's metrics.jsonl; seeds recomputed" python3 - out <<'EOF'
import json, math, statistics, sys
from collections import Counter
out = sys.argv[1]
res = json.load(open(f"{out}/results.json"))
runs = res["runs"]
assert len(runs) == 4, len(runs)
assert set(res["study"]["varying"]) == {"model.placement", "train.seed", "model.seed"}, res["study"]["varying"]
assert runs[0]["label"] == "placement=post model.seed=1 train.seed=1", runs[0]["label"]
by_placement = {}
for r in runs:
    assert r["status"] == "finished", (r["name"], r["status"], r.get("error"))
    lines = [json.loads(l) for l in open(f"{out}/runs/{r['name']}/metrics.jsonl")]
    bleu = [l for l in lines if l["type"] == "bleu"]
    val = [l for l in lines if l["type"] == "val"]
    summary = [l for l in lines if l["type"] == "summary"]
    assert len(bleu) == 1 and bleu[0]["sentences"] == 16 and len(summary) == 1, (bleu, summary)
    assert r["summary"]["bleu"] == bleu[0]["bleu"] == r["bleu"]["bleu"], (r["summary"]["bleu"], bleu, r["bleu"])
    assert r["summary"]["val_loss"] == summary[0]["val_loss"] == val[-1]["loss"], (r["summary"], val[-1])
    assert r["val"]["step"] == [l["step"] for l in val] == [20, 40, 60], r["val"]
    assert r["val"]["loss"] == [l["loss"] for l in val]
    assert len(r["train"]["loss"]) == 60 and r["train"]["loss"] == [l["loss"] for l in lines if l["type"] == "train"]
    assert r["task"] == "translation" and r["parallel"]["train_pairs"] == 300 and r["parallel"]["valid_pairs"] == 16
    # the decoder's labels: target bytes and EOS of every training pair
    labels = Counter()
    for line in open("corpus/train.tgt", "rb"):
        labels.update(line.rstrip(b"\n"))
        labels[257] += 1
    n = sum(labels.values())
    entropy = -sum(c / n * math.log(c / n) for c in labels.values())
    assert math.isclose(r["unigram_entropy"], entropy, rel_tol=1e-12) and r["unigram_unit"] == "target byte", r["unigram_entropy"]
    assert math.isclose(r["loss_target"], entropy - 0.5, rel_tol=1e-12)
    # steps to target: the first step whose mean of the last 20 training losses is <= the target
    loss = r["train"]["loss"]
    hits = [r["train"]["step"][i] for i in range(19, len(loss)) if sum(loss[i - 19:i + 1]) / 20 <= r["loss_target"]]
    assert r["steps_to_target"] == (hits[0] if hits else None), (r["steps_to_target"], hits[:1])
    # what does not apply to a translation run is said, not left out
    assert set(r["skipped"]) == {"instruments"}, r["skipped"]
    assert "encoder-decoder" in r["skipped"]["instruments"] and "instruments" not in r
    placement = r["config"]["model"]["placement"][0]
    by_placement.setdefault(placement, []).append(r)
# the copy task is learned a little in 60 steps: the check of BLEU equality is not of zeros only
assert max(r["summary"]["bleu"] for r in runs) > 0, [r["summary"]["bleu"] for r in runs]
groups = res["seed_groups"]
assert [g["setting"] for g in groups] == ["placement=post", "placement=pre"], groups
for g in groups:
    members = by_placement[g["setting"].split("=")[1]]
    assert g["runs"] == [r["name"] for r in members] and g["finished"] == 2
    for key, digits in (("val_loss", 12), ("bleu", 10)):
        values = [r["summary"][key] for r in members]
        st = g[key]
        assert st["n"] == 2 and math.isclose(st["mean"], statistics.mean(values), rel_tol=1e-12, abs_tol=1e-12), (st, values)
        assert math.isclose(st["sd"], statistics.stdev(values), rel_tol=1e-9, abs_tol=1e-12), (st, values)
        assert st["min"] == min(values) and st["max"] == max(values)
text = " ".join(res["summary"])
assert "validation BLEU (mean +- sample standard deviation)" in text and "Not measured, instruments" in text, text
EOF
check "summary.txt and the terminal show BLEU and the seeds" python3 - out <<'EOF'
import json, sys
out = sys.argv[1]
res = json.load(open(f"{out}/results.json"))
table = open(f"{out}/summary.txt").read()
log = open(f"{out}/../out.log").read()
assert "BLEU" in table.splitlines()[0], table
for r in res["runs"]:
    row = next(l for l in table.splitlines() if l.startswith(r["label"] + " "))
    assert f"{r['summary']['bleu']:.2f}" in row.split() and f"{r['summary']['val_loss']:.4f}" in row.split(), row
    assert f"BLEU {r['summary']['bleu']:.2f} (greedy, 16 validation pairs)" in log, log
for g in res["seed_groups"]:
    row = next(l for l in table.splitlines() if l.startswith(g["setting"] + " ") and " val loss " in l)
    assert f"{g['bleu']['mean']:.2f} +- {g['bleu']['sd']:.2f}" in row and f"{g['val_loss']['mean']:.4f}" in row, row
assert table in log.replace("\n- ", "\n"), "the terminal summary differs from summary.txt"
EOF
check "report.html holds the results and draws BLEU and the seeds" python3 - out <<'EOF'
import json, re, sys
out = sys.argv[1]
page = open(f"{out}/report.html", encoding="utf-8").read()
data = re.search(r'<script type="application/json" id="normlab-data">(.*?)</script>', page, re.S).group(1)
assert json.loads(data) == json.load(open(f"{out}/results.json")), "report data != results.json"
for needle in ("Validation BLEU by run", "'Over seeds'", "'Not measured'", "'BLEU mean ± sd'"):
    assert needle in page, needle
EOF
cp out/results.json results.before && cp out/summary.txt summary.before && cp out/report.html report.before
check "normlab report redoes the outputs" bash -c "'$NL' report out > /dev/null"
check "results.json redone byte for byte" cmp -s results.before out/results.json
check "summary.txt redone byte for byte" cmp -s summary.before out/summary.txt
check "report.html redone byte for byte" cmp -s report.before out/report.html

# bad translation studies: one message, exit 1, nothing written
sed -e 's/^arch = "encdec"/arch = "gpt"/' -e '/^dec_layers/d' study.toml > gpt.toml
expect_error 'needs model.arch = "encdec"' -- compare --config gpt.toml
sed 's/^parallel = "corpus"/parallel = "no-such-corpus"/' study.toml > nocorpus.toml
expect_error "is neither a corpus directory" -- compare --config nocorpus.toml
cp -r corpus uneven && head -n 5 corpus/valid.tgt > uneven/valid.tgt
sed 's/^parallel = "corpus"/parallel = "uneven"/' study.toml > uneven.toml
expect_error "valid.tgt" -- compare --config uneven.toml

if [[ $fail -ne 0 ]]; then
  echo "cli_translation_study: $fail failed"
  exit 1
fi
echo "cli_translation_study: all checks passed"
