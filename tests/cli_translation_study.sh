#!/usr/bin/env bash
# cli_translation_study.sh: a tiny translation study end to end (no download): `normlab compare
# --config` on a study of 2 placements x 2 seeds of a small encoder-decoder trained on a synthetic
# parallel corpus. Checks that results.json, summary.txt and report.html carry the validation loss
# and BLEU of every run, equal to each run's own metrics.jsonl; that the mean and spread over seeds
# per placement equal a recomputation in Python; that the target unigram entropy and the steps to
# the loss target equal a recomputation in Python; that every run is probed at initialization and
# after training, per stack (layer counts as configured, every number finite, the attention chain
# holding), and that the probe equals `normlab analyze dynamics | attention | jacobian --json` on the
# run's checkpoint and the same validation pairs (a token file written here from the corpus); that
# what the instruments leave out of an encoder-decoder is recorded as skipped with its reason; that
# the summary and the report show the readings per stack; that `normlab report` redoes the outputs
# byte for byte; and that a bad translation study is one message with exit 1 before anything is
# written.
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
n_layers = 2
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
    # what the instruments leave out of an encoder-decoder is said, not left out
    assert set(r["skipped"]) == {"rank_collapse", "token_local_jacobians"}, r["skipped"]
    assert set(r["instruments"]) == {"init", "final"}, r.get("instruments")
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
assert "validation BLEU (mean +- sample standard deviation)" in text and "Not measured, rank_collapse" in text, text
assert "Encoder-decoders: gradient norm at initialization by stack" in text, text
EOF
check "the encoder-decoder probes are per stack, complete and finite" python3 - out <<'EOF'
import json, math, sys
out = sys.argv[1]
res = json.load(open(f"{out}/results.json"))
valid = [(s.rstrip("\n").encode(), t.rstrip("\n").encode()) for s, t in zip(open("corpus/valid.src"), open("corpus/valid.tgt"))]
def finite(x, where):
    if isinstance(x, dict):
        for k, v in x.items(): finite(v, f"{where}.{k}")
    elif isinstance(x, list):
        for k, v in enumerate(x): finite(v, f"{where}[{k}]")
    elif isinstance(x, float):
        assert math.isfinite(x), where
