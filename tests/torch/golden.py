#!/usr/bin/env python3
"""golden.py: check the normlab C++ engine against the PyTorch oracle (normlab_torch.py).

    golden.py --normlab build/normlab --workdir /tmp/golden            # default cases
    golden.py --normlab build/normlab --workdir /tmp/golden --extra    # only the --extra cases
    golden.py --normlab build/normlab --workdir /tmp/golden --all      # both
    golden.py ... --case gpt_pre --case train_gpt_pre                  # named cases (any set)
    golden.py --list [--extra|--all]                                   # list case names
    -q: only the PASS/FAIL line per case (default also prints one line per tensor)

Per "grads" case:
  1. write C.toml ([model]) and run `normlab init` -> M.safetensors;
  2. check the checkpoint metadata config (every key explicit, equal to what was asked for), the
     tensor names/shapes (== MODEL.md's parameter table) and the init distributions (statistically);
  3. write a random token file X.safetensors, run `normlab grads` -> G.safetensors and compare
     `loss`, `logits` and every `grad.<name>` with the float64 torch reference;
  4. repeat 3 on a perturbed checkpoint P.safetensors (every parameter moved off its init: gains != 1
     and biases != 0, so a forgotten gain/bias or swapped norm cannot hide behind the init values).
Per "train" case: `normlab init`, then `normlab train` for 10 steps on the fixed token file; compare
metrics.jsonl's train records (loss, lr, grad_norm) with the float64 torch AdamW trainer.

Exit status 1 if any case fails. Last line: "N passed, M failed".
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import normlab_torch as nt  # noqa: E402

torch.set_num_threads(1)

# ==================================================================================================
# Tolerances (reference: torch float64; tested: normlab float32).
#
# Each tensor is compared as   max|a - b| <= atol + rtol * max|b|   (b = reference): relative to
# the tensor's largest element, because entries that are mathematically ~0 (e.g. the gradient of the
# attention key bias, exactly 0 by softmax shift invariance) carry absolute float32 noise of the
# size of their neighbours, so an element-wise relative error would be meaningless.
#
# Calibration (selftest.py, "calib" lines: torch float32 vs float64 on exactly golden.py's configs
# and perturbed parameters): loss/logits <= 2.6e-6 relative; gradients <= 8.7% of the bound below
# (i.e. <= ~9e-6 relative); 10-step training loss <= 2e-7 relative, grad_norm <= 9.2e-6 relative.
# A C++ engine summing in a different order changes the constant, not the order of magnitude; the
# bounds keep >= 5x headroom (checked by selftest.py) while catching subtle bugs: GELU's erf form
# instead of the tanh form moves logits by 2-3e-4 and gradients by 2-9e-4 relative (>= 2x the
# bounds), weight decay wrongly applied to gains/biases moves the step-6 training loss by 1.5e-4.
RTOL_VALUE = 2e-5        # loss and logits (forward only)
RTOL_GRAD = 1e-4         # every grad.<name>
ATOL_GRAD_GLOBAL = 1e-6  # atol of a gradient tensor = this * (largest |grad| over ALL tensors):
                         # a tensor whose gradients are tiny (deep post-norm layers, residual=false)
                         # inherits float32 noise from the large upstream gradients.
ATOL_FLOOR = 1e-12       # so that an all-zero reference tensor needs an (almost) all-zero result
# Training (10 AdamW steps on one fixed batch, from the init checkpoint): step 1's loss is a forward
# pass; afterwards float32 gradient noise enters the parameters through Adam's m/(sqrt(v)+eps) and
# compounds mildly step by step (the largest relative perturbation is on parameters whose gradient
# is ~0, e.g. the key bias, which provably does not affect the loss). Hence a bound growing 10% per
# step: 5e-5 at step 1, 9.5e-5 at step 10 -- 250x the measured float32 drift, yet below the effect
# of a wrong weight-decay grouping. (Brief suggested ~2e-4; that would miss the grouping bug.)
RTOL_TRAIN_LOSS = 5e-5
RTOL_TRAIN_LOSS_GROWTH = 0.1   # tol(step) = RTOL_TRAIN_LOSS * (1 + GROWTH * (step - 1))
RTOL_TRAIN_LR = 1e-6           # a closed formula; only float32 storage / printing (~6e-8) separates them
RTOL_TRAIN_GRAD_NORM = 2e-4    # the pre-clip global norm (measured float32 drift <= 9.2e-6)
HEADROOM = 5.0                 # selftest.py requires float32 torch errors <= bound / HEADROOM
# Init distributions: a sample std of n normal draws has relative std-error 1/sqrt(2n); allow 6 of
# those (a few hundred cases x tensors => a false alarm probability < 1e-6).
INIT_SIGMAS = 6.0
# Config values read back from checkpoint metadata: floats may have been stored as float32.
RTOL_CONFIG_FLOAT = 1e-6

# ==================================================================================================
# Cases
# ==================================================================================================

SMALL = dict(d_model=32, n_heads=4, n_layers=2, d_ff=48, seq_len=8)
SMALL_BT = (3, 7)
EXTRA = dict(d_model=96, n_heads=6, n_layers=3, seq_len=32)
EXTRA_BT = (2, 17)

TRAIN_CFG = dict(steps=10, lr=3e-3, lr_schedule="warmup", warmup_steps=4, weight_decay=0.1,
                 beta1=0.9, beta2=0.95, adam_eps=1e-8, grad_clip=1.0)


class Case:
    def __init__(self, name, model, bt, kind="grads", sets=None, train=None, extra=False, pad=False):
        self.name, self.model, self.bt, self.kind = name, model, bt, kind
        self.pad = pad                    # right-padded rows with an attention_mask (and token types)
        self.sets = sets or []            # --set overrides passed to `normlab init`
        self.train = train
        self.extra = extra

    def intended_model(self):
        """The [model] config after the --set overrides (what the metadata must say)."""
        m = dict(self.model)
        for s in self.sets:
            key, val = s.split("=", 1)
            sec, k = key.split(".", 1)
            assert sec == "model"
            m[k] = json.loads(val)   # the overrides used here are JSON-compatible TOML values
        return m


def build_cases():
    cases = []
    for arch in ("gpt", "encoder"):
        for p in nt.PLACEMENTS:
            cases.append(Case(f"{arch}_{p}", dict(SMALL, arch=arch, placement=p), SMALL_BT))
    cases += [
        Case("gpt_pre_rmsnorm", dict(SMALL, placement="pre", norm="rmsnorm"), SMALL_BT),
        Case("gpt_post_rmsnorm", dict(SMALL, placement="post", norm="rmsnorm"), SMALL_BT),
        Case("encoder_pre_rmsnorm", dict(SMALL, arch="encoder", placement="pre", norm="rmsnorm"), SMALL_BT),
        Case("encoder_post_rmsnorm", dict(SMALL, arch="encoder", placement="post", norm="rmsnorm"), SMALL_BT),
        Case("gpt_pre_relu", dict(SMALL, placement="pre", activation="relu"), SMALL_BT),
        Case("gpt_pre_noresidual", dict(SMALL, placement="pre", residual=False), SMALL_BT),
        Case("gpt_post_noresidual", dict(SMALL, placement="post", residual=False), SMALL_BT),
        # attention-only (no MLP sub-layers), with and without skips: the pure-attention ablation
        Case("gpt_pre_nomlp", dict(SMALL, placement="pre", mlp=False), SMALL_BT),
        Case("gpt_post_nomlp", dict(SMALL, placement="post", mlp=False), SMALL_BT),
        Case("gpt_pre_nomlp_noresidual", dict(SMALL, placement="pre", mlp=False, residual=False), SMALL_BT),
        Case("encoder_sandwich_nomlp", dict(SMALL, arch="encoder", placement="sandwich", mlp=False), SMALL_BT),
        Case("gpt_mix_nomlp", dict(SMALL, n_layers=3, placement=["post", "pre", "deepnorm"], mlp=False), SMALL_BT),
        # the per-layer list goes through the CLI override (TOML says "pre")
        Case("gpt_mix_pre_post_sandwich", dict(SMALL, n_layers=3, placement="pre"), SMALL_BT,
             sets=['model.placement=["pre","post","sandwich"]']),
        Case("encoder_mix_pre_post_sandwich", dict(SMALL, arch="encoder", n_layers=3,
             placement=["pre", "post", "sandwich"]), SMALL_BT),
        Case("gpt_pre_eps0", dict(SMALL, placement="pre", eps=0.0), SMALL_BT),
        # the pieces of GPT-2 and BERT: exact GELU, token types, embedding norm, MLM head, padding
        Case("encoder_bert_like_pad", dict(SMALL, arch="encoder", placement="post", embed_norm=True, head="mlm",
                                           type_vocab=2, activation="gelu_exact", eps=1e-12), SMALL_BT, pad=True),
        Case("gpt_pre_gelu_exact_pad", dict(SMALL, placement="pre", activation="gelu_exact"), SMALL_BT, pad=True),
        Case("encoder_pre_rmsnorm_mlm_types", dict(SMALL, arch="encoder", placement="pre", norm="rmsnorm",
                                                   embed_norm=True, head="mlm", type_vocab=3), SMALL_BT, pad=True),
        Case("gpt_post_eps0", dict(SMALL, placement="post", eps=0.0), SMALL_BT),
        Case("gpt_pre_init_normal", dict(SMALL, placement="pre", init="normal"), SMALL_BT),
        Case("gpt_pre_init_xavier", dict(SMALL, placement="pre", init="xavier"), SMALL_BT),
        Case("gpt_pre_init_deepnet", dict(SMALL, placement="pre", init="deepnet"), SMALL_BT),
        Case("train_gpt_pre", dict(SMALL, placement="pre"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_gpt_post", dict(SMALL, placement="post"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_encoder_pre", dict(SMALL, arch="encoder", placement="pre"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
    ]
    # --extra: sizes and configurations the default cases do not use (a separate acceptance check)
    ex = []
    for arch in ("gpt", "encoder"):
        for p in ("sandwich", "deepnorm", "prepost", "post"):
            ex.append(Case(f"x_{arch}_{p}", dict(EXTRA, arch=arch, placement=p), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_pre_rmsnorm", dict(EXTRA, arch=arch, placement="pre", norm="rmsnorm"),
                       EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_sandwich_rmsnorm", dict(EXTRA, arch=arch, placement="sandwich",
                       norm="rmsnorm"), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_mix_deepnorm_pre_sandwich", dict(EXTRA, arch=arch,
                       placement=["deepnorm", "pre", "sandwich"]), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_mix_sandwich_none_prepost", dict(EXTRA, arch=arch,
                       placement=["sandwich", "none", "prepost"]), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_bert_pieces_pad", dict(EXTRA, arch=arch, placement=["post", "pre", "post"],
                       embed_norm=True, head="mlm", type_vocab=2, activation="gelu_exact"), EXTRA_BT, extra=True,
                       pad=True))
        ex.append(Case(f"x_{arch}_mix_post_deepnorm_pre_relu", dict(EXTRA, arch=arch, activation="relu",
                       placement=["post", "deepnorm", "pre"]), EXTRA_BT, extra=True))
    ex.append(Case("x_train_gpt_sandwich", dict(EXTRA, placement="sandwich"), EXTRA_BT, kind="train",
                   train=TRAIN_CFG, extra=True))
    ex.append(Case("x_train_encoder_deepnorm", dict(EXTRA, arch="encoder", placement="deepnorm"), EXTRA_BT,
                   kind="train", train=TRAIN_CFG, extra=True))
    return cases + ex


# ==================================================================================================
# Helpers
# ==================================================================================================

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def write_toml(path, sections):
    lines = []
    for sec, kv in sections.items():
        lines.append(f"[{sec}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in kv.items()]
        lines.append("")
    Path(path).write_text("\n".join(lines))


def make_tokens(arch, vocab, B, T, seed):
    """Random token batch: gpt next-token labels (last -100); encoder ~15% masked (>= 1 per row)."""
    rng = np.random.RandomState(seed)
    if arch == "gpt":
        seq = rng.randint(0, vocab, size=(B, T + 1))
        ids = seq[:, :T]
        labels = seq[:, 1:T + 1].copy()
        labels[:, T - 1] = nt.IGNORE_INDEX
    else:
        orig = rng.randint(0, 256, size=(B, T))
        masked = rng.rand(B, T) < 0.15
        for b in range(B):
            if not masked[b].any():
                masked[b, rng.randint(T)] = True
        ids = np.where(masked, nt.MASK_TOKEN, orig)
        labels = np.where(masked, orig, nt.IGNORE_INDEX)
    return ids.astype(np.int32), labels.astype(np.int32)


def pad_tokens(arch, ids, labels, type_vocab, seed):
    """Right padding (row b keeps T - 3b tokens, at least 1), an attention_mask, and token types."""
    rng = np.random.RandomState(seed + 7)
    B, T = ids.shape
    mask = np.ones((B, T), np.int32)
    for b in range(B):
        mask[b, max(1, T - 3 * b):] = 0
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    labels = np.where(mask == 1, labels, nt.IGNORE_INDEX).astype(np.int32)
    if arch == "gpt":  # the last real token's next token is padding
        labels[:, :-1] = np.where(mask[:, 1:] == 1, labels[:, :-1], nt.IGNORE_INDEX)
    for b in range(B):  # every row keeps a label
        if not (labels[b] != nt.IGNORE_INDEX).any():
            labels[b, 0] = ids[b, 0]
    types = rng.randint(0, max(type_vocab, 1), size=(B, T)).astype(np.int32) if type_vocab > 0 else None
    return ids, labels, mask, types


def save_tokens(path, ids, labels, mask=None, types=None):
    from safetensors.numpy import save_file
    t = {"input_ids": np.ascontiguousarray(ids), "labels": np.ascontiguousarray(labels)}
    if mask is not None:
        t["attention_mask"] = np.ascontiguousarray(mask)
    if types is not None:
        t["token_type_ids"] = np.ascontiguousarray(types)
    save_file(t, str(path))


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


def compare(name, got, ref, rtol, atol, out):
    """max|got-ref| <= atol + rtol*max|ref|. Returns (ok, rel) and appends a report line."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        out.append(f"    {name:42s} SHAPE normlab {got.shape} vs torch {ref.shape}")
        return False, math.inf
    if not np.all(np.isfinite(got)):
        out.append(f"    {name:42s} non-finite values in normlab output")
        return False, math.inf
    diff = np.abs(got - ref)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(diff)) if diff.size else 0.0
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()
    tol = atol + rtol * scale
    ok = err <= tol
    rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    at = f"normlab {got[idx]:.9g} torch {ref[idx]:.9g}" if diff.size else ""
    out.append(f"    {name:42s} max|err| {err:.3e}  rel {rel:.2e}  tol {tol:.2e}  worst {idx} ({at})"
               + ("" if ok else "   <-- MISMATCH"))
    return ok, rel


