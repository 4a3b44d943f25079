"""docs_examples.py: every example in README.md and docs/*.md, run as a reader would type it.

    python tests/docs_examples.py --src REPO --build BUILD --workdir DIR [--limit SECONDS]

An example is a fenced block marked ``sh`` or ``python``. Each runs in DIR, laid out as the repository
(build/, configs/, data/, docs/, python/, scripts/, studies/ linked to the real ones), with the files an
example names as a placeholder made first (mytext.txt, C.toml, X.safetensors, path/to/hf-model, runs/x,
...: ``make_fixtures``; the Hugging Face directory is the cached all-MiniLM-L6-v2 and SmolLM2 the cached
GGUF file, both fetched by the test setup; without them those examples are skipped, saying why).

- A ``sh`` block runs line by line (a trailing backslash continues a line; ``NAME=$(...)`` is kept for
  the block's later lines). In a block with ``$ `` prompts, the prompted lines are the commands and the
  next lines their output: the first output line must appear in what the command prints. A line with
  ``[`` options or ``a|b`` alternatives is a synopsis: every ``--option`` it names must be one that
  ``normlab help`` lists for that command.
- A ``python`` block runs statement by statement in one interpreter per page (a page's blocks build on
  each other), with the module built in BUILD; a statement's time limit is five times a command's (a
  statement's result is often the next one's input: only training, studies, the theory table and a
  full Jacobian should reach it; the longest that completes, a 16-token Jacobian, takes ~10 s).
- Every command must succeed. A command still running after --limit seconds (a training run, a study)
  is stopped with Ctrl-C, as a user would, and must then end as normlab's stopped commands do (exit
  130 with its checkpoint and results written, or ended by the signal where there is nothing to save;
  a Python call raises KeyboardInterrupt): it started, read its arguments and worked; the examples
  after it read what it left.
- Not run, with the reason printed (``NOT_RUN``): ``bash scripts/test.sh`` (the command that runs this
  test), ``bash scripts/run.sh`` (the setup and build that ran before this test, then ``build/normlab``,
  which STUDIES.md's first example runs), ``pip install .`` (tests/python/wheel_check.sh installs the
  wheel into a fresh environment).
- mpirun runs as root (the test machines) with Open MPI's consent variables, and oversubscribed.
"""
from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

NOT_RUN = {
    "bash scripts/test.sh": "the test command itself: this test is one of its tests",
    "bash scripts/run.sh": "the setup and build that ran before this test, then build/normlab (STUDIES.md's first example)",
    "pip install .": "installs into the current environment: tests/python/wheel_check.sh installs the wheel into a fresh one",
}
# a command stopped by Ctrl-C: 130 where normlab stops and saves (training, studies), or ended by the
# signal itself (a shell's 130) where there is nothing to save
STOPPED = (130, -signal.SIGINT)

PY_DRIVER = r"""
import ast, json, os, signal, sys, threading, traceback
blocks, limit, not_run = json.load(open(sys.argv[1])), float(sys.argv[2]), json.loads(sys.argv[3])
ns = {"__name__": "__main__"}
failed = 0
for where, code in blocks:
    for node in ast.parse(code).body:
        stmt = ast.get_source_segment(code, node)
        if stmt in not_run:
            print(f"SKIP {where}: {stmt} ({not_run[stmt]})")
            continue
        timer = threading.Timer(limit, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        def hung(stmt=stmt, where=where):
            print(f"FAIL {where}: {stmt.splitlines()[0]} did not stop within 120 s of Ctrl-C", flush=True)
            os._exit(3)
        watchdog = threading.Timer(limit + 120, hung)
        watchdog.start()
        t0 = __import__("time").time()
        try:
            exec(compile(ast.Module([node], []), where, "exec"), ns)
            print(f"PASS {where}: {stmt.splitlines()[0]} ({__import__('time').time() - t0:.1f} s)")
        except KeyboardInterrupt:
            print(f"PASS {where}: {stmt.splitlines()[0]} (stopped by Ctrl-C after {limit:.0f} s; "
                  f"{__import__('time').time() - t0:.1f} s)")
        except Exception:
            failed += 1
            print(f"FAIL {where}: {stmt}\n{traceback.format_exc()}")
        finally:
            timer.cancel()
            watchdog.cancel()
sys.exit(1 if failed else 0)
"""


