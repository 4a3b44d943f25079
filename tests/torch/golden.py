#!/usr/bin/env python3
"""golden.py: check the normlab C++ engine against the PyTorch oracle (normlab_torch.py).

    golden.py --normlab build/normlab --workdir /tmp/golden            # default cases
    golden.py --normlab build/normlab --workdir /tmp/golden --extra    # only the --extra cases
    golden.py --normlab build/normlab --workdir /tmp/golden --all      # both
    golden.py ... --case gpt_pre --case train_gpt_pre                  # named cases (any set)
    golden.py ... --case 'encdec_*' 'gpt_admin*'                       # shell-style patterns
    golden.py --list [--extra|--all] [--case PATTERN]                  # list case names
    -q: only the PASS/FAIL line per case (default also prints one line per tensor)

Per "grads" case:
  1. write C.toml ([model]) and run `normlab init` -> M.safetensors;
  2. check the checkpoint metadata config (every key explicit, equal to what was asked for), the
     tensor names/shapes (== MODEL.md's parameter table) and the init distributions (statistically;
     the closed-form inits of Admin's omega, LayerScale's / SkipInit's gains and ReZero exactly);
  3. write a random token file X.safetensors, run `normlab grads` -> G.safetensors and compare
     `loss`, `logits`, every `grad.<name>` and, for encdec, `memory` with the float64 torch reference;
  4. repeat 3 on a perturbed checkpoint P.safetensors (every parameter moved off its init: gains != 1
     and biases != 0, Admin omegas in [1, 2], ReZero / SkipInit / LayerScale gains of magnitude
     0.3-1, so a forgotten gain/bias or swapped norm cannot hide behind the init values).
Per "train" case: `normlab init`, then `normlab train` for 10 steps on the fixed token file; compare
metrics.jsonl's train records (loss, lr, grad_norm) with the float64 torch AdamW trainer. A "fresh"
train case starts from the trainer's own init (no train.init_from; the same seed gives `normlab
init`'s parameters); with admin_init = profile the trainer first profiles the Admin omegas on the
batch, and metrics.jsonl's {"type": "admin_profile", "omega": [...]} must equal nt.admin_profile's.

Token files: gpt / encoder `input_ids`, `labels` (+ `attention_mask`, `token_type_ids` when padded);
encdec (Hugging Face seq2seq names) `input_ids` (B, S) the source, `attention_mask` (B, S),
`decoder_input_ids` (B, T) (BOS first), `decoder_attention_mask` (B, T) and `labels` (B, T) (EOS
last, -100 at padding); both masks are optional (Case.masks says which a case writes).

Exit status 1 if any case fails. Last line: "N passed, M failed".

Files: this one runs the cases through the normlab CLI (run_grads_case, run_train_case, main);
golden_cases.py holds the case table (build_cases), golden_inputs.py what the cases hand to normlab
(TOML configs, token files) and golden_checks.py the tolerances, the comparison, the metadata and
init checks and the perturbed checkpoint.
"""

import argparse
import traceback
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import normlab_torch as nt  # noqa: E402
from golden_cases import build_cases  # noqa: E402
from golden_checks import (ATOL_FLOOR, ATOL_GRAD_GLOBAL, RTOL_TRAIN_GRAD_NORM, RTOL_TRAIN_LOSS,  # noqa: E402
                           RTOL_TRAIN_LOSS_GROWTH, RTOL_TRAIN_LR, RTOL_VALUE, check_init, check_metadata_config,
                           compare, grad_rtol, perturb_checkpoint)
from golden_inputs import forward_inputs, make_batch, save_batch, write_toml  # noqa: E402

torch.set_num_threads(1)


# ==================================================================================================
# Running the cases
# ==================================================================================================

class CaseFailure(Exception):
    pass


def run(cmd, log):
    log.append("$ " + " ".join(str(c) for c in cmd))
    if str(cmd[0]).endswith(".py"):           # e.g. fake_normlab.py: run with this interpreter
        cmd = [sys.executable] + list(cmd)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        raise CaseFailure(f"timeout: {' '.join(map(str, cmd))}")
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        raise CaseFailure(f"`{' '.join(map(str, cmd[:3]))}` exited {r.returncode}: " + " | ".join(tail))
    return r