# ==================================================================================================
# Checks
# ==================================================================================================

def check_metadata_config(meta_cfg, intended):
    """The metadata must hold every key explicitly, equal to the normalized intended config."""
    want = nt.normalize_config(intended)
    problems = []
    for k, v in want.items():
        if k not in meta_cfg:
            problems.append(f"metadata config lacks key {k!r}")
            continue
        m = meta_cfg[k]
        if isinstance(v, float) and not isinstance(m, bool) and isinstance(m, (int, float)):
            if not math.isclose(float(m), v, rel_tol=RTOL_CONFIG_FLOAT, abs_tol=0.0):
                problems.append(f"metadata {k} = {m!r}, expected {v!r}")
        elif m != v:
            problems.append(f"metadata {k} = {m!r}, expected {v!r}")
    return problems


def check_init(config, tensors):
    """Statistical check of MODEL.md's init schemes on a freshly initialized checkpoint."""
    C, L, std0 = config["d_model"], config["n_layers"], config["init_std"]
    scheme = config["init"]
    beta = (8.0 * L) ** -0.25
    problems = []

    def std_ok(name, w, want_std):
        w = np.asarray(w, dtype=np.float64).ravel()
        n = w.size
        s = float(np.sqrt(np.mean(w ** 2)))          # the mean is 0 by construction
        m = float(np.mean(w))
        if abs(s / want_std - 1) > INIT_SIGMAS / math.sqrt(2 * n):
            problems.append(f"{name}: init std {s:.5g}, expected {want_std:.5g} (n={n})")
        if abs(m) > INIT_SIGMAS * want_std / math.sqrt(n):
            problems.append(f"{name}: init mean {m:.3g}, expected 0 (std {want_std:.3g}, n={n})")

    for name, _ in nt.param_specs(config):
        w = tensors[name].numpy().astype(np.float64)
        if nt.is_norm_param(name):
            want = 1.0 if name.endswith(".weight") else 0.0
            if not np.all(w == want):
                problems.append(f"{name}: init must be all {want}")
        elif name.endswith(".bias"):
            if not np.all(w == 0):
                problems.append(f"{name}: init must be all 0")
        elif name in ("wte.weight", "wpe.weight", "wtt.weight"):
            std_ok(name, w, std0)
        else:
            is_qkv = name.endswith("attn.qkv.weight")
            blocks = [("q", 0, C), ("k", C, 2 * C), ("v", 2 * C, 3 * C)] if is_qkv else [("", 0, w.shape[0])]
            for tag, r0, r1 in blocks:
                bn = f"{name}[{tag}]" if tag else name
                blk = w[r0:r1]
                fan_out, fan_in = r1 - r0, w.shape[1]
                if scheme == "normal":
                    std_ok(bn, blk, std0)
                elif scheme == "gpt2":
                    std_ok(bn, blk, std0 / math.sqrt(2 * L) if name.endswith(".proj.weight") else std0)
                elif scheme == "xavier":
                    a = math.sqrt(6.0 / (fan_in + fan_out))
                    if np.max(np.abs(blk)) > a * (1 + 1e-6):
                        problems.append(f"{bn}: xavier init exceeds bound {a:.5g}")
                    std_ok(bn, blk, a / math.sqrt(3.0))
                elif scheme == "deepnet":
                    gain = 1.0 if tag in ("q", "k") else beta
                    std_ok(bn, blk, gain * math.sqrt(2.0 / (fan_in + fan_out)))
    return problems


