#!/usr/bin/env bash
# cli_translate.sh: translation end to end on a small synthetic parallel corpus (no download):
# `normlab train` of an encoder-decoder on data.parallel learns (validation loss falls), its
# validation BLEU equals `normlab bleu` of `normlab translate` on the same sentences (the same greedy
# decoding through two paths), beam search runs, and every bad input of a translation run is one
# message with exit 1.
# Usage: cli_translate.sh path/to/normlab
set -uo pipefail
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
expect_error() {  # expect_error NEEDLE -- ARGS...: exit 1 and stderr containing NEEDLE
  local needle=$1
  shift 2
  local err rc
  err=$(timeout 120 "$NL" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 1 || "$err" != *"$needle"* || "$err" != *"normlab: error:"* ]]; then
    echo "FAIL: normlab $* -> exit $rc, wanted 1 with '$needle'; stderr: $err"
    fail=$((fail + 1))
  fi
}

# a copy-and-reverse task: the target is the source's words in reverse order
mkdir corpus
perl -e '
  my @w = qw(alpha beta gamma delta sun moon star sea land fire water stone tree bird fish);
  srand(7);
  for my $split (["train", 400], ["valid", 24], ["test", 24]) {
    open(my $s, ">", "corpus/$split->[0].src") or die; open(my $t, ">", "corpus/$split->[0].tgt") or die;
    for (1 .. $split->[1]) {
      my @x = map { $w[int(rand(@w))] } 1 .. 2 + int(rand(3));
      print $s join(" ", @x), "\n"; print $t join(" ", reverse @x), "\n";
    }
  }'
model=(--set model.arch=encdec --set model.n_layers=2 --set model.dec_layers=2 --set model.d_model=32
       --set model.n_heads=2 --set model.d_ff=64 --set model.seq_len=48 --set data.parallel=corpus)
run=(--set train.steps=600 --set train.batch_size=16 --set train.lr=3e-3 --set train.warmup_steps=10
     --set train.eval_every=75 --set train.eval_batches=2 --set data.bleu_sentences=24)
for placement in post pre; do
  check "train $placement" "$NL" train --quiet "${model[@]}" "${run[@]}" --set model.placement=$placement \
    --set train.out_dir=run-$placement
  check "$placement: validation loss falls" python3 - run-$placement/metrics.jsonl <<'EOF'
import json, sys
val = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"type":"val"' in l]
assert len(val) == 8 and val[-1] < 0.75 * val[0], val
EOF
  head -n 24 corpus/valid.src > first.src
  head -n 24 corpus/valid.tgt > first.tgt
  check "$placement: translate" bash -c "'$NL' translate --checkpoint run-$placement --text-file first.src > hyp.txt"
  check "$placement: BLEU in metrics = normlab bleu of normlab translate" python3 - run-$placement/metrics.jsonl \
      "$("$NL" bleu --hyp hyp.txt --ref first.tgt --json)" <<'EOF'
import json, sys
line = [json.loads(l) for l in open(sys.argv[1]) if '"type":"bleu"' in l]
assert len(line) == 1 and line[0]["sentences"] == 24 and line[0]["bleu"] > 5, line
cli = json.loads(sys.argv[2])["score"]
assert abs(line[0]["bleu"] - cli) < 1e-9, (line[0]["bleu"], cli)
EOF
  check "$placement: beam 4" bash -c "'$NL' translate --checkpoint run-$placement --text-file first.src --beam 4 \
    | wc -l | grep -qx 24"
done

# a run stopped by Ctrl-C ends at once, without the validation BLEU (the greedy decoding of an early
# model runs every sentence to seq_len), saying so, with its checkpoint
"$NL" train "${model[@]}" "${run[@]}" --set train.steps=100000 --set train.log_every=1 --set data.bleu_sentences=400 \
  --set train.out_dir=stopped > stopped.txt 2>&1 &
pid=$!
for _ in $(seq 600); do grep -qE '^step +3/' stopped.txt && break; sleep 0.05; done
kill -INT $pid
wait $pid
rc=$?
check "Ctrl-C: exit $rc (wanted 130), no BLEU, said so" bash -c "[[ $rc -eq 130 ]] && grep -q 'validation BLEU skipped' stopped.txt \
  && ! grep -q '\"type\":\"bleu\"' stopped/metrics.jsonl && [[ -s stopped/checkpoint.safetensors ]]"

# bad input
cp -r corpus uneven && head -n 10 corpus/valid.tgt > uneven/valid.tgt
expect_error "valid.tgt" -- train "${model[@]}" --set data.parallel=uneven --set train.out_dir=r1
cp -r corpus blank && sed -i '3s/.*//' blank/train.src
expect_error "train.src" -- train "${model[@]}" --set data.parallel=blank --set train.out_dir=r2
cp -r corpus nofile && rm nofile/valid.src
expect_error "valid.src" -- train "${model[@]}" --set data.parallel=nofile --set train.out_dir=r3
expect_error "no training pair fits model.seq_len = 4" -- train "${model[@]}" --set model.seq_len=4 --set train.out_dir=r4
expect_error "is neither a corpus directory" -- train "${model[@]}" --set data.parallel=no-such-pair --set train.out_dir=r5
expect_error "needs model.arch = \"encdec\"" -- train --set data.parallel=corpus --set train.out_dir=r6
expect_error "placement \"postln\" is not one of" -- train "${model[@]}" --set model.placement=postln --set train.out_dir=r7
expect_error "data.bleu_sentences = -1" -- train "${model[@]}" --set data.bleu_sentences=-1 --set train.out_dir=r8
expect_error "the model accepts at most 48" -- translate --checkpoint run-pre --text "$(printf 'x%.0s' {1..60})"
expect_error "--beam 0 must be in [1, 64]" -- translate --checkpoint run-pre --text "sun" --beam 0
expect_error "give one of --text or --text-file" -- translate --checkpoint run-pre
"$NL" init --out gpt.safetensors --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 >/dev/null
expect_error "translate needs an encoder-decoder" -- translate --checkpoint gpt.safetensors --text "sun"

if [[ $fail -ne 0 ]]; then
  echo "cli_translate: $fail failed"
  exit 1
fi
echo "cli_translate: all checks passed"