def grads_compare(normlab, ckpt, tokens_path, batch, gout, log, out, tag):
    """Run normlab grads on ckpt and compare with torch float64. Returns (ok, worst_rel)."""
    from safetensors.numpy import load_file
    run([normlab, "grads", "--checkpoint", ckpt, "--tokens", tokens_path, "--out", gout], log)
    G = load_file(str(gout))
    model, _ = nt.load_checkpoint(ckpt, torch.float64)
    model.zero_grad()
    ids, labels, kw = forward_inputs(batch)
    ref = nt.forward_outputs(model.config, model.params, ids, labels, **kw)
    ref["loss"].backward()
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in model.params.items()}
    encdec = model.config["arch"] == "encdec"
    ok, worst = True, 0.0
    out.append(f"  [{tag}] {ckpt.name}")
    want_keys = {"loss", "logits"} | {"grad." + n for n in model.params} | ({"memory"} if encdec else set())
    have = set(G)
    if want_keys - have:
        out.append(f"    missing in gradient file: {sorted(want_keys - have)}")
        ok = False
    extra_grads = sorted(k for k in have - want_keys if k.startswith("grad."))
    if extra_grads:
        out.append(f"    gradient file has grads of unknown parameters: {extra_grads}")
        ok = False
    if "loss" in G:
        if tuple(G["loss"].shape) != ():
            out.append(f"    loss has shape {G['loss'].shape}, expected []")
            ok = False
        o, r = compare("loss", G["loss"].reshape(()), ref["loss"].detach().numpy(), RTOL_VALUE, 0.0, out)
        ok, worst = ok and o, max(worst, r)
    if "logits" in G:
        o, r = compare("logits", G["logits"], ref["logits"].detach().numpy(), RTOL_VALUE, 0.0, out)
        ok, worst = ok and o, max(worst, r)
    if encdec and "memory" in G:   # what the cross-attention reads: the encoder's output (after enc.ln_f)
        o, r = compare("memory", G["memory"], ref["memory"].detach().numpy(), RTOL_VALUE, 0.0, out)
        ok, worst = ok and o, max(worst, r)
    gmax = max(float(g.abs().max()) for g in grads.values())
    atol = ATOL_GRAD_GLOBAL * gmax + ATOL_FLOOR
    for name, g in grads.items():          # canonical order: the first offender is listed first
        key = "grad." + name
        if key not in G:
            continue
        o, r = compare(key, G[key], g.numpy(), grad_rtol(tuple(g.shape)), atol, out)
        ok, worst = ok and o, max(worst, r)
    return ok, worst


