#!/usr/bin/env bash
# cli_data_inputs.sh: your own data everywhere (docs/INSTRUMENTS.md "On your model and your data"). Oracles: `analyze jacobian
# --corpus F` equals `--text` of the window it printed; `analyze dynamics --corpus F` equals the same
# instrument on a token stream of F's bytes (a .bin of uint16 ids); `theory --checkpoint` of a fresh
# `normlab init` checkpoint equals the fresh-model measurement of the same seed on the deterministic
# claims. Every command states its input (terminal and JSON). data.tokens as a stream (windows,
# validation split) and as rows (training and validation rows). Bad input: one message, exit 1.
# Usage: cli_data_inputs.sh path/to/normlab
set -uo pipefail
NL=$(realpath "$1")
W=$(mktemp -d)
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$W"' EXIT
cd "$W"; [[ -n "${KEEP:-}" ]] && echo "work dir: $W"
export OMP_WAIT_POLICY=PASSIVE
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
refuse() {  # name expected-message-fragment command...: exit 1 with one "normlab: error:" line
  local name=$1 want=$2
  shift 2
  "$@" >log.txt 2>&1
  local rc=$?
  if [[ $rc -eq 1 ]] && grep -q "^normlab: error: .*$want" log.txt && [[ $(grep -c "normlab: error" log.txt) -eq 1 ]]; then
    ok
  else
    bad "refusal: $name (exit $rc): $(tail -3 log.txt)"
  fi
}
tiny=(--set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --set model.seq_len=16)
# a corpus of 4000 bytes of text, and the same bytes as a token stream (uint16 little-endian)
python3 - <<'PY'
import struct
text = "".join(f"In the beginning {i} was the word, and the word was with {i * 7 % 13}.\n" for i in range(80))[:4000]
open("corpus.txt", "w").write(text)
open("corpus.bin", "wb").write(b"".join(struct.pack("<H", b) for b in text.encode()))
open("wide.bin", "wb").write(struct.pack("<3H", 1, 300, 2) * 400)
def st(path, tensors):  # tensors: name -> (list of int32, shape)
    import json
    header, data, off = {}, b"", 0
    for name, (vals, shape) in tensors.items():
        raw = struct.pack(f"<{len(vals)}i", *vals)
        header[name] = {"dtype": "I32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
    h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
ids = list(text.encode())
st("stream.safetensors", {"input_ids": (ids, [1, len(ids)])})
# 20 rows of T = 8 with next-byte labels: 18 training rows, 2 validation rows at val_fraction 0.1
rows = [ids[r * 9: r * 9 + 9] for r in range(20)]
st("rows.safetensors", {"input_ids": ([v for r in rows for v in r[:8]], [20, 8]),
                        "labels": ([v for r in rows for v in r[1:]], [20, 8])})
PY

# --- analyze: the input is stated; --corpus equals --text of the same bytes ---------------------
"$NL" analyze jacobian "${tiny[@]}" --corpus corpus.txt --seq-len 8 --json a.json >a.txt 2>&1
check "grep -q \"^input: 8 bytes of corpus 'corpus.txt' (bytes), validation split, offset\" a.txt" "jacobian --corpus input line: $(head -2 a.txt)"
text=$(python3 -c "import json; print(bytes(json.load(open('a.json'))['input_ids']).decode(), end='')")
"$NL" analyze jacobian "${tiny[@]}" --text "$text" --json b.json >b.txt 2>&1
check "grep -q '^input: --text, 8 bytes (UTF-8)' b.txt" "jacobian --text input line: $(head -2 b.txt)"
check "[[ \"\$(jq -S 'del(.input)' a.json)\" == \"\$(jq -S 'del(.input)' b.json)\" ]]" "jacobian: --corpus and --text of the same bytes differ"
"$NL" analyze attention "${tiny[@]}" --corpus corpus.txt --seq-len 8 --json a.json >/dev/null 2>&1
"$NL" analyze attention "${tiny[@]}" --text "$text" --json b.json >/dev/null 2>&1
check "[[ \"\$(jq -S 'del(.input)' a.json)\" == \"\$(jq -S 'del(.input)' b.json)\" ]]" "attention: --corpus and --text of the same bytes differ"
check "[[ \$(jq -r .input a.json) == *\"corpus 'corpus.txt'\"* ]]" "attention --json has no input"
# a token stream gives the same window as the corpus of its bytes
"$NL" analyze attention "${tiny[@]}" --tokens stream.safetensors --seq-len 8 --json c.json >c.txt 2>&1
check "[[ \"\$(jq -c .input_ids a.json)\" == \"\$(jq -c .input_ids c.json)\" ]]" "--tokens stream window != --corpus window"
check "grep -q \"^input: 8 tokens of token stream 'stream.safetensors', validation split\" c.txt" "stream input line: $(head -1 c.txt)"
# the built-in corpus is named when it is used
"$NL" analyze attention "${tiny[@]}" --seq-len 8 >d.txt 2>&1
check "grep -q '^input: 8 bytes of the built-in corpus (data/kjv.txt), validation split' d.txt" "built-in corpus not named: $(head -2 d.txt)"

# --- analyze dynamics: --corpus F equals the token stream of F's bytes ---------------------------
dyn=(analyze dynamics "${tiny[@]}" --seq-len 8 --batches 2 --batch-size 3 --update-steps 2)
"$NL" "${dyn[@]}" --corpus corpus.txt --json e.json >e.txt 2>&1
"$NL" "${dyn[@]}" --tokens corpus.bin --json f.json >f.txt 2>&1
check "[[ \"\$(jq -S 'del(.input, .updates.input)' e.json)\" == \"\$(jq -S 'del(.input, .updates.input)' f.json)\" ]]" "dynamics: --corpus and the stream of its bytes differ"
check "grep -q \"^input: 2 batches of 3 windows of 8 bytes of corpus 'corpus.txt' (bytes), training split\" e.txt" "dynamics input line: $(grep input e.txt)"
check "grep -q \"^update steps: 2 AdamW steps .* of corpus 'corpus.txt'\" e.txt" "dynamics update-steps line: $(grep update e.txt)"
check "[[ \$(jq -r .updates.input f.json) == *\"token stream 'corpus.bin'\"* ]]" "dynamics --json updates.input"
# --text is the measured row; --corpus then feeds the update steps, and says so
"$NL" analyze dynamics "${tiny[@]}" --text "$text" --corpus corpus.txt --update-steps 1 >g.txt 2>&1
check "grep -q '^input: --text, 8 bytes (UTF-8), labels the next tokens' g.txt && grep -q \"^update steps: .*corpus 'corpus.txt'\" g.txt" "dynamics --text with --corpus: $(grep -E 'input|update' g.txt)"

# --- train: a token stream is split and sampled; rows are a dataset with validation rows -------
"$NL" train "${tiny[@]}" --set data.tokens=corpus.bin --set train.steps=4 --set train.batch_size=2 \
  --set train.eval_every=2 --set train.out_dir=r1 >h.txt 2>&1
check "grep -q \"^input: token stream 'corpus.bin': 3600 training and 400 validation tokens\" h.txt" "train stream input: $(grep input h.txt)"
check "[[ \$(grep -c '\"type\":\"val\"' r1/metrics.jsonl) -eq 2 ]]" "train on a stream: no validation loss"
"$NL" train "${tiny[@]}" --set data.corpus=corpus.txt --set train.steps=4 --set train.batch_size=2 \
  --set train.eval_every=2 --set train.out_dir=r2 >i.txt 2>&1
check "[[ \$(grep '\"type\":\"val\"' r1/metrics.jsonl) == \$(grep '\"type\":\"val\"' r2/metrics.jsonl) ]]" "stream of the bytes and the corpus train differently"
check "[[ \$(jq -r 'select(.type==\"summary\").input' r2/metrics.jsonl) == \"corpus 'corpus.txt' (bytes): 3600 training and 400 validation bytes\" ]]" "summary input: $(tail -1 r2/metrics.jsonl)"
# a run directory stands for its checkpoint, and is not mistaken for a Hugging Face directory (whose
# own tokenizer would then be looked for): every instrument on the run directory with --corpus
for inst in dynamics jacobian attention; do
  "$NL" analyze $inst --checkpoint r2 --corpus corpus.txt --seq-len 8 >rd.txt 2>&1
  rc=$?
  check "[[ $rc -eq 0 ]] && grep -q \"^input: .*corpus 'corpus.txt'\" rd.txt" "analyze $inst on a run directory: $(tail -2 rd.txt)"
done
"$NL" train "${tiny[@]}" --set data.tokens=rows.safetensors --set train.steps=3 --set train.batch_size=4 \
  --set train.out_dir=r3 >j.txt 2>&1
check "grep -q \"^input: token file 'rows.safetensors': 20 rows of T = 8 (18 training, 2 validation)\" j.txt" "rows input: $(grep input j.txt)"
check "[[ \$(grep -c '\"type\":\"val\"' r3/metrics.jsonl) -eq 1 ]]" "rows: no validation loss"
# consecutive training rows: steps 1..3 see different rows, so their losses differ
check "[[ \$(jq -r 'select(.type==\"train\").loss' r3/metrics.jsonl | sort -u | wc -l) -eq 3 ]]" "rows: the same batch every step?"

# --- compare: a study on a token stream, its input in results.json and the summary ------------
cat > s.toml <<'TOML'
[study]
name = "stream"
title = "a study on a token stream"
instruments = false
theory = false
[base.model]
d_model = 16
n_heads = 2
n_layers = 2
seq_len = 16
[base.train]
steps = 3
batch_size = 2
checkpoint_every = 0
[base.data]
tokens = "corpus.bin"
[[grid]]
model.placement = ["post", "pre"]
TOML
"$NL" compare --config s.toml --out st >k.txt 2>&1
check "grep -q \"input: token stream 'corpus.bin'\" st/summary.txt" "compare summary has no input: $(tail -5 k.txt)"
check "[[ \$(jq -r '.runs[0].input' st/results.json) == \"token stream 'corpus.bin'\" ]]" "results.json run input"

# a study whose runs start from a user's checkpoint (a run directory) says so beside the input
cat > si.toml <<'TOML'
[study]
name = "from"
title = "a study from a checkpoint"
instruments = false
theory = false
[base.model]
d_model = 16
n_heads = 2
n_layers = 2
seq_len = 16
[base.train]
steps = 2
batch_size = 2
checkpoint_every = 0
init_from = "r2"
[base.data]
corpus = "corpus.txt"
[[grid]]
train.seed = [1, 2]
TOML
"$NL" compare --config si.toml --out sf >l.txt 2>&1
check "[[ \"\$(jq -r '.runs[1].input' sf/results.json)\" == *\"corpus 'corpus.txt'\"*\"; parameters from the checkpoint 'r2'\" ]]" "init_from not stated: $(tail -3 l.txt)"
check "grep -q \"parameters from the checkpoint 'r2'\" sf/summary.txt" "summary.txt does not name the starting checkpoint"

# --- theory --checkpoint: the model and input are stated; deterministic claims equal fresh ------
for p in post pre; do
  "$NL" init --set model.placement=$p --set model.d_model=16 --set model.n_heads=4 --set model.n_layers=3 \
    --set model.seq_len=16 --set model.seed=1337 --out $p.safetensors >/dev/null
  "$NL" theory --checkpoint $p.safetensors --seeds 1 --json c-$p.json >t-$p.txt 2>&1
  check "grep -q \"^model: checkpoint '$p.safetensors': gpt layernorm, 3 layers, d = 16, 4 heads, $p placement\" t-$p.txt" "theory model line: $(head -2 t-$p.txt)"
  check "grep -q '^input (checkpoint .*): windows of 16 bytes of the built-in corpus (data/kjv.txt), validation split' t-$p.txt" "theory input line"
  check "[[ \$(jq '[.[] | select(.verdict == \"skipped\" and (.measured | length) < 10)] | length' c-$p.json) -eq 0 ]]" "a skipped claim without its reason"
  check "[[ \$(jq '[.[] | select(.source == \"Liu et al. 2020\" and .verdict == \"skipped\")] | length' c-$p.json) -eq 1 ]]" "Liu et al. not skipped on one model"
done
"$NL" theory --d-model 16 --layers 3 --deep-layers 3 --seeds 1 --trained-steps 0 --paper-width 16 --json fresh.json >/dev/null 2>&1
same() {  # claim checkpoint-json: the first fresh value (same placement) equals the checkpoint's to 1e-6
  python3 - "$1" "$2" <<'PY'
import json, sys
claim, ck = sys.argv[1], sys.argv[2]
a = [c["mean"] for c in json.load(open(ck)) if c["source"] == claim]
b = [c["mean"] for c in json.load(open("fresh.json")) if c["source"] == claim]
ok = len(a) == 1 and len(b) >= 1 and abs(a[0] - b[0]) <= 1e-6 * max(1.0, abs(b[0]))
print(claim, a, b[:1]) if not ok else None
sys.exit(0 if ok else 1)
PY
}
for c in "000 Thm 2.2" "000 Thm 3.2" "000 Thm 6.3" "000 Thm 3.6"; do check "same '$c' c-post.json" "theory --checkpoint post vs fresh: $c"; done
# a law over widths needs fresh models of several widths: one model skips it, naming the premise
check "[[ \$(jq -r '[.[] | select(.source == \"004 dNorm/dz\")][0].measured' c-post.json) == *widths* ]]" "dNorm/dz not skipped by its premise"
for c in "000 Thm 4.6" "000 Thm 6.4" "002 spectral bounds"; do check "same '$c' c-pre.json" "theory --checkpoint pre vs fresh: $c"; done
check "[[ \$(jq '[.[] | select(.source == \"000 Thm 3.2\")][0].verdict' c-pre.json) == '\"skipped\"' ]]" "a Post-LN claim was not skipped on a Pre-LN checkpoint"
# a claim about LayerNorm itself is measured whatever the placement
check "[[ \$(jq -r '[.[] | select(.source == \"000 Thm 2.2\")][0].verdict' c-pre.json) == exact ]]" "Thm 2.2 not measured on a Pre-LN checkpoint"
# the depth claims hold for any norm kind: an RMSNorm Pre checkpoint answers them (and 004's fake depth,
# whose trend over the interior layers needs 5), not the LayerNorm lemmas
"$NL" init --set model.placement=pre --set model.norm=rmsnorm --set model.d_model=16 --set model.n_heads=4 \
  --set model.n_layers=5 --set model.seq_len=16 --out rms.safetensors >/dev/null
"$NL" theory --checkpoint rms.safetensors --seeds 2 --json c-rms.json >/dev/null 2>&1
verdict() { jq -r --arg s "$1" '[.[] | select(.source == $s)][0].verdict' "$2"; }
for c in "003/004 stream growth" "004 effective depth" "004 Thm 2 Pre-LN Lipschitz" "004 fake depth: layer removal" \
         "004 fake depth: angular distance"; do
  check "[[ \"\$(verdict '$c' c-rms.json)\" != skipped && \"\$(verdict '$c' c-rms.json)\" != null ]]" "an RMSNorm checkpoint did not answer '$c'"
done
check "[[ \"\$(verdict '000 Lemma 2.1' c-rms.json)\" == skipped ]]" "a LayerNorm lemma was measured on an RMSNorm checkpoint"
"$NL" theory --checkpoint post.safetensors --corpus corpus.txt --seeds 1 >u.txt 2>&1
check "grep -q \"windows of 16 bytes of corpus 'corpus.txt' (bytes)\" u.txt" "theory --corpus not stated"

# --- a run's own data is the default input (new users tripped on this): its corpus and tokenizer,
# and another tokenizer is refused (a BPE run through bytes would get ids it never saw)
"$NL" train --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --set model.seq_len=16 \
  --set model.vocab=50257 --set data.tokenizer=gpt2 --set data.corpus=corpus.txt --set train.steps=2 \
  --set train.batch_size=2 --set train.out_dir=bperun -q > /dev/null 2>&1
"$NL" analyze attention --checkpoint bperun --seq-len 8 > own.txt 2>&1
check "grep -q \"^input: 8 tokens of corpus 'corpus.txt' through GPT-2\" own.txt" "analyze of a BPE run did not read the run's corpus and tokenizer: $(grep input own.txt)"
"$NL" theory --checkpoint bperun --seeds 2 > ownt.txt 2>&1
check "grep -q \"windows of 16 tokens of corpus 'corpus.txt' through GPT-2\" ownt.txt" "theory --checkpoint of a BPE run did not read its corpus through its tokenizer"
refuse "bytes for a BPE run (sample)" "read its data as 'gpt2'" "$NL" sample --checkpoint bperun --tokenizer bytes --prompt hi --max-new 1
refuse "bytes for a BPE run (analyze)" "read its data as 'gpt2'" "$NL" analyze dynamics --checkpoint bperun --tokenizer bytes

# the run's first bytes (data.max_bytes) and its validation fraction come with its corpus: the windows
# are the ones it validated on. Oracle: the same analysis given a file of just those first whole lines.
"$NL" train "${tiny[@]}" --set data.corpus=corpus.txt --set data.max_bytes=2000 --set train.steps=1 \
  --set train.batch_size=2 --set train.out_dir=cutrun -q >/dev/null 2>&1
python3 -c "t = open('corpus.txt').read()[:2000]; open('first.txt', 'w').write(t[:t.rindex(chr(10)) + 1])"
"$NL" analyze jacobian --checkpoint cutrun --seq-len 8 --json cut.json >cut.txt 2>&1
"$NL" analyze jacobian --checkpoint cutrun --corpus first.txt --seq-len 8 --json first.json >/dev/null 2>&1
check "grep -q \"^input: 8 bytes of corpus 'corpus.txt', its first 2000 bytes (whole lines) (bytes), validation\" cut.txt" \
  "analyze of a max_bytes run did not read its first bytes: $(grep input: cut.txt)"
check "[[ \"\$(jq -S 'del(.input)' cut.json)\" == \"\$(jq -S 'del(.input)' first.json)\" ]]" \
  "analyze of a max_bytes run differs from the same analysis on a file of its first lines"
"$NL" theory --checkpoint cutrun --seeds 1 >cutt.txt 2>&1
check "grep -q \"windows of 16 bytes of corpus 'corpus.txt', its first 2000 bytes\" cutt.txt" "theory of a max_bytes run did not read its first bytes"
"$NL" train "${tiny[@]}" --set data.corpus=corpus.txt --set data.val_fraction=0.3 --set train.steps=1 \
  --set train.batch_size=2 --set train.out_dir=fracrun -q >/dev/null 2>&1
"$NL" analyze attention --checkpoint fracrun --seq-len 8 >frac.txt 2>&1
check "grep -q \"validation split, offset [0-9]* (of $((4000 * 3 / 10)))\" frac.txt" "analyze did not take the run's val_fraction: $(grep input: frac.txt)"

# a test split (data.test_fraction) moves validation before it; analyze reads the run's validation
# split where the run had it: 4000 bytes, 0.3 validation and 0.2 test give validation 1200 bytes at 2000
"$NL" train "${tiny[@]}" --set data.corpus=corpus.txt --set data.val_fraction=0.3 --set data.test_fraction=0.2 \
  --set train.steps=2 --set train.batch_size=2 --set train.out_dir=testrun >testrun.txt 2>&1
check "grep -q 'test loss [0-9.]*: the final parameters (step 2) on the whole test split' testrun.txt" "train did not score its test split: $(tail -3 testrun.txt)"
check "jq -e 'select(.type == \"summary\") | .test_loss > 0 and .test_tokens > 0' testrun/metrics.jsonl >/dev/null" "the summary has no test loss"
# oracle: the same checkpoint whose config says its validation bytes were 2000..3199 of a file cut there
"$NL" analyze attention --checkpoint testrun --seq-len 8 --json testsplit.json >testsplit.txt 2>&1
head -c 3200 corpus.txt >cut3200.txt
cp -r testrun testrun_cut
jq '.data.corpus = "cut3200.txt" | .data.val_fraction = 0.375 | .data.test_fraction = 0' testrun/config.json >testrun_cut/config.json
"$NL" analyze attention --checkpoint testrun_cut --seq-len 8 --json testcut.json >/dev/null 2>&1
check "grep -q 'validation split, offset [0-9]* (of 1200)' testsplit.txt" "analyze did not read a validation split: $(grep input: testsplit.txt)"
check "[[ \"\$(jq -S 'del(.input)' testsplit.json)\" == \"\$(jq -S 'del(.input)' testcut.json)\" ]]" \
  "analyze of a run with a test split did not read the validation bytes the run had (before its test split)"

# "~/..." that no shell expanded (a quoted argument, an override's value, --opt=~/x) is the home directory
mkdir -p home && cp corpus.txt home/
HOME="$PWD/home" "$NL" train "${tiny[@]}" --set 'data.corpus=~/corpus.txt' --set train.steps=1 --set train.batch_size=2 \
  --set 'train.out_dir=~/tilderun' -q >tilde.txt 2>&1
check "[[ -f home/tilderun/metrics.jsonl ]]" "~ in an override was not the home directory: $(tail -2 tilde.txt)"
HOME="$PWD/home" "$NL" analyze attention --checkpoint '~/tilderun' --seq-len 8 >tilde2.txt 2>&1
check "grep -q '^input: ' tilde2.txt" "a quoted ~ path was not expanded: $(tail -2 tilde2.txt)"

# data.bos: a run whose windows all start with id 256; analyze's windows of its checkpoint start with it too
"$NL" train "${tiny[@]}" --set model.vocab=257 --set data.bos=256 --set data.corpus=corpus.txt --set train.steps=2 \
  --set train.batch_size=2 --set train.out_dir=bosrun >bos.txt 2>&1
check "grep -q 'every window starts with id 256 (data.bos)' bos.txt" "data.bos: the run did not say so: $(tail -2 bos.txt)"
for inst in sinks dynamics; do
  "$NL" analyze $inst --checkpoint bosrun --seq-len 8 --batches 1 --batch-size 2 >bos_$inst.txt 2>&1
  check "grep -q '^input: .*each starting with id 256 as the run.s did' bos_$inst.txt" "analyze $inst: no first token: $(tail -2 bos_$inst.txt)"
done
"$NL" analyze jacobian --checkpoint bosrun --seq-len 8 --json bos_jac.json >bos_jac.txt 2>&1
check "grep -q '^input: .*after id 256 as the run.s windows began' bos_jac.txt" "analyze jacobian: no first token: $(tail -2 bos_jac.txt)"
"$NL" theory --checkpoint bosrun --seeds 1 >bos_theory.txt 2>&1
check "grep -q '^input: every window starts with id 256, as its run.s did' bos_theory.txt" "theory --checkpoint: no first token: $(tail -2 bos_theory.txt)"
"$NL" sample --checkpoint bosrun --prompt "In the" --max-new 20 >bos_sample.txt 2>&1
check "grep -q 'after id 256 (the run.s data.bos)' bos_sample.txt" "sample: the prompt was not read after data.bos: $(tail -2 bos_sample.txt)"
refuse "data.bos outside the vocabulary" "data.bos = 256 is outside the model's vocabulary of 256" \
  "$NL" train "${tiny[@]}" --set data.bos=256 --set train.out_dir=bos_refused

# --- bad input: one message, exit 1 ----------------------------------------------------------
: >empty.txt
refuse "empty corpus" "empty" "$NL" analyze attention "${tiny[@]}" --corpus empty.txt
refuse "missing corpus" "cannot open" "$NL" analyze dynamics "${tiny[@]}" --corpus missing.txt
refuse "stream id out of range" "id 300 is outside the model's vocabulary of 256" "$NL" analyze attention "${tiny[@]}" --tokens wide.bin
refuse "train stream id out of range" "holds id 300" "$NL" train "${tiny[@]}" --set data.tokens=wide.bin --set train.out_dir=r9
refuse "two inputs" "give one input" "$NL" analyze jacobian "${tiny[@]}" --corpus corpus.txt --random
refuse "theory --checkpoint with --d-model" "does not apply with --checkpoint" "$NL" theory --checkpoint post.safetensors --d-model 32
refuse "theory missing checkpoint" "missing.safetensors" "$NL" theory --checkpoint missing.safetensors
refuse "rows in a study" "token file of rows" "$NL" compare --config s.toml --set data.tokens=rows.safetensors --out st2

echo "cli_data_inputs: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