def blocks_of(page: str) -> list:
    """(language, first line number, text) of every sh / python fenced block."""
    out, lines = [], open(page, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if m.group(1) in ("sh", "python"):
            out.append((m.group(1), i + 2, "\n".join(lines[i + 1:j])))
        i = j + 1
    return out


def commands_of(text: str) -> list:
    """(command, first output line or None) of a sh block."""
    raw = text.splitlines()
    prompted = any(line.startswith("$ ") for line in raw)
    joined, cur = [], ""
    for line in raw:
        cur = cur + line.strip() if cur else line
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        joined.append(cur)
        cur = ""
    cmds = []
    for k, line in enumerate(joined):
        if prompted:
            if line.startswith("$ "):
                nxt = joined[k + 1] if k + 1 < len(joined) and not joined[k + 1].startswith("$ ") else None
                cmds.append((line[2:], nxt))
        elif line.strip() and not line.lstrip().startswith("#"):
            cmds.append((line, None))
    return cmds


def strip_comment(cmd: str) -> str:
    """The command without a trailing '# ...' comment (a '#' outside quotes after a space)."""
    quote = None
    for i, ch in enumerate(cmd):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or cmd[i - 1].isspace()):
            return cmd[:i].rstrip()
    return cmd


def is_synopsis(cmd: str) -> bool:
    return bool(re.search(r"\[--|\[same|\.\.\. |\w\|\w", strip_comment(cmd)))


def synopsis_problems(cmd: str, nl: str, cwd: str) -> list:
    words = strip_comment(cmd).split()
    i = words.index("build/normlab") + 1
    sub = [w for w in words[i:i + 2] if re.fullmatch(r"[a-z|]+", w)]
    problems = []
    for variant in (sub[1].split("|") if len(sub) > 1 and "|" in sub[1] else [sub[1]] if len(sub) > 1 else [None]):
        args = [nl, "help", sub[0]] + ([variant] if variant else [])
        helptext = subprocess.run(args, capture_output=True, text=True, cwd=cwd).stdout
        if not helptext:
            problems.append(f"normlab help {' '.join(args[2:])} printed nothing")
        for opt in set(re.findall(r"(--[a-z][a-z0-9-]*)", re.sub(r"without --[a-z-]+", "", strip_comment(cmd)))):
            if not re.search(re.escape(opt) + r"\b", helptext):
                problems.append(f"{opt} is not an option of normlab {' '.join(args[2:])}")
    return problems


