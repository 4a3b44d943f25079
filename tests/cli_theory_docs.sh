#!/usr/bin/env bash
# cli_theory_docs.sh: the theory is in the repository. Every claim name that `normlab theory`
# prints (fresh, trained, --checkpoint), that the study's pretrained claims use and that the report
# shows resolves to a row of docs/THEORY.md (a table row whose first cell starts with the name); no
# output and no printed string in the sources names a document the repository lacks ("seeds/...",
# "../shared"); every terminal table of analyze, theory and compare has a legend. The docs keep in
# step: README.md stays at most 150 lines and lists every docs/*.md page; every file, page and
# heading that README.md or a docs page names or links to exists; docs/MODEL.md's model-config table
# has exactly the model keys a run's config.json holds (the encoder-decoder's aside); a claim whose
# row in docs/SOURCES.md leads with a verdict gets that verdict from `normlab theory`.
# Usage: cli_theory_docs.sh path/to/normlab path/to/repository
set -uo pipefail
NL=$(realpath "$1")
SRC=$(realpath "$2")
DOC="$SRC/docs/THEORY.md"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
export OMP_WAIT_POLICY=PASSIVE
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
# a claim resolves when a table row of docs/THEORY.md starts with "| <name> |" or "| <name> (" 
resolves() {
  python3 - "$DOC" "$1" <<'PY'
import sys
doc, name = open(sys.argv[1]).read().splitlines(), sys.argv[2]
sys.exit(0 if any(l.startswith(f"| {name} |") or l.startswith(f"| {name} (") for l in doc) else 1)
PY
}
check "[[ -s '$DOC' ]]" "docs/THEORY.md missing"
check "[[ -s '$SRC/docs/SOURCES.md' ]]" "docs/SOURCES.md missing"

# --- the claim names of normlab theory, fresh and trained, and on a checkpoint ------------------
"$NL" theory --d-model 16 --layers 2 --deep-layers 3 --seeds 1 --trained-seeds 1 --trained-steps 2 --paper-width 16 \
  --json fresh.json >theory.txt 2>&1
check "[[ \$(jq length fresh.json) -ge 20 ]]" "theory --json has too few claims"
"$NL" init --set model.d_model=16 --set model.n_heads=4 --set model.n_layers=3 --out m.safetensors >/dev/null
"$NL" theory --checkpoint m.safetensors --seeds 1 --json ckpt.json >ckpt.txt 2>&1
names=$( (jq -r '.[].source' fresh.json ckpt.json; grep -o '{"source", "[^"]*"}' "$SRC/src/study/pretrained.cpp" | sed 's/.*, "\(.*\)"}/\1/') | sort -u)
n=0
while IFS= read -r name; do
  n=$((n + 1))
  check "resolves '$name'" "claim '$name' has no row in docs/THEORY.md"
done <<<"$names"
check "[[ $n -ge 20 ]]" "only $n claim names found"
# docs/SOURCES.md's tables say what normlab finds for some claims; where a row leads with a verdict
# (holds / violated, exact / fails, satisfied / counterexample), `normlab theory` must print that
# verdict for that claim (these rows are about single operators, which answer the same at any size)
sources=$(python3 - "$SRC/docs/SOURCES.md" fresh.json <<'PY'
import json, re, sys
verdicts = {}
for c in json.load(open(sys.argv[2])):
    if c["model"] == "fresh":  # (the trained models of this small run learn nothing: void)
        verdicts.setdefault(c["source"], set()).add(c["verdict"])
checked, wrong = 0, []
for line in open(sys.argv[1], encoding="utf-8"):
    cells = [x.strip() for x in line.strip().strip("|").split("|")] if line.startswith("| ") else []
    if len(cells) < 3 or cells[0] in ("name", "---") or cells[0].startswith("---"):
        continue
    said = re.match(r"(holds|violated|exact|fails|satisfied|counterexample)\b", cells[-1])
    if not said or cells[0] not in verdicts:
        continue
    checked += 1
    if verdicts[cells[0]] != {said.group(1)}:
        wrong.append(f"{cells[0]}: SOURCES.md says {said.group(1)}, theory prints {sorted(verdicts[cells[0]])}")
print(f"{checked} row(s) checked" if checked >= 3 and not wrong else f"{checked} row(s) checked: " + "; ".join(wrong))
PY
)
check "[[ \"\$sources\" == *'row(s) checked' ]]" "docs/SOURCES.md and normlab theory disagree (at least 3 rows must be checked): $sources"
# the terminal names each claim as "[name, models]": the same names
check "[[ \$(grep -c '^\[' theory.txt) -eq \$(jq length fresh.json) ]]" "terminal and JSON claim counts differ"

