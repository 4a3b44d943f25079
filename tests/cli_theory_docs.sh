#!/usr/bin/env bash
# cli_theory_docs.sh: the theory is in the repository. Every claim name that `normlab theory`
# prints (fresh, trained, --checkpoint), that the study's pretrained claims use and that the report
# shows resolves to a row of docs/THEORY.md (a table row whose first cell starts with the name); no
# output and no printed string in the sources names a document the repository lacks ("seeds/...",
# "../shared"); every terminal table of analyze, theory and compare has a legend.
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
check "\"$NL\" theory --help | grep 'VERDICT: HOLDS' >/dev/null" "theory --help has no legend of its rows"
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

# the README: no unfilled placeholder of generated output, and every file and study it points a
# newcomer to exists
check "! grep -qE '^NORMLAB:[A-Z_]+\$' '$SRC/README.md'" "README.md holds an unfilled placeholder: $(grep -E '^NORMLAB:[A-Z_]+$' "$SRC/README.md")"
for f in $(grep -oE '(configs|studies)/[a-z0-9_-]+\.toml|docs/[A-Z]+\.md|scripts/[a-z_]+\.sh' "$SRC/README.md" | sort -u); do
  check "[[ -f '$SRC/$f' ]]" "README.md names $f, which does not exist"
done

echo "cli_theory_docs: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
