#!/usr/bin/env bash
# cli_help.sh: the CLI that teaches: `normlab help CMD`, "did you mean" for misspelt commands,
# options, config keys, sections and study keys, exit code 1 for every command-line error (CLI11's
# own codes are 100+), hints naming what a directory holds, a non-safetensors file named as such,
# options a subcommand does not take left out of its --help, and Ctrl-C in `normlab train` (exit
# 130 with the checkpoint, metrics and summary written; a second Ctrl-C kills at once), and the
# kernel path: `--version` names it, NORMLAB_ISA=avx2 forces it, a bad NORMLAB_ISA is one error.
# Usage: cli_help.sh path/to/normlab
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
# expect_help NEEDLE -- ARGS...: exit 0 and NEEDLE on stdout
expect_help() {
  local needle=$1
  shift 2
  local out rc
  out=$(timeout 60 "$NL" "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 0 && "$out" == *"$needle"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: normlab $* -> exit $rc, wanted 0 with '$needle'; output: ${out:0:400}"
  fi
}

# help
expect_help "sample" -- help
expect_help "normlab help CMD" -- help
expect_help "Usage: normlab train" -- help train
expect_help "--set" -- help train
expect_help "Usage: normlab analyze jacobian" -- help analyze jacobian
expect_help "--no-full" -- help analyze jacobian
expect_help "--top-k" -- help sample
check "[[ \"\$('$NL' help init)\" == \"\$('$NL' init --help)\" ]]" "help init differs from init --help"
expect_error "did you mean 'train'?" -- help trian
expect_error "did you mean 'jacobian'?" -- help analyze jacobain

# did you mean: commands, options, config sections and keys, study keys and names
expect_error "did you mean 'train'?" -- trian
expect_error "did you mean 'sample'?" -- sampel
expect_error "did you mean 'jacobian'?" -- analyze jacobain
expect_error "did you mean '--checkpoint'?" -- grads --chekpoint m.safetensors --tokens t --out g
expect_error "unknown key 'n_layrs'; did you mean 'n_layers'?" -- train --set model.n_layrs=2
expect_error "unknown key 'warmpu_steps'; did you mean 'warmup_steps'?" -- train --set train.warmpu_steps=2
expect_error "unknown section [trian] (expected [model], [train], [data]); did you mean 'train'?" -- train --set trian.lr=1
expect_error "unknown key 'colour'" -- train --set model.colour=red
err=$("$NL" train --set model.colour=red 2>&1)
check "[[ \"\$err\" != *'did you mean'* ]]" "a key far from every valid key got a suggestion: $err"
printf '[study]\nnmae = "x"\n' > typo.toml
expect_error "unknown [study] key 'nmae'" -- compare --config typo.toml
expect_error "did you mean 'name'?" -- compare --config typo.toml
printf '[study]\nname = "x"\n[[grid]]\n"modle.placement" = ["pre"]\n' > typo2.toml
expect_error "did you mean 'model'?" -- compare --config typo2.toml
expect_error "did you mean 'default'?" -- compare --study defualt

# every command-line error is exit 1 with one message (CLI11 returns 105-109 by itself)
expect_error "--checkpoint is required" -- grads --tokens t --out g
expect_error "not expected" -- train --bogus
expect_error "--out" -- init --out
expect_error "max-new" -- sample --checkpoint m --prompt x --max-new lots
expect_error "A subcommand is required" -- analyze
expect_error "not expected" -- analyze dynamics --random   # dynamics does not take --random ...
check "! '$NL' analyze dynamics --help | grep -- '--random' >/dev/null" "analyze dynamics --help offers --random"
check "! '$NL' analyze attention --help | grep -- '--token ' >/dev/null" "analyze attention --help offers --token"
check "'$NL' analyze jacobian --help | grep -- '--token ' >/dev/null" "analyze jacobian --help lacks --token"

# run directories and non-safetensors files where a file is expected
small=(--set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --set model.seq_len=8)
"$NL" train -q "${small[@]}" --set train.steps=2 --set train.out_dir=run >/dev/null || { echo "FAIL: train"; exit 1; }
expect_error "'run' is a run directory; its config is run/config.json" -- train --config run
expect_error "'run' is a run directory" -- grads --checkpoint run --tokens run --out g.safetensors
"$NL" train -q --config run/config.json --set train.steps=1 --set train.out_dir=run2 >/dev/null
rc=$?
check "[[ $rc -eq 0 && -s run2/checkpoint.safetensors ]]" "a run's config.json is not accepted as --config"
echo "hello world, this is text" > x.txt
expect_error "x.txt is not a safetensors file: it begins with the text" -- grads --checkpoint x.txt --tokens x.txt --out g.safetensors
expect_error "x.txt is not a safetensors file" -- sample --checkpoint x.txt --prompt hi

# Ctrl-C in train: stops after the current step, writes checkpoint, metrics and summary, exit 130
"$NL" train "${small[@]}" --set train.steps=1000000 --set train.log_every=1 --set train.out_dir=slow > slow.txt 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -qE '^step +[0-9]+/' slow.txt && break
  sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
check "[[ $rc -eq 130 ]]" "Ctrl-C in train: exit $rc, wanted 130; output: $(tail -3 slow.txt)"
check "[[ -s slow/checkpoint.safetensors ]]" "Ctrl-C in train: no checkpoint"
check "tail -1 slow/metrics.jsonl | grep -q '\"interrupted\":true'" "Ctrl-C in train: no interrupted summary"
check "grep -q 'interrupted after step' slow.txt" "Ctrl-C in train: no message"
steps=$(tail -1 slow/metrics.jsonl | sed 's/.*"steps":\([0-9]*\).*/\1/')
check "[[ \$steps -ge 1 && \$steps -lt 1000000 ]]" "Ctrl-C in train: summary steps '$steps'"
"$NL" sample --checkpoint slow --prompt "In the" --max-new 4 >/dev/null 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "the interrupted run's checkpoint does not load"

# the kernel path (ops/isa.h): --version reports it, NORMLAB_ISA forces it, a bad value is one error
expect_help "kernels: avx" -- --version
NORMLAB_ISA=avx2 expect_help "kernels: avx2 (forced by NORMLAB_ISA=avx2)" -- --version
NORMLAB_ISA=sse9 expect_error "NORMLAB_ISA='sse9' is not a known value" -- init --out m.safetensors
finish cli_help