# --- no output or printed string names a document the repository lacks ---------------------------
"$NL" analyze jacobian --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --seq-len 6 >jac.txt 2>&1
"$NL" analyze attention --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --seq-len 6 >att.txt 2>&1
"$NL" analyze dynamics --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=2 --seq-len 6 --batches 1 \
  --batch-size 2 >dyn.txt 2>&1
help=""
for c in "" train grads init export theory analyze "analyze jacobian" "analyze attention" "analyze dynamics" compare report \
         tokenize corpus bleu translate; do
  # shellcheck disable=SC2086
  help+=$("$NL" $c --help 2>&1)
done
echo "$help" >help.txt
for f in theory.txt ckpt.txt fresh.json ckpt.json jac.txt att.txt dyn.txt help.txt; do
  check "! grep -qE 'seeds/[0-9]|\.\./shared' $f" "$f names a document the repository lacks: $(grep -oE '.{30}(seeds/[0-9]|\.\./shared).{10}' $f | head -2)"
done
# ... nor any string literal of the sources and the report page (comments aside)
hits=$(grep -rnE '"[^"]*(seeds/[0-9]|\.\./shared)[^"]*"' "$SRC/src" "$SRC/report" "$SRC/studies" 2>/dev/null | grep -vE '^\S+:\s*//' | head -3)
check "[[ -z \"\$hits\" ]]" "a printed string names a missing document: $hits"
# every docs/ file the outputs name exists
for f in $(cat theory.txt ckpt.txt jac.txt att.txt dyn.txt help.txt | grep -oE 'docs/[A-Za-z_]+\.md' | sort -u); do
  check "[[ -f '$SRC/$f' ]]" "an output names $f, which the repository lacks"
done

# --- every terminal table has a legend ----------------------------------------------------------
for f in jac.txt att.txt dyn.txt; do check "grep -q '^columns: ' $f" "$f: a table without a legend"; done
check "\"$NL\" theory --help | grep 'KIND and VERDICT: identity' >/dev/null" "theory --help has no legend of its rows"
check "grep -q 'SKIPPED: ' ckpt.txt" "theory --checkpoint prints no skipped claims"
cat > s.toml <<'TOML'
[study]
name = "legend"
title = "legend"
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
[[grid]]
model.placement = ["post", "pre"]
TOML
"$NL" compare --config s.toml --out st >cmp.txt 2>&1
for col in "run:" "status:" "train loss:" "val loss:" "diverged at:" "to target:" "tokens/s:" "grad L/1:" "input:"; do
  check "grep -q '$col' st/summary.txt" "the compare summary has no legend for '$col'"
done

# the README and the docs pages: no unfilled placeholder of generated output in any of them; the README
# stays what a newcomer reads in five minutes (at most 150 lines), names the test command CI runs and
# links every docs page; every file and study a page names exists, and so does every page, file and
# heading it links to
check "! grep -qE '^NORMLAB:[A-Z_0-9]+\$' '$SRC/README.md' '$SRC'/docs/*.md" \
  "an unfilled placeholder: $(grep -HE '^NORMLAB:[A-Z_0-9]+$' "$SRC/README.md" "$SRC"/docs/*.md)"
check "[[ \$(wc -l <'$SRC/README.md') -le 150 ]]" "README.md has $(wc -l <"$SRC/README.md") lines, more than 150: move the reference to docs/"
check "grep -F 'bash scripts/test.sh' '$SRC/.ci/run' >/dev/null && grep -F 'bash scripts/test.sh' '$SRC/README.md' >/dev/null" \
  "README.md does not name the test command .ci/run runs (bash scripts/test.sh)"
