#!/usr/bin/env bash
# cli_analyze_smoke.sh: every instrument runs from the CLI on fresh models of every placement, norm
# kind and architecture and on a trained checkpoint, and its --json output parses and holds the
# expected sections, and encoder-decoder models take a source-target pair (text or a seq2seq token
# file) and refuse bad input with one clear message. (The numbers themselves are pinned by
# test_analysis and test_encdec_instruments.)
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
      check "sinks $arch $norm $p" streams "$NL" analyze sinks "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
    done
  done
done
# hyper-connected streams (every form): the instruments read the n streams, the theory on a checkpoint
# measures what it can and names the premise that fails for the rest
for form in hc hc_static mhc mhc_lite; do
  cfg=("${tiny[@]}" --set model.norm=rmsnorm --set model.hyper=$form --set model.hyper_streams=3)
  check "jacobian hyper $form" blocks "$NL" analyze jacobian "${cfg[@]}" --seq-len 6
  check "attention hyper $form" per_head "$NL" analyze attention "${cfg[@]}" --seq-len 6
  check "dynamics hyper $form" layers "$NL" analyze dynamics "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
  check "sinks hyper $form" streams "$NL" analyze sinks "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
done
# Attention Residuals (full: a stream per sub-layer): the same instruments, and the depth weights
cfg=("${tiny[@]}" --set model.norm=rmsnorm --set model.hyper=attn_res)
check "jacobian attn_res" blocks "$NL" analyze jacobian "${cfg[@]}" --seq-len 6
check "sinks attn_res" streams "$NL" analyze sinks "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
check "dynamics attn_res" layers "$NL" analyze dynamics "${cfg[@]}" --seq-len 8 --batches 1 --batch-size 2
if python3 -c "
import json; w = json.load(open('out.json'))['layers'][1]['depth_weights']
assert len(w['attn']) == 5 and abs(sum(w['attn']) - 1) < 1e-9 and w['attn'][3] == 0, w"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: attn_res's depth weights in analyze dynamics' JSON"
fi
"$NL" init "${tiny[@]}" --set model.hyper=mhc --set model.hyper_streams=3 --out hyper.safetensors >/dev/null
if timeout 300 "$NL" theory --checkpoint hyper.safetensors --seeds 1 >theory.txt 2>&1 &&
   grep -q "SKIPPED: the claim is about one residual stream; this model carries 3 hyper-connected streams" theory.txt &&
   grep -q "Gu et al. 2024 attention sinks, checkpoint" theory.txt; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: theory --checkpoint on a hyper-connected model"; tail -5 theory.txt
fi
# theory --checkpoint --precision float32: the model's own parameters, the float64-only claims skipped saying so;
# --precision without --checkpoint refused
"$NL" init "${tiny[@]}" --set model.n_layers=3 --out three.safetensors >/dev/null
if timeout 300 "$NL" theory --checkpoint three.safetensors --seeds 1 --precision float32 >theory32.txt 2>&1 &&
   grep -q "^precision: float32" theory32.txt &&
   grep -q "000 Lemma 2.1, checkpoint.*SKIPPED: measured in float64 only" theory32.txt &&
   grep -q "002 rank collapse, checkpoint 'three.safetensors' models\] effect" theory32.txt &&
   ! "$NL" theory --precision float32 --seeds 1 >refused.txt 2>&1 && grep -q "applies with --checkpoint" refused.txt; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: theory --checkpoint --precision float32"; tail -5 theory32.txt refused.txt
fi
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
# --precision float32 reads the checkpoint's own parameters: the same readings to float32 rounding, said so
# (dynamics, sinks; attention below)
for inst in dynamics sinks; do
  for p in float64 float32; do
    "$NL" analyze $inst --checkpoint run/checkpoint.safetensors --seq-len 8 --batches 2 --batch-size 2 \
      $([[ $inst == dynamics ]] && echo --update-steps 2) --precision $p --json ${inst}_$p.json --force >${inst}_$p.txt 2>&1
  done