PERTURB_EMB_STD = 0.3       # wte/wpe: logits of std ~1-2, so the softmax is far from uniform
PERTURB_LINEAR_GAIN = 1.5   # linear weights ~ N(0, gain^2 / fan_in): pre-activations of order 1-2, so
                            # attention is peaked and GELU's tanh form differs measurably from erf's


def perturb_tensors(tensors, seed):
    """Move every parameter off its init into a regime with activations of order 1.

    Gains 1 -> 1 + 0.2 N, biases 0 -> 0.1 N, wte/wpe + N(0, 0.3^2), linear weights + N(0, 1.5^2/fan_in).
    With init values (gains 1, biases 0, std 0.02 weights), a forgotten gain or bias, a swapped norm
    or a wrong activation form would be invisible; here they are not.
    tensors: name -> numpy array; returns name -> float32 numpy array.
    """
    rng = np.random.RandomState(seed)
    out = {}
    for name in sorted(tensors):
        w = np.asarray(tensors[name], dtype=np.float64)
        if nt.is_norm_param(name) and name.endswith(".weight"):
            w = w + 0.2 * rng.randn(*w.shape)
        elif name.endswith(".bias"):
            w = w + 0.1 * rng.randn(*w.shape)
        elif name in ("wte.weight", "wpe.weight", "wtt.weight"):
            w = w + PERTURB_EMB_STD * rng.randn(*w.shape)
        else:
            w = w + PERTURB_LINEAR_GAIN / math.sqrt(w.shape[1]) * rng.randn(*w.shape)
        out[name] = np.ascontiguousarray(w.astype(np.float32))
    return out