for r in res["runs"]:
    m = r["config"]["model"]
    N, M, d, H = m["n_layers"], m["dec_layers"], m["d_model"], m["n_heads"]
    assert (N, M) == (2, 1), (N, M)
    for when in ("init", "final"):
        p = r["instruments"][when]
        where = f"{r['name']} {when}"
        assert p["arch"] == "encdec", where
        finite(p, where)
        # the input: the first 8 validation pairs as one padded batch, and the first pair alone, cut to
        # probe_seq_len (16) tokens a side
        inp = p["input"]
        assert inp["dynamics_pairs"] == inp["B"] == 8 and inp["pair"]["index"] == 0, inp
        assert inp["S"] == max(len(s) + 1 for s, _ in valid[:8]) and inp["T"] == max(len(t) + 1 for _, t in valid[:8]), inp
        src, tgt = list(valid[0][0][:15]) + [257], [256] + list(valid[0][1][:15])
        assert inp["pair"]["cut_to"] == 16 and (inp["pair"]["source_ids"], inp["pair"]["input_ids"]) == (src, tgt), inp
        assert (inp["pair"]["S"], inp["pair"]["T"]) == (len(src), len(tgt)) and inp["jacobian_full_max_dim"] == 16 * d, inp
        dyn = p["dynamics"]
        assert (dyn["B"], dyn["S"], dyn["T"], dyn["batches"]) == (8, inp["S"], inp["T"], 1), dyn
        assert math.isfinite(dyn["loss"]) and dyn["loss"] > 0, dyn["loss"]
        for stack, n, kinds in (("encoder", N, ["attn", "mlp"]), ("decoder", M, ["attn", "cross", "mlp"])):
            layers = dyn[stack]["layers"]
            assert [l["layer"] for l in layers] == list(range(n)), (where, stack, layers)
            for l in layers:
                assert [s["kind"] for s in l["sublayers"]] == kinds, (where, stack, l)
                assert l["stream_rms"] > 0 and l["grad_norm"] > 0, (where, stack, l)
                for s in l["sublayers"]:
                    assert s["present"] and s["branch_ratio"] > 0 and s["grad_norm"] > 0, (where, stack, s)
            ratio = layers[-1]["grad_norm"] / layers[0]["grad_norm"]
            assert math.isclose(dyn[stack]["grad_norm_last_over_first"], ratio, rel_tol=1e-12), (where, stack)
        # attention: every head of every kind, layers counted within their stack, the bounds holding
        att = p["attention"]
        assert (att["S"], att["T"]) == (inp["pair"]["S"], inp["pair"]["T"]), att
        heads = att["per_head"]
        for stack, kind, n, rows, cols in (("encoder", "self", N, att["S"], att["S"]), ("decoder", "self", M, att["T"], att["T"]),
                                           ("decoder", "cross", M, att["T"], att["S"])):
            hs = [h for h in heads if h["stack"] == stack and h["kind"] == kind]
            assert sorted((h["layer"], h["head"]) for h in hs) == [(l, h) for l in range(n) for h in range(H)], (where, stack, kind)
            for h in hs:
                assert (h["rows"], h["cols"]) == (rows, cols) and h["chain_holds"], (where, h)
                assert h["lower_bound"] - 1e-9 <= h["norm2"] <= math.sqrt(h["c_max"]) + 1e-9 <= math.sqrt(rows) + 2e-9, (where, h)
        assert len(heads) == H * (N + 2 * M), len(heads)
        # the Jacobians: dense, every singular value, descending
        jac = p["jacobian"]
        for name, cols in (("decoder", att["T"] * d), ("source", att["S"] * d)):
            e = jac[name]
            assert (e["rows"], e["cols"]) == (att["T"] * d, cols) and e["dense"] is not None, (where, name)
            sv = e["dense"]["singular_values"]
            assert len(sv) == min(e["rows"], cols) and sv == sorted(sv, reverse=True) and sv[-1] >= 0, (where, name)
            assert e["dense"]["sigma_max"] == sv[0] > 0 and 0 < e["dense"]["rank"] <= len(sv), (where, name)
EOF
# the oracle: `normlab analyze` on each run's checkpoint, on a token file of the same first 8
# validation pairs (Hugging Face's seq2seq names, built here from the corpus) and on the first pair
python3 - <<'EOF'
import json, struct
pairs = [(s.rstrip("\n").encode(), t.rstrip("\n").encode()) for s, t in zip(open("corpus/valid.src"), open("corpus/valid.tgt"))][:8]
BOS, EOS, IGNORE = 256, 257, -100
S = max(len(s) + 1 for s, _ in pairs)
T = max(len(t) + 1 for _, t in pairs)
rows = {"input_ids": [], "attention_mask": [], "decoder_input_ids": [], "decoder_attention_mask": [], "labels": []}
for s, t in pairs:
    src, dec = list(s) + [EOS], [BOS] + list(t)
    rows["input_ids"].append(src + [0] * (S - len(src)))
    rows["attention_mask"].append([1] * len(src) + [0] * (S - len(src)))
    rows["decoder_input_ids"].append(dec + [0] * (T - len(dec)))
    rows["decoder_attention_mask"].append([1] * len(dec) + [0] * (T - len(dec)))
    rows["labels"].append(list(t) + [EOS] + [IGNORE] * (T - len(dec)))
