#!/usr/bin/env bash
# cli_sample.sh: `normlab sample` end to end: on a byte model (a run directory standing for its
# checkpoint) and on a GPT-2-tokenized model (the tokenizer found through the run's config): the
# output starts with the prompt, greedy equals --temperature 1 --top-k 1, a seed reproduces its
# text, --max-new tokens are made; and the bad inputs: an empty or too long prompt, a non-gpt
# model, out-of-range options (exit 1, one message).
# Usage: cli_sample.sh path/to/normlab
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"

small=(--set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=32)
"$NL" train -q "${small[@]}" --set train.steps=30 --set train.lr=3e-3 --set train.out_dir=bytes >/dev/null ||
  { echo "FAIL: train"; exit 1; }

greedy=$("$NL" sample --checkpoint bytes --prompt "And God said" --max-new 40 2>/dev/null)
rc=$?
check "[[ $rc -eq 0 && \"\$greedy\" == 'And God said'* ]]" "byte sample does not start with the prompt: '$greedy'"
check "[[ \"\$('$NL' sample --checkpoint bytes/checkpoint.safetensors --prompt 'And God said' --max-new 40 --temperature 1 --top-k 1 --seed 5 2>/dev/null)\" == \"\$greedy\" ]]" \
  "top-k 1 differs from greedy"
a=$("$NL" sample --checkpoint bytes --prompt "And" --max-new 30 --temperature 1 --seed 3 --ids 2>/dev/null)
b=$("$NL" sample --checkpoint bytes --prompt "And" --max-new 30 --temperature 1 --seed 3 --ids 2>/dev/null)
c=$("$NL" sample --checkpoint bytes --prompt "And" --max-new 30 --temperature 1 --seed 4 --ids 2>/dev/null)
check "[[ -n \"\$a\" && \"\$a\" == \"\$b\" ]]" "the same seed gave different samples"
check "[[ \"\$a\" != \"\$c\" ]]" "two seeds gave the same 30 sampled bytes"
check "[[ \$(echo \$a | wc -w) -eq 30 ]]" "--max-new 30 made $(echo $a | wc -w) ids"
# the context slides past seq_len (32)
long=$("$NL" sample --checkpoint bytes --prompt "And" --max-new 100 --ids 2>/dev/null)
check "[[ \$(echo \$long | wc -w) -eq 100 ]]" "generation past seq_len stopped early"

# a tokenized model: the run's data.tokenizer (gpt2) reads the prompt and writes the output
for i in $(seq 40); do echo "In the beginning God created the heaven and the earth. And the earth was without form."; done > corpus.txt
"$NL" train -q --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --set model.seq_len=16 \
  --set model.vocab=50257 --set data.tokenizer=gpt2 --set data.corpus=corpus.txt --set train.steps=20 \
  --set train.lr=1e-2 --set train.batch_size=4 --set train.out_dir=tok >/dev/null || { echo "FAIL: train tok"; exit 1; }
out=$("$NL" sample --checkpoint tok --prompt "In the beginning" --max-new 8 2>err.txt)
rc=$?
check "[[ $rc -eq 0 && \"\$out\" == 'In the beginning'* ]]" "token sample does not start with the prompt: '$out'"
check "grep -q 'GPT-2' err.txt && grep -q '3 prompt tokens' err.txt" "the run's tokenizer was not used: $(cat err.txt)"
ids=$("$NL" sample --checkpoint tok --prompt "In the beginning" --max-new 8 --ids 2>/dev/null)
check "[[ \$(echo \$ids | wc -w) -eq 8 ]]" "token sample: $(echo $ids | wc -w) ids, wanted 8"
cp tok/checkpoint.safetensors alone.safetensors  # no run next to it: the tokenizer must be given
expect_error "give --tokenizer" -- sample --checkpoint alone.safetensors --prompt "In the"
"$NL" sample --checkpoint alone.safetensors --tokenizer gpt2 --prompt "In the" --max-new 3 >/dev/null 2>&1
rc=$?
check "[[ $rc -eq 0 ]]" "--tokenizer gpt2 on a bare checkpoint failed"

# bad input
expect_error "--prompt is empty" -- sample --checkpoint bytes --prompt ""
expect_error "longer than the model's context (seq_len) of 32" -- sample --checkpoint bytes --prompt "$(printf 'x%.0s' $(seq 33))"
expect_error "--prompt is required" -- sample --checkpoint bytes
expect_error "--max-new 0 must be in [1, 100000]" -- sample --checkpoint bytes --prompt a --max-new 0
expect_error "--temperature -1 must be in [0, 100]" -- sample --checkpoint bytes --prompt a --temperature -1
expect_error "--top-k 257 must be in [0, 256]" -- sample --checkpoint bytes --prompt a --top-k 257
expect_error "--seed -3 must be >= 0" -- sample --checkpoint bytes --prompt a --seed -3
"$NL" init --set model.arch=encoder --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --out enc.safetensors >/dev/null
expect_error "sample needs a gpt model" -- sample --checkpoint enc.safetensors --prompt a
expect_error "missing.safetensors" -- sample --checkpoint missing.safetensors --prompt a

finish cli_sample