def perturb_checkpoint(src, dst, seed):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    with safe_open(str(src), framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(perturb_tensors(tensors, seed), str(dst), metadata=meta)


def grads_compare(normlab, ckpt, tokens_path, ids, labels, gout, log, out, tag, mask=None, types=None):
    """Run normlab grads on ckpt and compare with torch float64. Returns (ok, worst_rel)."""
    from safetensors.numpy import load_file
    run([normlab, "grads", "--checkpoint", ckpt, "--tokens", tokens_path, "--out", gout], log)
    G = load_file(str(gout))
    model, _ = nt.load_checkpoint(ckpt, torch.float64)
    model.zero_grad()
    loss, logits = nt.forward_params(model.config, model.params, torch.from_numpy(ids.astype(np.int64)),
                                     torch.from_numpy(labels.astype(np.int64)),
                                     None if types is None else torch.from_numpy(types.astype(np.int64)),
                                     None if mask is None else torch.from_numpy(mask.astype(np.int64)))
    loss.backward()
    ok, worst = True, 0.0
    out.append(f"  [{tag}] {ckpt.name}")
    want_keys = {"loss", "logits"} | {"grad." + n for n in model.params}
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
        o, r = compare("loss", G["loss"].reshape(()), loss.detach().numpy(), RTOL_VALUE, 0.0, out)
        ok, worst = ok and o, max(worst, r)
    if "logits" in G:
        o, r = compare("logits", G["logits"], logits.detach().numpy(), RTOL_VALUE, 0.0, out)
        ok, worst = ok and o, max(worst, r)
    gmax = max(float(p.grad.abs().max()) for p in model.params.values())
    atol = ATOL_GRAD_GLOBAL * gmax + ATOL_FLOOR
    for name, p in model.params.items():          # canonical order: the first offender is listed first
        key = "grad." + name
        if key not in G:
            continue
        o, r = compare(key, G[key], p.grad.numpy(), RTOL_GRAD, atol, out)
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
    specs = dict(nt.param_specs(config))
    if set(specs) != set(tensors):
        problems.append(f"checkpoint tensor names differ from MODEL.md: missing {sorted(set(specs) - set(tensors))}"
                        f", extra {sorted(set(tensors) - set(specs))}")
    else:
        for n, shp in specs.items():
            if tuple(tensors[n].shape) != shp:
                problems.append(f"{n}: shape {tuple(tensors[n].shape)}, expected {shp}")
            if tensors[n].dtype != torch.float32:
                problems.append(f"{n}: dtype {tensors[n].dtype}, expected float32")
        if not problems:
            problems += check_init(config, tensors)
    if problems:
        raise CaseFailure("; ".join(problems))
    B, T = case.bt
    seed = zlib.crc32(case.name.encode())
    ids, labels = make_tokens(config["arch"], config["vocab"], B, T, seed)
    mask = types = None
    if case.pad:
        ids, labels, mask, types = pad_tokens(config["arch"], ids, labels, config["type_vocab"], seed)
    tok = d / "X.safetensors"
    save_tokens(tok, ids, labels, mask, types)
    ok1, w1 = grads_compare(normlab, ckpt, tok, ids, labels, d / "G.safetensors", log, out, "init", mask, types)
    perturb_checkpoint(ckpt, pert, seed + 1)
    ok2, w2 = grads_compare(normlab, pert, tok, ids, labels, d / "GP.safetensors", log, out, "perturbed", mask, types)
    if not (ok1 and ok2):
        bad = [line.split()[0] for line in out if line.endswith("<-- MISMATCH")]
        raise CaseFailure(f"mismatch in {bad[0] if bad else 'output keys'}"
                          + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""))
    return max(w1, w2)