header, blob = {}, b""
for name, m in rows.items():
    data = struct.pack(f"<{len(m) * len(m[0])}i", *[x for row in m for x in row])
    header[name] = {"dtype": "I32", "shape": [len(m), len(m[0])], "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open("pairs.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
EOF
# the study's runs and their probes ran with threads_each threads (compare --jobs): analyze with as
# many, so their sums are in the same order
threads=$(jq '.jobs.threads_each // empty' out/results.json)
[[ -n "$threads" ]] && export OMP_NUM_THREADS=$threads
first_src=$(head -n 1 corpus/valid.src | head -c 15)  # the probe's pair: cut to 16 tokens a side
first_tgt=$(head -n 1 corpus/valid.tgt | head -c 15)
for dir in out/runs/*/; do
  run=$(basename "$dir")
  check "analyze dynamics on $run" bash -c "'$NL' analyze dynamics --checkpoint '$dir/checkpoint.safetensors' --tokens pairs.safetensors --json 'dyn-$run.json' > /dev/null"
done
first=$(basename "$(ls -d out/runs/*/ | head -n 1)")
check "analyze attention on $first" bash -c "'$NL' analyze attention --checkpoint 'out/runs/$first/checkpoint.safetensors' --source-text '$first_src' --text '$first_tgt' --json 'att-$first.json' > /dev/null"
check "analyze jacobian on $first" bash -c "'$NL' analyze jacobian --checkpoint 'out/runs/$first/checkpoint.safetensors' --source-text '$first_src' --text '$first_tgt' --full-max-dim 512 --lanczos-k 0 --json 'jac-$first.json' > /dev/null"
check "the probes after training equal normlab analyze on the checkpoints" python3 - out "$first" <<'EOF'
import json, math, sys
out, first = sys.argv[1], sys.argv[2]
res = json.load(open(f"{out}/results.json"))
def same(a, b, where):  # the same structure; numbers equal within 1e-12 relative
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, sorted(set(a) ^ set(b)))
        for k in a: same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)): same(x, y, f"{where}[{k}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (where, a, b)
    else:
        assert a == b, (where, a, b)
for r in res["runs"]:
    oracle = json.load(open(f"dyn-{r['name']}.json"))
    del oracle["model"], oracle["input"]  # what analyze read, in words (the probe records its input apart)
    same(r["instruments"]["final"]["dynamics"], oracle, f"{r['name']} dynamics")
run = next(r for r in res["runs"] if r["name"] == first)
for key in ("attention", "jacobian"):
    oracle = json.load(open(f"{key[:3]}-{first}.json"))
    for k in ("model", "input_ids", "source_ids", "input"):
        del oracle[k]
    same(run["instruments"]["final"][key], oracle, f"{first} {key}")
EOF
check "summary.txt and the terminal show BLEU and the seeds" python3 - out <<'EOF'
import json, sys
out = sys.argv[1]
res = json.load(open(f"{out}/results.json"))
table = open(f"{out}/summary.txt").read()
log = open(f"{out}/../out.log").read()
assert table.startswith("In short: "), table  # the answer first, then the table
assert "BLEU" in next(l for l in table.splitlines() if l.startswith("run ")), table
for r in res["runs"]:
    row = next(l for l in table.splitlines() if l.startswith(r["label"] + " "))
    assert f"{r['summary']['bleu']:.2f}" in row.split() and f"{r['summary']['val_loss']:.4f}" in row.split(), row
    assert f"BLEU {r['summary']['bleu']:.2f} (greedy, 16 validation pairs)" in log, log
    # the gradient ratio at initialization, per stack: encoder/decoder
    dyn = r["instruments"]["init"]["dynamics"]
    ratio = f"{dyn['encoder']['grad_norm_last_over_first']:.2f}/{dyn['decoder']['grad_norm_last_over_first']:.2f}"
    assert row.split()[-1] == ratio, (row, ratio)
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
for needle in ("Validation BLEU by run", "'Over seeds'", "'Not measured'", "'BLEU mean ± sd'", "function encdecInstruments",
               "gradient norm by ${stack} layer", "Cross-attention (decoder queries over the source)", "encdec-jacobians"):
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
