#!/usr/bin/env bash
# cli_bad_input.sh: every kind of bad input gets one clear message naming the problem and exit
# code 1 -- never a crash, a hang, exit 0, or a lost or overwritten file.
# Usage: cli_bad_input.sh path/to/normlab
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"

# a token file: input_ids and labels int32 (1, 3), written byte by byte
write_tokens() {  # path id0 id1 id2 label0 label1 label2
  perl -e '
    my ($path, @v) = @ARGV;
    my $h = q({"input_ids":{"dtype":"I32","shape":[1,3],"data_offsets":[0,12]},"labels":{"dtype":"I32","shape":[1,3],"data_offsets":[12,24]}});
    $h .= " " x ((8 - length($h) % 8) % 8);
    open(my $f, ">:raw", $path) or die;
    print $f pack("Q<", length($h)), $h, pack("l<6", @v);
  ' "$@"
}

small=(--set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --set model.seq_len=8)
"$NL" init "${small[@]}" --out model.safetensors >/dev/null || { echo "FAIL: init"; exit 1; }
write_tokens good.safetensors 1 2 3 2 3 -100

# config
expect_error "unknown key 'colour'" -- train --set model.colour=red
expect_error "'lr' must be a number" -- train --set train.lr=fast
expect_error "not divisible by model.n_heads" -- train --set model.d_model=30 --set model.n_heads=4
expect_error "unknown section [optim]" -- train --set optim.lr=1
expect_error "must be in [0, 1)" -- train --set model.dropout=1.5
expect_error "model.hyper_streams = 0 must be in [1, 16]" -- train --set model.hyper=hc --set model.hyper_streams=0
expect_error "'hyper' = \"hcc\" is not one of none | hc | hc_static | mhc | mhc_lite" -- train --set model.hyper=hcc
expect_error "placement \"post\" has a norm after the sum" -- train --set model.hyper=mhc --set model.placement=post
expect_error "expected section.key=value" -- train --set lr
expect_error "'precision' = \"fp16\" is not one of fp32 | bf16" -- train --set train.precision=fp16
expect_error "'precision' must be a string" -- train --set train.precision=16
echo 'this is = = not toml' > bad.toml
expect_error "bad.toml' line 1" -- train --config bad.toml
expect_error "cannot open file" -- train --config missing.toml
# corpus
: > empty.txt
expect_error "is empty" -- train --set data.corpus=empty.txt --set train.out_dir=r1
expect_error "cannot open file" -- train --set data.corpus=nope.txt --set train.out_dir=r2
# data.tokenizer
expect_error "data.tokenizer: tokenizer 'no-such-tokenizer': no such file" -- train --set data.tokenizer=no-such-tokenizer --set train.out_dir=r3
expect_error "smaller than the tokenizer's 50257 tokens" -- train --set data.tokenizer=gpt2 --set train.out_dir=r4
expect_error "exclude each other" -- train --set data.tokenizer=gpt2 --set data.tokens=good.safetensors --set train.out_dir=r5
# checkpoints
expect_error "missing.safetensors" -- grads --checkpoint missing.safetensors --tokens good.safetensors --out g.safetensors
head -c 100 model.safetensors > truncated.safetensors
expect_error "truncated.safetensors" -- grads --checkpoint truncated.safetensors --tokens good.safetensors --out g.safetensors
head -c 4000 /dev/urandom > garbage.safetensors
expect_error "garbage.safetensors" -- grads --checkpoint garbage.safetensors --tokens good.safetensors --out g.safetensors
expect_error "no model config" -- grads --checkpoint good.safetensors --tokens good.safetensors --out g.safetensors
# token files
write_tokens oob.safetensors 1 999 3 2 3 -100
expect_error "token id 999" -- grads --checkpoint model.safetensors --tokens oob.safetensors --out g.safetensors
write_tokens badlabel.safetensors 1 2 3 -7 3 -100
expect_error "label -7" -- grads --checkpoint model.safetensors --tokens badlabel.safetensors --out g.safetensors
write_tokens nolabel.safetensors 1 2 3 -100 -100 -100
expect_error "no position has a label" -- grads --checkpoint model.safetensors --tokens nolabel.safetensors --out g.safetensors
# output paths: unwritable, and existing files are never replaced without --force
touch afile
expect_error "afile/x.safetensors" -- grads --checkpoint model.safetensors --tokens good.safetensors --out afile/x.safetensors
expect_error "afile/m.safetensors" -- init --out afile/m.safetensors
before=$(sha256sum model.safetensors)
expect_error "exists" -- init --set model.d_model=32 --out model.safetensors
[[ "$(sha256sum model.safetensors)" == "$before" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: model.safetensors changed"; }
"$NL" grads --checkpoint model.safetensors --tokens good.safetensors --out g.safetensors >/dev/null || { fail=$((fail + 1)); echo "FAIL: grads on good input"; }
expect_error "already exists" -- grads --checkpoint model.safetensors --tokens good.safetensors --out g.safetensors
"$NL" train -q "${small[@]}" --set train.steps=2 --set train.out_dir=run >/dev/null || { fail=$((fail + 1)); echo "FAIL: train"; }
before=$(sha256sum run/metrics.jsonl)
expect_error "already holds a run" -- train -q "${small[@]}" --set train.steps=2 --set train.out_dir=run
[[ "$(sha256sum run/metrics.jsonl)" == "$before" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: run/metrics.jsonl changed"; }
expect_error "afile" -- train -q "${small[@]}" --set train.out_dir=afile/run
# token file longer than the model's seq_len
perl -e '
  my $h = q({"input_ids":{"dtype":"I32","shape":[1,9],"data_offsets":[0,36]},"labels":{"dtype":"I32","shape":[1,9],"data_offsets":[36,72]}});
  $h .= " " x ((8 - length($h) % 8) % 8);
  open(my $f, ">:raw", "long.safetensors") or die;
  print $f pack("Q<", length($h)), $h, pack("l<18", (1) x 18);'
expect_error "exceeds the model's seq_len" -- grads --checkpoint model.safetensors --tokens long.safetensors --out g2.safetensors

# instruments
expect_error "missing.safetensors" -- analyze jacobian --checkpoint missing.safetensors
expect_error "--seq-len 999" -- analyze attention "${small[@]}" --seq-len 999
expect_error "not both" -- analyze jacobian --checkpoint model.safetensors --set model.d_model=8
expect_error "already exists" -- analyze dynamics --checkpoint model.safetensors --json afile
# byte-level masked training needs a mask token beyond the bytes; a headless model has no loss
expect_error "mask token" -- train --set model.arch=encoder --set model.vocab=256 "${small[@]}" --set train.steps=1 --set train.out_dir=enc256
expect_error "no head" -- train --set model.arch=encoder --set model.head=none "${small[@]}" --set train.steps=1 --set train.out_dir=headless
expect_error "no config.json" -- analyze attention --checkpoint .
# ResiDual: never mixed with other methods in one stack; the one-stream instruments refuse it by name
expect_error "cannot be mixed" -- init "${small[@]}" --set model.n_layers=2 --set 'model.placement=["residual","pre"]' --out mixed.safetensors
expect_error "ResiDual" -- analyze jacobian "${small[@]}" --set model.placement=residual --seq-len 4
expect_error "ResiDual" -- analyze dynamics "${small[@]}" --set model.placement=residual --seq-len 4 --batches 1 --batch-size 1
"$NL" init "${small[@]}" --set model.placement=post --out post.safetensors >/dev/null
expect_error "not exactly a GPT-2" -- export --checkpoint post.safetensors --hf out_hf
[[ ! -e out_hf ]] || { echo "FAIL: a refused export created its directory"; fail=$((fail + 1)); }
# muP (a logits multiplier no Hugging Face config holds) is refused by name; a scheme muP is not
# defined for, and an encoder, too
"$NL" init "${small[@]}" --set model.mup_base_width=8 --out mup.safetensors >/dev/null
expect_error "mup_base_width is set" -- export --checkpoint mup.safetensors --hf out_hf
expect_error "scales the init schemes gpt2, normal and xavier" -- init "${small[@]}" --set model.mup_base_width=8 --set model.init=deepnet --out x.safetensors
expect_error "is for arch = \"gpt\"" -- init "${small[@]}" --set model.mup_base_width=8 --set model.arch=encoder --out x.safetensors
expect_error "mup_base_width = -1" -- init "${small[@]}" --set model.mup_base_width=-1 --out x.safetensors
# data-loss class 1 (a multi-file output is all-or-nothing): a model directory's files are replaced
# together or not at all. A config.json that cannot be replaced (here a directory) must leave the old
# weights in place, not a new model with an old config; shards and their index, which an export would
# not replace (and transformers would load instead of it), are refused even with --force.
"$NL" init "${small[@]}" --out pre.safetensors >/dev/null
"$NL" init "${small[@]}" --set model.seed=7 --out pre7.safetensors >/dev/null
"$NL" export --checkpoint pre.safetensors --hf hf_a >/dev/null 2>&1 || { echo "FAIL: export of a GPT-2"; fail=$((fail + 1)); }
rm -f hf_a/config.json && mkdir hf_a/config.json
weights_before=$(md5sum < hf_a/model.safetensors)
expect_error "not a regular file" -- export --checkpoint pre7.safetensors --hf hf_a --force
check "[[ \"\$(md5sum < hf_a/model.safetensors)\" == \"$weights_before\" ]]" "a failed export replaced model.safetensors (a new model beside the old config)"
check "[[ -z \"\$(ls -A hf_a | grep -v -x -e model.safetensors -e config.json)\" ]]" "a failed export left files behind in the directory"
mkdir hf_b && cp hf_a/model.safetensors hf_b/model-00001-of-00002.safetensors && echo '{}' > hf_b/model.safetensors.index.json
expect_error "weights this export would not replace" -- export --checkpoint pre.safetensors --hf hf_b --force
rmdir hf_a/config.json
"$NL" export --checkpoint pre7.safetensors --hf hf_a --force >/dev/null 2>&1
check "[[ \"\$(md5sum < hf_a/model.safetensors)\" != \"$weights_before\" && -s hf_a/config.json && -z \"\$(ls -A hf_a | grep -v -x -e model.safetensors -e config.json)\" ]]" \
  "export --force over a directory did not replace both files cleanly"
# what new users tripped on: a checkpoint given as --config, a study given to train
expect_error "is a model file (safetensors), not a config" -- train --config model.safetensors
printf '[study]\nname = "s"\n[base.model]\nd_model = 16\n[[grid]]\nmodel.placement = ["pre"]\n' > a_study.toml
expect_error "this is a study" -- train --config a_study.toml
# data-loss class 5: one rule for text: invalid UTF-8 is refused wherever text enters, a byte model's
# --text and --text-file included; class 6: a text file far larger than the model can read is refused
# by its size before it is read (a sparse 2 GB file: instant), naming both sizes
printf 'caf\xe9' > latin1.txt
expect_error "--text: invalid UTF-8 at byte offset 3" -- analyze attention --checkpoint model.safetensors --text $'caf\xe9'
expect_error "--text-file 'latin1.txt': invalid UTF-8 at byte offset 3" -- analyze attention --checkpoint model.safetensors --text-file latin1.txt
expect_error "--prompt: invalid UTF-8" -- sample --checkpoint model.safetensors --prompt $'caf\xe9' --max-new 1
truncate -s 2G huge.txt
expect_error "2147483648 bytes, more than the 8 bytes" -- analyze attention --checkpoint model.safetensors --text-file huge.txt
rm -f huge.txt
# data-loss class 4: every error names the file. A checkpoint whose config implies more parameters than
# normlab builds; the Bible cache's info.json without its counts (a copy of the cache, in NORMLAB_CACHE)
python3 - big.safetensors <<'PY'
import json, struct, sys
config = {"d_model": 65536, "n_heads": 64, "n_layers": 4000, "seq_len": 8}
header = json.dumps({"__metadata__": {"config": json.dumps(config)}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header)
PY
expect_error "big.safetensors" -- analyze jacobian --checkpoint big.safetensors
real_cache=${NORMLAB_CACHE:-$HOME/.cache/normlab}
if [[ -f "$real_cache/bible/es-en/info.json" ]]; then
  mkdir -p cache_copy && cp -r "$real_cache/bible" cache_copy/
  python3 -c "
import json, sys
p = 'cache_copy/bible/es-en/info.json'
j = json.load(open(p)); del j['counts']; json.dump(j, open(p, 'w'))"
  err=$(NORMLAB_CACHE=$PWD/cache_copy timeout 120 "$NL" corpus bible 2>&1 >/dev/null)
  check "[[ \"\$err\" == *'es-en/info.json'* ]]" "a damaged Bible cache info.json: the error does not name the file: $err"
fi

# theory options out of range
expect_error "--seeds 0 and --trained-seeds 3 must be in [1, 100]" -- theory --seeds 0
expect_error "--paper-width 7 must be in [8, 1024]" -- theory --paper-width 7

# ---- the defect classes an outside check found -------------------------------------------------
# unchanged FILE SHA: the file still has the checksum taken before
unchanged() {
  [[ "$(sha256sum "$1")" == "$2" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: $1 changed"; }
}
# a checkpoint of the small model with its config metadata replaced by CONFIG (a JSON string, or
# @FILE for the contents of FILE)
with_config() {  # out config
  perl -e '
    my ($out, $cfg) = @ARGV;
    if ($cfg =~ /^@(.*)/) { open(my $c, "<", $1) or die; local $/; $cfg = <$c>; }
    open(my $f, "<:raw", "model.safetensors") or die; local $/; my $b = <$f>;
    my $n = unpack("Q<", substr($b, 0, 8)); my $h = substr($b, 8, $n); my $data = substr($b, 8 + $n);
    $cfg =~ s/(["\\])/\\$1/g;
    $h =~ s/"config":"(?:[^"\\]|\\.)*"/"config":"$cfg"/ or die "no config";
    $h =~ s/\s+$//; $h .= " " x ((8 - length($h) % 8) % 8);
    open(my $o, ">:raw", $out) or die; print $o pack("Q<", length($h)), $h, $data;' "$@"
}
# unbounded work before a limit: a config implying terabytes is refused before allocation (fast);
# a grid of 2^24 combinations is counted, not expanded
with_config huge.safetensors '{"d_model":65536,"n_heads":1,"n_layers":4096,"vocab":16777216,"seq_len":1048576}'
expect_error "parameters" -- analyze jacobian --checkpoint huge.safetensors
{ echo '[base.train]'; echo 'steps = 1'; echo '[[grid]]'
  for i in $(seq 1 24); do echo "train.seed$i = [1, 2]"; done; } > big_grid.toml
sed -i 's/train.seed\([0-9]*\)/model.k\1/' big_grid.toml
expect_error "more than 256 runs" -- compare --config big_grid.toml --out big_grid_out
# unbounded recursion: JSON nested 200,000 deep in a header, the config metadata, a results.json
perl -e 'my $d = "[" x 200000 . "]" x 200000; my $h = qq({"a":$d});
  open(my $o, ">:raw", "deep.safetensors") or die; print $o pack("Q<", length($h)), $h;'
expect_error "nested deeper than 512 levels" -- analyze jacobian --checkpoint deep.safetensors
perl -e 'print "{\"d_model\":" . "[" x 200000 . "]" x 200000 . "}"' > deepcfg.json
with_config deepcfg.safetensors @deepcfg.json
expect_error "nested deeper than 512 levels" -- analyze jacobian --checkpoint deepcfg.safetensors
mkdir -p deepstudy && perl -e 'print "{\"study\":{},\"runs\":" . "[" x 200000 . "]" x 200000 . "}"' > deepstudy/results.json
before=$(sha256sum deepstudy/results.json)
expect_error "nested deeper than 512 levels" -- report deepstudy
unchanged deepstudy/results.json "$before"
# undefined behaviour: integers out of range are named, never wrapped or converted with UB
expect_error "out of range" -- init --set model.d_model=1e19 --out ub1.safetensors
expect_error "out of range" -- init --set model.d_model=1e300 --out ub2.safetensors
expect_error "out of range" -- init --set model.n_layers=4294967312 --out ub3.safetensors
printf '[study]\nprobe_seq_len = 4294967312\n' > ub.toml
expect_error "probe_seq_len = 4294967312" -- compare --config ub.toml --out ub_out
printf '[model]\nd_model = "\xc3\x28"\n' > badutf8.toml
expect_error "invalid UTF-8" -- init --config badutf8.toml --out u.safetensors
printf '[model]\n\xf0\x9f\x98 = 1\n' > badutf8b.toml
expect_error "invalid UTF-8" -- init --config badutf8b.toml --out u.safetensors
# valid UTF-8 that makes Debian's toml++ 3.3.0 reach __builtin_unreachable (upstream #190, #295)
printf 's = """\\\n\xc2\xa7"""\n' > toml190.toml
expect_error "after a line-ending backslash" -- init --config toml190.toml --out u.safetensors
printf '[model]\n\xcc\xaa = 1\n' > toml295.toml
expect_error "non-ASCII character outside a string" -- init --config toml295.toml --out u.safetensors
printf '[model]\nd_model = 1"\xc2\xa7"\n' > tomlquote.toml
expect_error "quote inside a bare key or value" -- init --config tomlquote.toml --out u.safetensors
# inputs that block: a FIFO as config, corpus, checkpoint, token file or text file is refused
mkfifo fifo
expect_error "FIFO" -- init --config fifo --out f.safetensors
expect_error "FIFO" -- train --set data.corpus=fifo --set train.out_dir=rf
expect_error "FIFO" -- analyze jacobian --checkpoint fifo
expect_error "FIFO" -- grads --checkpoint model.safetensors --tokens fifo --out g3.safetensors
expect_error "FIFO" -- tokenize --tokenizer gpt2 --text-file fifo
# silent acceptance: a directory as --config, an empty [[grid]], --token out of range, NaN
# weights, trailing bytes in a safetensors file
mkdir -p adir
expect_error "is a directory" -- init --config adir --out d.safetensors
printf '[base.train]\nsteps = 1\n[[grid]]\n' > empty_grid.toml
expect_error "grid 1 is empty" -- compare --config empty_grid.toml --out eg_out
[[ ! -e eg_out ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: empty grid wrote eg_out"; }
expect_error "--token 999 is outside" -- analyze jacobian --checkpoint model.safetensors --seq-len 4 --token 999
perl -e '
  open(my $f, "<:raw", "model.safetensors") or die; local $/; my $b = <$f>;
  my $n = unpack("Q<", substr($b, 0, 8)); substr($b, 8 + $n, 4) = pack("f<", "NaN" + 0);
  open(my $o, ">:raw", "nan.safetensors") or die; print $o $b;'
expect_error "non-finite value" -- analyze jacobian --checkpoint nan.safetensors --seq-len 4
cp model.safetensors trailing.safetensors && printf 'junk' >> trailing.safetensors
expect_error "trailing bytes" -- analyze jacobian --checkpoint trailing.safetensors --seq-len 4
# failures reported as success or leaving debris: a full disk (a 64 kB tmpfs, if we may mount one)
# gives exit 1 naming the path and the reason, and leaves no temporary file, config.json or metrics
full=""
if mkdir -p full && mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  full=full; head -c 70000 /dev/zero > full/filler 2>/dev/null  # fills it
  trap 'umount "$W/full" 2>/dev/null; rm -rf "$W"' EXIT
fi
if [[ -n "$full" ]]; then
  expect_error "No space left on device" -- init "${small[@]}" --set model.d_model=64 --out full/m.safetensors
  expect_error "No space left on device" -- analyze jacobian --checkpoint model.safetensors --seq-len 4 --json full/j.json
  expect_error "full/run" -- train -q "${small[@]}" --set model.d_model=64 --set train.steps=2 --set train.out_dir=full/run
  leftovers=$(find full -name '*.tmp*' -o -name config.json -o -name metrics.jsonl | wc -l)
  [[ $leftovers -eq 0 && ! -e full/j.json ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: debris on the full disk: $(ls -R full)"; }
else  # (/dev/full cannot stand in: the atomic writer writes beside the target, never through a link)
  echo "SKIP: the full-disk checks need a tmpfs (mount -t tmpfs, as root)"
fi
# inputs changed on failure: a foreign config.json in out_dir is not replaced; report on a
# results.json the summary cannot read changes nothing
mkdir -p foreign && echo '{"mine": true}' > foreign/config.json
before=$(sha256sum foreign/config.json)
expect_error "holds a config.json but no run" -- train -q "${small[@]}" --set train.steps=1 --set train.out_dir=foreign
unchanged foreign/config.json "$before"
mkdir -p badstudy && echo '{"study": {"title": "x"}, "runs": [{"label": "a"}]}' > badstudy/results.json
before=$(sha256sum badstudy/results.json)
expect_error "badstudy/results.json" -- report badstudy
unchanged badstudy/results.json "$before"
[[ ! -e badstudy/report.html && ! -e badstudy/summary.txt ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: report wrote files before failing"; }

# found by the fuzzers (fuzz/, tests/fuzz_smoke.sh; each input also in fuzz/corpus/*/regress-*)
# a layer count of 2^31 - 1 was walked layer by layer (a hang) before its range was checked
expect_error "model.n_layers = 2147473648 must be in [1, 4096]" -- init --set model.n_layers=2147473648 --out nl.safetensors
printf '{"arch":"gpt","n_layers":2147473648,"placement":["pre"]}' > nlcfg.json
with_config nlcfg.safetensors @nlcfg.json
expect_error "must be in [1, 4096]" -- analyze jacobian --checkpoint nlcfg.safetensors
# a token stream holding id 2^31 - 1 overflowed "largest id + 1" (signed overflow: UB)
perl -e '
  my $h = q({"input_ids":{"dtype":"I32","shape":[40],"data_offsets":[0,160]}});
  $h .= " " x ((8 - length($h) % 8) % 8);
  open(my $f, ">:raw", "bigid.safetensors") or die;
  print $f pack("Q<", length($h)), $h, pack("l<40", 2147483647, 1 .. 39);'
expect_error "id 2147483647 at position 0 is beyond the largest vocabulary" -- train -q "${small[@]}" --set data.tokens=bigid.safetensors --set train.out_dir=rbig
# a tokenizer.json whose ids reach 2^31 - 1 (a table of that many entries was allocated: 64 GB)
printf '{"model":{"type":"WordPiece","vocab":{"[UNK]":0,"a":2147483647}},"pre_tokenizer":{"type":"BertPreTokenizer"}}' > bigtok.json
expect_error "outside [0, 2147483646]" -- tokenize --tokenizer bigtok.json --text a
printf '{"model":{"type":"WordPiece","vocab":{"[UNK]":0,"a":2147483646}},"pre_tokenizer":{"type":"BertPreTokenizer"}}' > sparsetok.json
# (a 4 GB bound on the process; AddressSanitizer reserves terabytes of address space for its shadow
# memory, so under it `ulimit -v` stops the binary before main and its allocator enforces the bound)
if [[ "$(ldd "$NL")" == *libasan* ]]; then  # (not `| grep -q`: under pipefail its early exit fails ldd)
  within_4gb() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=4000:hard_rss_limit_mb=4000" "$@"; }
else
  within_4gb() { (ulimit -v 4000000; "$@"); }
fi
check '[[ "$(within_4gb "$NL" tokenize --tokenizer sparsetok.json --text "a a" 2>&1)" == *2147483646* ]]' \
  "a tokenizer with sparse ids up to 2^31 - 2 tokenizes in little memory"
# a corpus that is one 40 MB word to GPT-2's pre-tokenizer: its BPE merge would need ~3.8 GB, more than
# the 4 GB bound leaves; refused before the merge allocates, naming the file and the word, not "out of
# memory (the model or batch is too large)" after minutes (the same holds for a 2 GB word and 24 GB)
if [[ "$(ldd "$NL")" != *libasan* ]]; then
  head -c 40000000 /dev/zero | tr '\0' a > oneword.txt
  err=$(within_4gb "$NL" train -q "${small[@]}" --set data.corpus=oneword.txt --set data.tokenizer=gpt2 --set model.vocab=50257 \
        --set train.out_dir=rword 2>&1)
  rc=$?
  check '[[ $rc -eq 1 && "$err" == *"oneword.txt"*"a word of 40000000 bytes"*"split the text"* && ! -e rword ]]' \
    "a corpus of one 40 MB word is refused before its merge allocates: $err"
  rm -f oneword.txt
fi
# a model larger than the memory left: refused before its parameters are allocated, with what it needs
# and what there is (analyze holds it in double with gradients: 16 bytes a parameter, 6.4 GB here)
if [[ "$(ldd "$NL")" != *libasan* ]]; then
  err=$(within_4gb "$NL" analyze dynamics --set model.d_model=2048 --set model.n_heads=16 --set model.n_layers=8 2>&1)
  rc=$?
  check '[[ $rc -eq 1 && "$err" == *"parameters in double with their gradients needs"*"GiB of memory; this machine has"*"available"* ]]' \
    "a model larger than the memory left is refused before it is allocated: $err"
fi
# a --set key with line breaks: its "unknown key" line was parsed back out of a joined message
expect_error "unknown key 'a" -- init --set $'model.a\n\nb=1' --out nl2.safetensors
# a section that is not a table read as an empty one: every default, silently
printf 'model = 5\n' > nottable.toml
expect_error "[model]: expected a table of keys, not a number" -- init --config nottable.toml --out nt.safetensors

# a GGUF of 600,000 tensor infos and no data: refused in seconds (each name was compared with every
# earlier one: 13 minutes), naming what is wrong
python3 - <<'PY'
import struct
n = 600000
with open("many.gguf", "wb") as f:
    f.write(b"GGUF" + struct.pack("<IQQ", 3, n, 0))
    for i in range(n):
        name = f"t{i}".encode()
        f.write(struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 32, 0, 128 * i))
PY
start=$SECONDS
expect_error "many.gguf" -- gguf many.gguf
(( SECONDS - start < 30 )) && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: 600,000 tensor infos took $((SECONDS - start)) s"; }
rm -f many.gguf

# GGUF tokenizers that cannot tokenize: an empty token list (was accepted: every text gave no ids)
# and a NaN SentencePiece score (the merge order undefined), each refused naming the key
python3 - <<'PY'
import struct
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
def kv_str(k, v): return s(k) + struct.pack("<I", 8) + s(v)
def kv_strings(k, vals): return s(k) + struct.pack("<IIQ", 9, 8, len(vals)) + b"".join(s(v) for v in vals)
def kv_floats(k, vals): return s(k) + struct.pack("<IIQ", 9, 6, len(vals)) + b"".join(struct.pack("<f", v) for v in vals)
def write(name, kvs):
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    open(name, "wb").write(body + b"\0" * (-len(body) % 32))
arch = kv_str("general.architecture", "llama")
write("empty_tokens.gguf", [arch, kv_str("tokenizer.ggml.model", "gpt2"), kv_strings("tokenizer.ggml.tokens", []),
                            kv_strings("tokenizer.ggml.merges", [])])
write("nan_scores.gguf", [arch, kv_str("tokenizer.ggml.model", "llama"), kv_strings("tokenizer.ggml.tokens", ["<unk>", "a", "b"]),
                          kv_floats("tokenizer.ggml.scores", [0.0, float("nan"), -1.0])])
PY
expect_error "tokenizer.ggml.tokens is empty" -- tokenize --tokenizer empty_tokens.gguf --text hi
expect_error "tokenizer.ggml.scores[1] (token 'a') is nan" -- tokenize --tokenizer nan_scores.gguf --text ab
# a llama GGUF whose head size is odd (12 over 4 heads): RoPE's pairs cannot hold it (its q and k rows
# were left zero), refused before any tensor is read
python3 - <<'PY'
import struct
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
def kv_str(k, v): return s(k) + struct.pack("<I", 8) + s(v)
def kv_u32(k, v): return s(k) + struct.pack("<II", 4, v)
kvs = [kv_str("general.architecture", "llama"), kv_u32("llama.embedding_length", 12), kv_u32("llama.attention.head_count", 4),
       kv_u32("llama.block_count", 1), kv_u32("llama.context_length", 16), kv_u32("llama.feed_forward_length", 8)]
body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
open("odd_head.gguf", "wb").write(body + b"\0" * (-len(body) % 32))
PY
expect_error "the head size is 3 (embedding_length 12 over head_count 4)" -- analyze dynamics --checkpoint odd_head.gguf
# a Gemma 3 directory whose local RoPE base is 0 (read as "one base": its local layers would run at the
# global base) is refused by name, before its weights are read
mkdir -p gemma3_base0
echo '{"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 48, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "intermediate_size": 80, "vocab_size": 300,
  "max_position_embeddings": 32, "rope_local_base_freq": 0, "rope_theta": 1000000.0, "sliding_window": 16,
  "query_pre_attn_scalar": 12}' > gemma3_base0/config.json
python3 -c "import struct; h = b'{}      '; open('gemma3_base0/model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h)"
expect_error '"rope_local_base_freq" = 0 is not supported' -- analyze dynamics --checkpoint gemma3_base0

# a SmolLM2-1.7B-shaped config.json with no weights beside it: the shape is accepted (1.7 B parameters
# are within normlab's cap; seq_len is capped where one sequence's activations stay within the limit,
# 8,192 would imply 258 GB), and the refusal names the missing weights before any parameter is
# allocated (6.8 GB of float32 zeros before: here within 4 GB)
mkdir -p big17
echo '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 24,
  "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 49152,
  "max_position_embeddings": 8192, "rope_theta": 130000, "rms_norm_eps": 1e-5, "tie_word_embeddings": true}' > big17/config.json
python3 -c "import struct; h = b'{}      '; open('big17/model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h)"
err=$(within_4gb "$NL" analyze dynamics --checkpoint big17 2>&1)
rc=$?
check '[[ $rc -eq 1 && "$err" == *"missing tensor"*"embed_tokens.weight"* ]]' \
  "a 1.7 B config.json without weights: the missing weights named, nothing allocated: $err"

finish cli_bad_input
