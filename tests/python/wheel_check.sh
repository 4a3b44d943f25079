#!/usr/bin/env bash
# wheel_check.sh: the installed Python module needs no clone. Builds the module with `pip install`
# from a fresh clone of REPO (the committed tree) into a new venv, deletes that clone, and checks
# from another directory that the module reads its own files (normlab/resources in the wheel): the
# built-in corpus (a run on it), the built-in GPT-2 tokenizer, a built-in study with its HTML report
# (the report page and Chart.js), and that a model trains and answers an instrument. Not part of
# scripts/test.sh (the wheel compiles the whole library again: about 4 minutes on 2 cores); run it
# before a release: bash tests/python/wheel_check.sh [REPO] (default: this clone).
# With --installed PYTHON it runs only the checks, on a module already installed for PYTHON.
set -uo pipefail
if [[ "${1:-}" == "--installed" ]]; then
  py=$2
else
  repo=$(realpath "${1:-$(dirname "$0")/../..}")
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  git clone -q "$repo" "$work/clone" || exit 1
  python3 -m venv "$work/venv" || exit 1
  (cd "$work" && "$work/venv/bin/pip" install -q "$work/clone[tables]") || { echo "wheel_check: pip install failed"; exit 1; }
  rm -rf "$work/clone"  # nothing of the clone is left to read
  py=$work/venv/bin/python
fi
scratch=$(mktemp -d)
cd "$scratch" || exit 1
OMP_WAIT_POLICY=PASSIVE "$py" - <<'EOF'
import json, os, sys
import normlab

failed = []
def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failed.append(name)

res = normlab._core.resource_dir()
check("the installed module reads its own files (normlab/resources)",
      res == os.path.join(os.path.dirname(normlab.__file__), "resources") and os.path.isfile(os.path.join(res, "data", "kjv.txt")),
      res)
r = normlab.train(sets=["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.seq_len=32", "train.steps=20",
                        "train.batch_size=4"], out_dir="run")
check("a run on the built-in corpus trains", r["steps_done"] == 20 and r["last_val_loss"] < 5.6, r)
m = normlab.load("run")
check("an instrument answers", len(m.attention(m.tokenize("In the beginning")).to_pandas()) == 4)
r = normlab.train(sets=["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.seq_len=32", "train.steps=2",
                        "train.batch_size=2", "data.tokenizer=gpt2", "data.max_bytes=200000", "model.vocab=50257"],
                  out_dir="bpe")
check("the built-in GPT-2 tokenizer (a run through it, then its ids)",
      r["steps_done"] == 2 and list(normlab.load("bpe").tokenize("Hello world")) == [15496, 995])
runs = normlab.compare("warmup", out_dir="warmup", sets=["train.steps=10"])
check("a built-in study runs and writes its report with Chart.js",
      len(runs) > 0 and "Chart" in open(os.path.join("warmup", "report.html"), encoding="utf-8").read(), len(runs))
print(f"wheel_check: {len(failed)} failed" if failed else "wheel_check: all passed")
sys.exit(1 if failed else 0)
EOF
rc=$?
rm -rf "$scratch"
exit $rc