def run_grads_case(case, normlab, d, out):
    log = []
    cfg_path, ckpt, pert = d / "C.toml", d / "M.safetensors", d / "P.safetensors"
    write_toml(cfg_path, {"model": case.model})
    cmd = [normlab, "init", "--config", cfg_path, "--out", ckpt]
    for s in case.sets:
        cmd += ["--set", s]
    run(cmd, log)
    intended = case.intended_model()
    from safetensors import safe_open
    with safe_open(str(ckpt), framework="pt") as f:
        meta = f.metadata() or {}
        if "config" not in meta:
            raise CaseFailure("checkpoint has no 'config' metadata")
        meta_cfg = json.loads(meta["config"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    problems = check_metadata_config(meta_cfg, intended)
    config = nt.normalize_config(meta_cfg, strict=False)
    specs = nt.param_specs(config)
    spec_d = dict(specs)
    if set(spec_d) != set(tensors):
        problems.append(f"checkpoint tensor names differ from MODEL.md: missing {sorted(set(spec_d) - set(tensors))}"
                        f", extra {sorted(set(tensors) - set(spec_d))}")
    else:
        for n, shp in specs:
            if tuple(tensors[n].shape) != shp:
                problems.append(f"{n}: shape {tuple(tensors[n].shape)}, expected {shp}")
            if tensors[n].dtype != torch.float32:
                problems.append(f"{n}: dtype {tensors[n].dtype}, expected float32")
        if not problems:
            problems += check_init(config, tensors)
    if problems:
        raise CaseFailure("; ".join(problems))
    seed = zlib.crc32(case.name.encode())
    batch = make_batch(case, config, seed)
    tok = d / "X.safetensors"
    save_batch(tok, batch)
    ok1, w1 = grads_compare(normlab, ckpt, tok, batch, d / "G.safetensors", log, out, "init")
    perturb_checkpoint(ckpt, pert, seed + 1)
    ok2, w2 = grads_compare(normlab, pert, tok, batch, d / "GP.safetensors", log, out, "perturbed")
    if not (ok1 and ok2):
        bad = [line.split()[0] for line in out if line.endswith("<-- MISMATCH")]
        raise CaseFailure(f"mismatch in {bad[0] if bad else 'output keys'}"
                          + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""))
    return max(w1, w2)


def run_train_case(case, normlab, d, out):
    """`normlab train` on the case's fixed token file vs nt.train. From the `normlab init` checkpoint
    (train.init_from), or, for a `fresh` case, from the trainer's own initialization -- the same seed
    and config as `normlab init`, so the same parameters -- which is when admin_init = profile profiles
    the Admin omegas (MODEL.md: "what normlab train uses for a fresh admin model")."""
    log = []
    cfg0, ckpt = d / "C0.toml", d / "M.safetensors"
    write_toml(cfg0, {"model": case.model})
    run([normlab, "init", "--config", cfg0, "--out", ckpt], log)
    model, meta_cfg = nt.load_checkpoint(ckpt, torch.float64)
    problems = check_metadata_config(meta_cfg, case.intended_model())
    if problems:
        raise CaseFailure("; ".join(problems))
    batch = make_batch(case, model.config, zlib.crc32(case.name.encode()))
    tok = d / "X.safetensors"
    save_batch(tok, batch)
    run_dir = d / "run"
    B = case.bt[0]
    train = dict(case.train, batch_size=B, out_dir=str(run_dir))
    if not case.fresh:
        train["init_from"] = str(ckpt)
    cfg = d / "C.toml"
    write_toml(cfg, {"model": case.model, "train": train, "data": {"tokens": str(tok)}})
    run([normlab, "train", "--config", cfg], log)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        raise CaseFailure(f"{metrics} not written")
    recs, profile = {}, None
    for line in metrics.read_text().splitlines():
        if line.strip():
            j = json.loads(line)
            if j.get("type") == "train":
                recs[int(j["step"])] = j
            elif j.get("type") == "admin_profile":
                profile = j
    ids, labels, kw = forward_inputs(batch)
    ok = True
    if case.fresh and model.config["admin_init"] == "profile" and "admin" in model.config["placement"]:
        # the walk of nt.admin_profile on the batch before step 1 (a fixed token file has one batch);
        # the engine reports the omegas in walk order as {"type": "admin_profile", "omega": [...]}
        want = nt.admin_profile(model.config, model.params, ids, **kw)
        got = None if profile is None else profile.get("omega")
        if got is None or len(got) != len(want):
            out.append(f"    admin_profile line: {profile}, expected {len(want)} omegas")
            ok = False
        else:
            rel = max(abs(g - w) / w for g, (_, w) in zip(got, want))
            bad = not rel <= RTOL_VALUE
            ok = ok and not bad
            out.append(f"    admin profile omegas {[round(g, 6) for g in got]} vs {[round(w, 6) for _, w in want]}"
                       f" (rel {rel:.1e}/{RTOL_VALUE:.0e})" + (" <-- MISMATCH" if bad else ""))
    ref = nt.train(model, ids, labels, case.train, **kw)
    worst = 0.0
    if sorted(recs) != [r["step"] for r in ref]:
        out.append(f"    train steps in metrics.jsonl: {sorted(recs)}, expected 1..{len(ref)}")
        ok = False
    for r in ref:
        s = r["step"]
        if s not in recs:
            continue
        g = recs[s]
        line = f"    step {s:3d}"
        for key, rtol in (("loss", RTOL_TRAIN_LOSS * (1 + RTOL_TRAIN_LOSS_GROWTH * (s - 1))),
                          ("lr", RTOL_TRAIN_LR), ("grad_norm", RTOL_TRAIN_GRAD_NORM)):
            if key not in g:
                line += f"  {key}: MISSING"
                ok = False
                continue
            rel = abs(float(g[key]) - r[key]) / abs(r[key]) if r[key] != 0 else abs(float(g[key]))
            bad = not (rel <= rtol)
            ok = ok and not bad
            if key == "loss":
                worst = max(worst, rel)
            line += (f"  {key} {float(g[key]):.8g} vs {r[key]:.8g} (rel {rel:.1e}/{rtol:.0e})"
                     + (" <-- MISMATCH" if bad else ""))
        if "qk_clipped" in r:   # QK-Clip: the step's largest score and the groups it clipped
            got_max, got_n = g.get("max_logit"), g.get("qk_clipped")
            rel = abs(float(got_max) - r["max_logit"]) / abs(r["max_logit"]) if got_max is not None else float("inf")
            bad = not (rel <= RTOL_TRAIN_LOSS * (1 + RTOL_TRAIN_LOSS_GROWTH * (s - 1))) or got_n != r["qk_clipped"]
            ok = ok and not bad
            line += (f"  max_logit {got_max} vs {r['max_logit']:.8g} (rel {rel:.1e}), clipped {got_n} vs "
                     f"{r['qk_clipped']}" + (" <-- MISMATCH" if bad else ""))
        out.append(line)
    if not ok:
        first = next((l for l in out if "MISMATCH" in l or "MISSING" in l), "step set")
        raise CaseFailure("training mismatch at " + first.strip())
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normlab", help="path to the normlab executable")
    ap.add_argument("--workdir", help="scratch directory (one sub-directory per case, recreated)")
    ap.add_argument("--case", action="append", nargs="+", default=[],
                    help="case name(s) or shell-style patterns ('encdec_*') to run")
    ap.add_argument("--list", action="store_true", help="list the selected case names and exit")
    ap.add_argument("--extra", action="store_true", help="run only the --extra acceptance cases")
    ap.add_argument("--all", action="store_true", help="run the default and the --extra cases")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-tensor lines")
    args = ap.parse_args(argv)

    cases = build_cases()
    names = [n for group in args.case for n in group]
    if names:   # exact names or shell-style patterns (fnmatch), in the order given, without repeats
        selected, unknown = [], []
        for n in names:
            hits = [c for c in cases if fnmatch.fnmatchcase(c.name, n)]
            if not hits:
                unknown.append(n)
            selected += [c for c in hits if c not in selected]
        if unknown:
            ap.error(f"unknown case(s): {unknown}; see --list")
    elif args.all:
        selected = cases
    elif args.extra:
        selected = [c for c in cases if c.extra]
    else:
        selected = [c for c in cases if not c.extra]
    if args.list:
        for c in selected:
            print(f"{c.name:40s} {c.kind}")
        return 0
    if not args.normlab or not args.workdir:
        ap.error("--normlab and --workdir are required")
    normlab = Path(args.normlab).resolve()
    if not normlab.exists():
        ap.error(f"{normlab} does not exist")
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)

    passed = failed = 0
    for c in selected:
        d = work / c.name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        out = []
        try:
            worst = (run_train_case if c.kind == "train" else run_grads_case)(c, normlab, d, out)
            status = f"PASS {c.name} (worst rel err {worst:.2e})"
            passed += 1
        except CaseFailure as e:
            status = f"FAIL {c.name}: {e}"
            failed += 1
        except Exception as e:  # a crash of the harness itself is a failure too, with its reason
            status = f"FAIL {c.name}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
            failed += 1
        if out and (not args.quiet or status.startswith("FAIL")):
            print("\n".join(out))
        print(status, flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