done
if grep -q "^precision: float32, the model's own parameters" dynamics_float32.txt && python3 - <<'PY'
import json, sys
a, b = json.load(open("dynamics_float64.json")), json.load(open("dynamics_float32.json"))
assert (a["precision"], b["precision"], a["res_floor"], b["res_floor"]) == ("float64", "float32", 0, 1e-5)
for la, lb in zip(a["layers"], b["layers"]):
    for k in ("stream_rms", "attn_branch_ratio", "mlp_branch_ratio", "grad_norm", "residual_rank"):
        assert abs(la[k] - lb[k]) <= 1e-4 * abs(la[k]), (k, la[k], lb[k])
assert a["updates"]["loss_by_step"] == b["updates"]["loss_by_step"], "the update steps train float32 either way"
PY
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: dynamics --precision float32 against float64"; fi
if grep -q "^precision: float32" sinks_float32.txt && python3 - <<'PY'
import json
a, b = json.load(open("sinks_float64.json")), json.load(open("sinks_float32.json"))
assert (a.pop("precision"), b.pop("precision")) == ("float64", "float32")
def same(x, y, at):  # every number to float32 rounding (1e-4 relative), every index and name exactly
    if isinstance(x, dict):
        assert x.keys() == y.keys(), at
        for k in x: same(x[k], y[k], at + "." + k)
    elif isinstance(x, list):
        assert len(x) == len(y), at
        for i, (u, v) in enumerate(zip(x, y)): same(u, v, f"{at}[{i}]")
    elif isinstance(x, float):
        assert abs(x - y) <= 1e-4 * abs(x) + 1e-9, (at, x, y)
    else:
        assert x == y, (at, x, y)
same(a, b, "")
PY
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: sinks --precision float32 against float64"; fi
for p in float64 float32; do
  "$NL" analyze attention --checkpoint run/checkpoint.safetensors --seq-len 8 --precision $p --json attention_$p.json \
    --force >attention_$p.txt 2>&1
done
if grep -q "^precision: float32, the model's own parameters" attention_float32.txt && python3 - <<'PY'
import json
a, b = json.load(open("attention_float64.json")), json.load(open("attention_float32.json"))
assert (a["precision"], b["precision"]) == ("float64", "float32")
assert a["input_ids"] == b["input_ids"] and len(a["per_head"]) == len(b["per_head"]) > 0
for x, y in zip(a["per_head"], b["per_head"]):
    for k in ("norm2", "c_max", "lower_bound", "sigma_q", "sigma_k", "seed_bound"):
        assert (x[k] is None and y[k] is None) or abs(x[k] - y[k]) <= 1e-5 * abs(x[k]) + 1e-9, (k, x[k], y[k])
    assert abs(x["entropy_mean"] - y["entropy_mean"]) <= 1e-5, (x["entropy_mean"], y["entropy_mean"])
    assert x["keys"] == y["keys"] and x["chain_holds"] and y["chain_holds"]
    assert x["bound_verdict"].split(":")[0] == y["bound_verdict"].split(":")[0]