def run_train_case(case, normlab, d, out):
    log = []
    cfg0, ckpt = d / "C0.toml", d / "M.safetensors"
    write_toml(cfg0, {"model": case.model})
    run([normlab, "init", "--config", cfg0, "--out", ckpt], log)
    model, meta_cfg = nt.load_checkpoint(ckpt, torch.float64)
    problems = check_metadata_config(meta_cfg, case.intended_model())
    if problems:
        raise CaseFailure("; ".join(problems))
    B, T = case.bt
    ids, labels = make_tokens(model.config["arch"], model.config["vocab"], B, T, zlib.crc32(case.name.encode()))
    tok = d / "X.safetensors"
    save_tokens(tok, ids, labels)
    run_dir = d / "run"
    train = dict(case.train, batch_size=B, init_from=str(ckpt), out_dir=str(run_dir))
    cfg = d / "C.toml"
    write_toml(cfg, {"model": case.model, "train": train, "data": {"tokens": str(tok)}})
    run([normlab, "train", "--config", cfg], log)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        raise CaseFailure(f"{metrics} not written")
    recs = {}
    for line in metrics.read_text().splitlines():
        if line.strip():
            j = json.loads(line)
            if j.get("type") == "train":
                recs[int(j["step"])] = j
    ref = nt.train(model, torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64)),
                   case.train)
    ok, worst = True, 0.0
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
        out.append(line)
    if not ok:
        first = next((l for l in out if "MISMATCH" in l or "MISSING" in l), "step set")
        raise CaseFailure("training mismatch at " + first.strip())
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normlab", help="path to the normlab executable")
    ap.add_argument("--workdir", help="scratch directory (one sub-directory per case, recreated)")
    ap.add_argument("--case", action="append", nargs="+", default=[], help="case name(s) to run")
    ap.add_argument("--list", action="store_true", help="list the selected case names and exit")
    ap.add_argument("--extra", action="store_true", help="run only the --extra acceptance cases")
    ap.add_argument("--all", action="store_true", help="run the default and the --extra cases")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-tensor lines")
    args = ap.parse_args(argv)

    cases = build_cases()
    by_name = {c.name: c for c in cases}
    names = [n for group in args.case for n in group]
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            ap.error(f"unknown case(s): {unknown}; see --list")
        selected = [by_name[n] for n in names]
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
            status = f"FAIL {c.name}: {type(e).__name__}: {e}"
            failed += 1
        if out and (not args.quiet or status.startswith("FAIL")):
            print("\n".join(out))
        print(status, flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
