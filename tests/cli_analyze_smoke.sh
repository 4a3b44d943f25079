#!/usr/bin/env bash
# cli_analyze_smoke.sh: every instrument runs from the CLI on fresh models of every placement, norm
# kind and architecture and on a trained checkpoint, and its --json output parses and holds the
# expected sections. (The numbers themselves are pinned by test_analysis.)
# Usage: cli_analyze_smoke.sh path/to/normlab
set -uo pipefail
NL=$(realpath "$1")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
pass=0
fail=0
check() {  # name json-key command...
  local name=$1 key=$2
  shift 2
  if timeout 300 "$@" --json out.json --force >log.txt 2>&1 && python3 -c "import json,sys; d=json.load(open('out.json')); sys.exit(0 if '$key' in d else 1)"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name"; tail -5 log.txt
  fi
}
tiny=(--set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=16)
for arch in gpt encoder; do
  for norm in layernorm rmsnorm; do
    for p in post pre sandwich prepost deepnorm none; do
      cfg=("${tiny[@]}" --set model.arch=$arch --set model.norm=$norm --set model.placement=$p)
      check "jacobian $arch $norm $p" blocks "$NL" analyze jacobian "${cfg[@]}" --seq-len 6
      check "attention $arch $norm $p" per_head "$NL" analyze attention "${cfg[@]}" --seq-len 6
      check "dynamics $arch $norm $p" layers "$NL" analyze dynamics "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
    done
  done
done
# attention-only models (model.mlp = false), with and without skips, per-layer mixes included
for extra in "--set model.placement=pre" "--set model.placement=post" "--set model.residual=false" \
             "--set model.placement=[\"post\",\"sandwich\"]"; do
  cfg=("${tiny[@]}" --set model.mlp=false $extra)
  check "jacobian attention-only $extra" blocks "$NL" analyze jacobian "${cfg[@]}" --seq-len 6
  check "attention attention-only $extra" per_head "$NL" analyze attention "${cfg[@]}" --seq-len 6
  check "dynamics attention-only $extra" rank_collapse "$NL" analyze dynamics "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
done
"$NL" train -q "${tiny[@]}" --set model.mlp=false --set train.steps=20 --set train.out_dir=run-attn >/dev/null
check "dynamics on a trained attention-only checkpoint" rank_collapse "$NL" analyze dynamics --checkpoint run-attn/checkpoint.safetensors --seq-len 8 --batches 1
"$NL" train -q "${tiny[@]}" --set 'model.placement=["pre","post"]' --set train.steps=20 --set train.out_dir=run >/dev/null
for inst in jacobian attention; do
  check "$inst on a trained checkpoint" model "$NL" analyze $inst --checkpoint run/checkpoint.safetensors --seq-len 6
done
check "dynamics on a trained checkpoint" layers "$NL" analyze dynamics --checkpoint run/checkpoint.safetensors --seq-len 8 --batches 1
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