PY
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: attention --precision float32 against float64"; fi
# encoder-decoder models: a source-target pair from text or a seq2seq token file
refuse() {  # name expected-message-fragment command...: exit 1 with one "normlab: error:" line naming the problem
  local name=$1 want=$2
  shift 2
  "$@" >log.txt 2>&1
  local rc=$?
  if [[ $rc -eq 1 ]] && grep -q "^normlab: error: .*$want" log.txt && [[ $(grep -c "normlab: error" log.txt) -eq 1 ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL (refusal): $name (exit $rc)"; tail -3 log.txt
  fi
}
ed=(--set model.arch=encdec --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --set model.dec_layers=3 --set model.seq_len=16)
for p in post pre deepnorm admin; do
  check "attention encdec $p" per_head "$NL" analyze attention "${ed[@]}" --set model.placement=$p --source-text "Hola mundo" --text "Hello w"
  check "jacobian encdec $p" source "$NL" analyze jacobian "${ed[@]}" --set model.placement=$p --source-text "Hola" --text "Hi" --lanczos-k 2
  check "dynamics encdec $p" decoder "$NL" analyze dynamics "${ed[@]}" --set model.placement=$p --source-text "Hola mundo" --text "Hello w"
done
# a padded seq2seq token file (Hugging Face names), written without dependencies: 2 rows, S 6, T 5;
# and a gpt-style one (no source)
python3 - <<'PY'
import json, struct
def tensor(rows):
    return [v for r in rows for v in r], [len(rows), len(rows[0])]
data = {"input_ids": tensor([[72, 111, 108, 97, 257, 0], [72, 105, 257, 0, 0, 0]]),
        "attention_mask": tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]),
        "decoder_input_ids": tensor([[256, 72, 105, 33, 0], [256, 79, 0, 0, 0]]),
        "decoder_attention_mask": tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]),
        "labels": tensor([[72, 105, 33, 257, -100], [79, 257, -100, -100, -100]])}
def safetensors(tensors):
    header, blob = {}, b""
    for name, (vals, shape) in tensors.items():
        raw = struct.pack("<%di" % len(vals), *vals)
        header[name] = {"dtype": "I32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob
open("pairs.safetensors", "wb").write(safetensors(data))
open("plain.safetensors", "wb").write(safetensors({"input_ids": tensor([[72, 105]]), "labels": tensor([[105, 33]])}))
PY
for inst in attention jacobian; do
  check "$inst encdec --tokens" source_ids "$NL" analyze $inst "${ed[@]}" --tokens pairs.safetensors
done
check "dynamics encdec --tokens (padded rows)" encoder "$NL" analyze dynamics "${ed[@]}" --tokens pairs.safetensors
grep -q "source 6 tokens, target 5 tokens" log.txt || { fail=$((fail + 1)); echo "FAIL: dynamics --tokens does not say what it read"; }
"$NL" init "${ed[@]}" --out run-ed.safetensors >/dev/null
check "attention encdec on a checkpoint" model "$NL" analyze attention --checkpoint run-ed.safetensors --source-text "Hola" --text "Hi"
refuse "encdec without a source" "needs a source" "$NL" analyze attention "${ed[@]}" --text "Hello"
refuse "encdec dynamics without a source" "needs a source" "$NL" analyze dynamics "${ed[@]}"
refuse "encdec sinks" "reads a GPT or an encoder" "$NL" analyze sinks "${ed[@]}"
refuse "sinks --seq-len beyond the model" "model seq_len = 16" "$NL" analyze sinks "${tiny[@]}" --seq-len 17
refuse "sinks with too many windows" "at most 4096 windows" "$NL" analyze sinks "${tiny[@]}" --batches 100 --batch-size 100
refuse "encdec source longer than seq_len" "more than the model's seq_len 16" "$NL" analyze jacobian "${ed[@]}" --source-text "a sentence far longer than sixteen bytes" --text "x"
refuse "encdec target longer than seq_len" "more than the model's seq_len 16" "$NL" analyze attention "${ed[@]}" --source-text "x" --text "a target far longer than sixteen bytes"
refuse "encdec --random" "not --random" "$NL" analyze attention "${ed[@]}" --random
refuse "encdec --tokenizer" "does not apply" "$NL" analyze attention "${ed[@]}" --source-text "x" --text "y" --tokenizer gpt2
refuse "--source-text on a gpt" "needs an encoder-decoder model" "$NL" analyze attention "${tiny[@]}" --source-text "x" --text "y"
refuse "encdec token file without a source" "needs a source" "$NL" analyze attention "${ed[@]}" --tokens plain.safetensors
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