def make_fixtures(src: str, build: str, work: str, nl: str) -> dict:
    """The files the examples name as placeholders; returns the reasons some examples cannot run."""
    for d in ("configs", "data", "docs", "python", "scripts", "studies"):
        os.symlink(os.path.join(src, d), os.path.join(work, d))
    os.symlink(build, os.path.join(work, "build"))
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read() if os.path.exists(
        "/usr/share/common-licenses/GPL-3") else open(os.path.join(src, "data/kjv.txt"), encoding="utf-8").read()[:35000]
    open(os.path.join(work, "mytext.txt"), "w", encoding="utf-8").write(text)  # a corpus of one's own
    for name in ("my.txt", "doc.txt"):  # a document to read with a model: one paragraph
        open(os.path.join(work, name), "w", encoding="utf-8").write(text[:600])
    open(os.path.join(work, "sentences.txt"), "w", encoding="utf-8").write(
        "En el principio creó Dios los cielos y la tierra.\nY dijo Dios: Sea la luz; y fue la luz.\n")
    # a reference and a hypothesis of as many lines as the test split's (bleu --hyp out.txt --ref its .tgt)
    tgt = os.path.expanduser("~/.cache/normlab/bible/es-en/test.tgt")
    ref = open(tgt, encoding="utf-8").read().splitlines() if os.path.exists(tgt) else [
        "In the beginning God created the heaven and the earth.", "And God said, Let there be light: and there was light."]
    open(os.path.join(work, "ref.txt"), "w", encoding="utf-8").write("\n".join(ref) + "\n")
    open(os.path.join(work, "out.txt"), "w", encoding="utf-8").write(
        "\n".join(" ".join(w for k, w in enumerate(line.split()) if k % 4 != 3) for line in ref) + "\n")
    with open(os.path.join(work, "texts.jsonl"), "w", encoding="utf-8") as f:
        for t in ("Hello world", "Layer normalization rescales each token."):
            f.write(json.dumps(t) + "\n")
    # a config of one's own: the example's, with a checkpoint every 5 steps (an MPI run stopped by Ctrl-C
    # keeps its newest checkpoint, which the resume example after it needs)
    conf = open(os.path.join(src, "configs/example.toml"), encoding="utf-8").read()
    open(os.path.join(work, "C.toml"), "w", encoding="utf-8").write(
        re.sub(r"(?m)^checkpoint_every = \d+", "checkpoint_every = 5", conf))
    for name in ("S.toml", "my_study.toml"):
        shutil.copy(os.path.join(src, "tests/data/tiny_study.toml"), os.path.join(work, name))

    def sh(*args):
        subprocess.run(args, cwd=work, check=True, capture_output=True)

    sh(nl, "train", "-q", "--set", "train.steps=5", "--set", "train.eval_every=0", "--set", "train.out_dir=runs/x")
    import numpy as np  # the token file of the grads example: two rows of 16 bytes and their next bytes
    from safetensors.numpy import save_file
    b = np.frombuffer(text.encode()[:66], np.uint8).astype(np.int32)
    save_file({"input_ids": np.stack([b[0:16], b[33:49]]), "labels": np.stack([b[1:17], b[34:50]])},
              os.path.join(work, "X.safetensors"))
    missing = {}
    cache = os.path.expanduser("~/.cache/normlab")
    minilm = os.path.join(cache, "all-MiniLM-L6-v2")
    if os.path.isfile(os.path.join(minilm, "config.json")):
        os.makedirs(os.path.join(work, "path/to"), exist_ok=True)
        os.symlink(minilm, os.path.join(work, "path/to/hf-model"))
        os.symlink(minilm, os.path.join(work, "DIR"))
        vocab = json.load(open(os.path.join(minilm, "tokenizer.json"), encoding="utf-8"))["model"]["vocab"]
        open(os.path.join(work, "vocab.txt"), "w", encoding="utf-8").write(  # its WordPiece vocabulary, by id
            "".join(w + "\n" for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    else:
        missing["all-MiniLM-L6-v2"] = "needs all-MiniLM-L6-v2 in ~/.cache/normlab (a download: bash scripts/fetch_model.sh)"
    if not glob.glob(os.path.join(cache, "SmolLM2-135M-Instruct", "*.gguf")):
        missing["SmolLM2-135M-Instruct"] = "needs SmolLM2-135M-Instruct in ~/.cache/normlab (a download: bash scripts/fetch_model.sh)"
    if not os.path.isdir(os.path.join(cache, "bible", "es-en")):
        missing["es-en"] = "needs the Bible corpus (normlab corpus bible, a download)"
    else:  # the run PYTHON.md's encoder-decoder example loads
        sh(nl, "train", "-q", "--set", "model.arch=encdec", "--set", "model.n_layers=1", "--set", "model.dec_layers=1",
           "--set", "model.d_model=32", "--set", "model.n_heads=2", "--set", "model.seq_len=32", "--set",
           "data.parallel=es-en", "--set", "train.steps=2", "--set", "train.eval_every=0", "--set",
           "train.out_dir=runs/translate-pre")
    return missing


def needs(text: str, missing: dict) -> str | None:
    keys = {"all-MiniLM-L6-v2": ("all-MiniLM-L6-v2", "path/to/hf-model", "DIR", "vocab.txt", "--study pretrained"),
            "SmolLM2-135M-Instruct": ("SmolLM2",), "es-en": ("es-en", "data.parallel", "translate-pre", "runs/mt")}
    for what, reason in missing.items():
        if any(k in text for k in keys[what]):
            return reason
    return None


def run_command(cmd: str, env: dict, cwd: str, limit: float) -> tuple[int, str, bool]:
    p = subprocess.Popen(["bash", "-c", "set -eo pipefail\n" + cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        return p.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return -9, out + "\n(did not stop within 120 s of Ctrl-C)", True
        return p.returncode, out, True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--limit", type=float, default=6.0)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    src, build, work = (os.path.realpath(p) for p in (a.src, a.build, a.workdir))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    nl = os.path.join(build, "normlab")
    missing = make_fixtures(src, build, work, nl)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), MPLBACKEND="Agg",
               OMPI_MCA_rmaps_base_oversubscribe="1", PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    env["PATH"] = os.path.dirname(os.path.abspath(a.python)) + os.pathsep + env["PATH"]  # python = the test's
    if os.geteuid() == 0:  # OpenMPI refuses root unless told (tests/cli_mpi.sh does the same)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    pages = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    failed = ran = skipped = 0

    def report(ok: bool, where: str, what: str, detail: str = ""):
        nonlocal failed, ran
        ran += 1
        failed += not ok
        print(("PASS" if ok else "FAIL") + f" {where}: {what}" + (f"\n{detail}" if detail else ""), flush=True)

    for page in pages:
        rel = os.path.relpath(page, src)
        py_blocks = []
        for lang, line, text in blocks_of(page):
            where = f"{rel}:{line}"
            if lang == "python":
                reason = needs(text, missing)
                if reason:
                    skipped += 1
                    print(f"SKIP {where}: a python block ({reason})")
                else:
                    py_blocks.append((where, text))
                continue
            names = {}
            for cmd, shown in commands_of(text):
                bare = strip_comment(cmd).strip()
                if bare in NOT_RUN:
                    skipped += 1
                    print(f"SKIP {where}: {bare} ({NOT_RUN[bare]})")
                    continue
                reason = needs(cmd, missing)
                if reason:
                    skipped += 1
                    print(f"SKIP {where}: {bare} ({reason})")
                    continue
                if "build/normlab" in cmd and is_synopsis(cmd):
                    problems = synopsis_problems(cmd, nl, work)
                    report(not problems, where, f"synopsis {bare}", "\n".join(problems))
                    continue
                m = re.fullmatch(r"([A-Za-z_]\w*)=(\$\(.*\))", bare)
                full = "".join(f"{k}={shlex.quote(v)}\n" for k, v in names.items()) + (f"echo {m.group(2)}" if m else cmd)
                t0 = time.time()
                rc, out, stopped = run_command(full, env, work, a.limit)
                if m:
                    names[m.group(1)] = out.strip().splitlines()[-1] if out.strip() else ""
                # mpirun reports ranks stopped by Ctrl-C as its own exit 1
                ok = rc == 0 or (stopped and (rc in STOPPED or (bare.startswith("mpirun") and rc == 1)))
                detail = "" if ok else f"exit {rc}; output:\n{out[-3000:]}"
                if ok and shown is not None and shown.strip() not in out:
                    ok, detail = False, f"the page shows {shown.strip()!r}; the command printed:\n{out[-2000:]}"
                note = f" (stopped by Ctrl-C after {a.limit:.0f} s; {time.time() - t0:.1f} s)" if stopped else f" ({time.time() - t0:.1f} s)"
                report(ok, where, bare + note, detail)
        if py_blocks:
            spec = os.path.join(work, f"{os.path.basename(page)}.blocks.json")
            json.dump(py_blocks, open(spec, "w"))
            driver = os.path.join(work, "py_driver.py")
            open(driver, "w").write(PY_DRIVER)
            p = subprocess.run([a.python, driver, spec, str(5 * a.limit), json.dumps(NOT_RUN)], cwd=work, env=env, capture_output=True, text=True,
                               errors="replace")
            print(p.stdout + p.stderr[-3000:], end="", flush=True)
            n_pass, n_fail = p.stdout.count("PASS "), p.stdout.count("FAIL ")
            skipped += p.stdout.count("SKIP ")
            ran += n_pass + n_fail
            failed += n_fail or (p.returncode != 0)
    print(f"docs_examples: {ran} examples run, {skipped} not run (reasons above), {failed} failed")
    return 1 if failed or ran < 40 else 0


if __name__ == "__main__":
    sys.exit(main())