pages=("$SRC/README.md" "$SRC"/docs/*.md)
check "[[ \${#pages[@]} -ge 10 ]]" "only ${#pages[@]} pages (README.md and docs/*.md)"
for page in "$SRC"/docs/*.md; do
  check "grep -F '](${page#"$SRC"/})' '$SRC/README.md' >/dev/null" "README.md's \"Documentation\" does not list ${page#"$SRC"/}"
done
for page in "${pages[@]}"; do
  for f in $(grep -oE '(configs|studies)/[a-z0-9_-]+\.toml|docs/[A-Za-z_]+\.md|scripts/[a-z_]+\.sh' "$page" | sort -u); do
    check "[[ -f '$SRC/$f' ]]" "${page#"$SRC"/} names $f, which does not exist"
  done
done
# markdown links [text](target): a relative target, from the page's own directory, exists; a
# "#heading" on a .md page (or alone: this page) is one of its headings, as GitHub spells the anchor
links=$(python3 - "$SRC" "${pages[@]}" <<'PY'
import os, re, sys
root = sys.argv[1]
def headings(path):
    text = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.M | re.S)
    out = set()
    for h in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M):
        h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "").lower()
        out.add(re.sub(r"[^\w\- ]", "", h).replace(" ", "-"))
    return out
n = 0
for page in sys.argv[2:]:
    text = re.sub(r"^```.*?^```", "", open(page).read(), flags=re.M | re.S)
    for target in re.findall(r"\[[^\[\]]*\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        n += 1
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        name = os.path.relpath(page, root)
        if not os.path.exists(full):
            print(f"{name} links to {target}, which does not exist")
        elif anchor and full.endswith(".md") and anchor not in headings(full):
            print(f"{name} links to {target}: {os.path.relpath(full, root)} has no heading #{anchor}")
print(f"checked {n}")
PY
)
while IFS= read -r line; do
  [[ -z $line || $line == "checked "* ]] || bad "$line"
done <<<"$links"
nlinks=$(sed -n 's/^checked //p' <<<"$links")
check "[[ '${nlinks:-0}' -ge 40 ]]" "only ${nlinks:-0} links checked in README.md and docs/*.md"

# the model-config table of docs/MODEL.md (the "| `key` |" rows of its section "Config") holds exactly
# the keys normlab writes under "model" in a run's config.json, but the encoder-decoder's (written
# for encdec only; tests/test_model_doc.cpp checks those)
"$NL" train -q --set model.d_model=16 --set model.n_heads=2 --set model.n_layers=1 --set train.steps=1 \
  --set train.batch_size=2 --set train.out_dir=cfg >cfg.txt 2>&1
encdec='^(dec_layers|shared_embeddings|src_vocab)$'
awk '/^## /{s = /^## Config/} s' "$SRC/docs/MODEL.md" | sed -n 's/^| `\([a-z0-9_]*\)` |.*/\1/p' | grep -vE "$encdec" | sort -u >doc_keys.txt
jq -r '.model | keys[]' cfg/config.json 2>/dev/null | grep -vE "$encdec" | sort -u >json_keys.txt
check "[[ \$(wc -l <doc_keys.txt) -ge 30 && \$(wc -l <json_keys.txt) -ge 30 ]]" \
  "too few model keys: $(wc -l <doc_keys.txt) in docs/MODEL.md's config table, $(wc -l <json_keys.txt) in config.json ($(head -3 cfg.txt))"
check "[[ -z \"\$(comm -23 doc_keys.txt json_keys.txt)\" ]]" \
  "docs/MODEL.md's config table has keys normlab does not write in config.json: $(comm -23 doc_keys.txt json_keys.txt | tr '\n' ' ')"
check "[[ -z \"\$(comm -13 doc_keys.txt json_keys.txt)\" ]]" \
  "config.json has model keys docs/MODEL.md's config table lacks: $(comm -13 doc_keys.txt json_keys.txt | tr '\n' ' ')"

echo "cli_theory_docs: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
