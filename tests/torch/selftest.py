#!/usr/bin/env python3
"""selftest.py: checks of the PyTorch oracle (normlab_torch.py) on its own, without the C++ engine.

    <build>/pyenv/bin/python tests/torch/selftest.py      (or /tmp/nlvenv/bin/python)

1. parameter names / order / presence rules (ln_f rule, rmsnorm has no .bias) vs hand-written lists;
2. the forward vs a second, independent implementation written differently: torch.nn built-ins
   (nn.MultiheadAttention, F.layer_norm, F.gelu(approximate="tanh"), F.embedding, F.linear) and
   one explicit formula per placement (post: N(x+F(x)), pre: x+F(N(x)), ...);
3. deepnorm is N(alpha*x + F(x)) with alpha = (2L)^(1/4), not N(x + alpha*F(x)); residual=false
   gives alpha = 0;
4. torch.autograd.gradcheck (float64, finite differences) of the loss w.r.t. every parameter, for
   every placement, per-layer lists, rmsnorm, relu, eps=0, residual=false, both archs;
5. the causal mask: gpt logits at position t do not depend on tokens after t; encoder ones do;
6. init distributions of init_params (every scheme) pass golden.check_init;
7. LR schedules (hand-computed values), AdamW param groups, grad clipping and a training run;
8. calibration (informational + headroom check): torch float32 vs float64 errors on golden.py's
   configurations (default and --extra) must stay golden.HEADROOM (5x) below golden.py's tolerances.

Prints one line per check and "N passed, M failed"; exit status 1 on any failure.
"""

import copy
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import normlab_torch as nt  # noqa: E402

torch.set_num_threads(1)

RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append(bool(cond))
    print(("PASS " if cond else "FAIL ") + name + (f": {detail}" if detail else ""), flush=True)


TINY = dict(d_model=8, n_heads=2, n_layers=2, d_ff=12, vocab=11, seq_len=6)


def perturbed_model(cfg, seed=0, dtype=torch.float64):
    """A model whose gains/biases are not at their init values (so no term hides behind 1 or 0)."""
    m = nt.Model(cfg, dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.params.items():
            if nt.is_norm_param(name) and name.endswith(".weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
            elif name.endswith(".bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
            else:
                p.mul_(5.0)   # weights of std ~0.1: activations of order 1, softmax not uniform
    return m


def batch(cfg, B=2, T=5, seed=0):
    c = nt.normalize_config(cfg)
    ids, labels = golden.make_tokens(c["arch"], c["vocab"] if c["arch"] == "gpt" else min(c["vocab"], 256),
                                     B, T, seed)
    if c["arch"] == "encoder":   # tiny vocab: map the mask token into range
        ids = np.where(ids == nt.MASK_TOKEN, c["vocab"] - 1, ids % c["vocab"])
        labels = np.where(labels == nt.IGNORE_INDEX, labels, labels % c["vocab"])
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))


# --------------------------------------------------------------------------------------------------
# 1. parameter names
# --------------------------------------------------------------------------------------------------

def test_param_names():
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="pre"))
    want = ["wte.weight", "wpe.weight",
            "h.0.attn.ln_in.weight", "h.0.attn.ln_in.bias", "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
            "h.0.attn.proj.weight", "h.0.attn.proj.bias",
            "h.0.mlp.ln_in.weight", "h.0.mlp.ln_in.bias", "h.0.mlp.fc.weight", "h.0.mlp.fc.bias",
            "h.0.mlp.proj.weight", "h.0.mlp.proj.bias", "ln_f.weight", "ln_f.bias"]
    got = [n for n, _ in nt.param_specs(c)]
    check("param names: pre layernorm, canonical order", got == want, f"{got}")
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="sandwich", norm="rmsnorm"))
    got = [n for n, _ in nt.param_specs(c)]
    want = ["wte.weight", "wpe.weight", "h.0.attn.ln_in.weight", "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
            "h.0.attn.proj.weight", "h.0.attn.proj.bias", "h.0.attn.ln_branch.weight",
            "h.0.mlp.ln_in.weight", "h.0.mlp.fc.weight", "h.0.mlp.fc.bias", "h.0.mlp.proj.weight",
            "h.0.mlp.proj.bias", "h.0.mlp.ln_branch.weight", "ln_f.weight"]
    check("param names: sandwich rmsnorm, canonical order", got == want, f"{got}")
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="prepost"))
    got = [n for n, _ in nt.param_specs(c) if "ln" in n]
    want = ["h.0.attn.ln_in.weight", "h.0.attn.ln_in.bias", "h.0.attn.ln_out.weight", "h.0.attn.ln_out.bias",
            "h.0.mlp.ln_in.weight", "h.0.mlp.ln_in.bias", "h.0.mlp.ln_out.weight", "h.0.mlp.ln_out.bias"]
    check("param names: prepost norms", got == want, f"{got}")
    shapes = dict(nt.param_specs(nt.normalize_config(dict(d_model=32, n_heads=4, n_layers=2, d_ff=48,
                                                          seq_len=8, arch="encoder"))))
    check("param shapes", shapes["wte.weight"] == (257, 32) and shapes["wpe.weight"] == (8, 32)
          and shapes["h.1.attn.qkv.weight"] == (96, 32) and shapes["h.1.mlp.fc.weight"] == (48, 32)
          and shapes["h.1.mlp.proj.weight"] == (32, 48) and shapes["h.1.attn.proj.bias"] == (32,))
    final = {}
    for pl in (["pre", "pre"], ["post", "pre"], ["pre", "post"], ["x", "sandwich"], ["pre", "prepost"],
               ["pre", "deepnorm"], ["pre", "none"]):
        pl = [p if p != "x" else "none" for p in pl]
        final[tuple(pl)] = nt.has_final_norm(nt.normalize_config(dict(TINY, placement=pl)))
    want = {("pre", "pre"): True, ("post", "pre"): True, ("pre", "post"): False, ("none", "sandwich"): True,
            ("pre", "prepost"): False, ("pre", "deepnorm"): False, ("pre", "none"): False}
    check("ln_f exists iff the last layer is pre or sandwich", final == want, f"{final}")
    c = nt.normalize_config(dict(placement="deepnorm"))
    check("config defaults resolved", c["d_ff"] == 512 and c["vocab"] == 256 and c["init"] == "deepnet"
          and c["placement"] == ["deepnorm"] * 4
          and nt.normalize_config({"arch": "encoder"})["vocab"] == 257
          and nt.normalize_config({})["init"] == "gpt2")
    ok = all(p.grad is None for p in nt.Model(TINY).parameters())
    m = nt.Model(dict(TINY, placement="sandwich"))
    check("Model params == param_specs", list(m.params) == [n for n, _ in nt.param_specs(m.config)]
          and all(tuple(p.shape) == s for (n, s), p in zip(nt.param_specs(m.config), m.parameters())) and ok)


# --------------------------------------------------------------------------------------------------
# 2. second implementation from torch.nn built-ins
# --------------------------------------------------------------------------------------------------

def alt_forward(model, ids, labels):
    """Independent forward: library building blocks, one written-out formula per placement."""
    c, P = model.config, model.params
    C, NH = c["d_model"], c["n_heads"]
    B, T = ids.shape
    L = c["n_layers"]

    def N(prefix, z):
        if c["norm"] == "layernorm":
            return F.layer_norm(z, (C,), P[prefix + ".weight"], P[prefix + ".bias"], c["eps"])
        return P[prefix + ".weight"] * z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + c["eps"])

    def attn(prefix, h):
        # torch's own multi-head attention (the functional core of nn.MultiheadAttention): its fused
        # in_proj is [q | k | v] rows, heads split as n*HS..(n+1)*HS, scale 1/sqrt(HS)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if c["arch"] == "gpt" else None
        y, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), h.transpose(0, 1), h.transpose(0, 1), C, NH,
            P[prefix + ".qkv.weight"], P[prefix + ".qkv.bias"], None, None, False, 0.0,
            P[prefix + ".proj.weight"], P[prefix + ".proj.bias"], training=False,
            need_weights=False, attn_mask=mask)
        return y.transpose(0, 1)

    def mlp(prefix, h):
        u = F.linear(h, P[prefix + ".fc.weight"], P[prefix + ".fc.bias"])
        a = F.gelu(u, approximate="tanh") if c["activation"] == "gelu" else F.relu(u)
        return F.linear(a, P[prefix + ".proj.weight"], P[prefix + ".proj.bias"])

    one = 1.0 if c["residual"] else 0.0
    x = F.embedding(ids, P["wte.weight"]) + P["wpe.weight"][:T].unsqueeze(0)
    for l, p in enumerate(c["placement"]):
        for sub, fn in (("attn", attn), ("mlp", mlp)):
            pre = f"h.{l}.{sub}"
            if p == "post":
                x = N(pre + ".ln_out", one * x + fn(pre, x))
            elif p == "pre":
                x = one * x + fn(pre, N(pre + ".ln_in", x))
            elif p == "sandwich":
                x = one * x + N(pre + ".ln_branch", fn(pre, N(pre + ".ln_in", x)))
            elif p == "prepost":
                x = N(pre + ".ln_out", one * x + fn(pre, N(pre + ".ln_in", x)))
            elif p == "deepnorm":
                x = N(pre + ".ln_out", one * (2 * L) ** 0.25 * x + fn(pre, x))
            elif p == "none":
                x = one * x + fn(pre, x)
    if c["placement"][-1] in ("pre", "sandwich"):
        x = N("ln_f", x)
    logits = F.linear(x, P["wte.weight"])
    logp = torch.log_softmax(logits, -1)
    sel = labels != -100
    loss = -logp[sel].gather(-1, labels[sel].unsqueeze(-1)).mean()
    return loss, logits


VARIANTS = []
for _arch in ("gpt", "encoder"):
    for _p in nt.PLACEMENTS:
        VARIANTS.append((f"{_arch}_{_p}", dict(TINY, arch=_arch, placement=_p)))
VARIANTS += [
    ("gpt_pre_rmsnorm", dict(TINY, placement="pre", norm="rmsnorm")),
    ("gpt_post_rmsnorm", dict(TINY, placement="post", norm="rmsnorm")),
    ("encoder_sandwich_rmsnorm", dict(TINY, arch="encoder", placement="sandwich", norm="rmsnorm")),
    ("gpt_pre_relu", dict(TINY, placement="pre", activation="relu")),
    ("gpt_pre_noresidual", dict(TINY, placement="pre", residual=False)),
    ("gpt_deepnorm_noresidual", dict(TINY, placement="deepnorm", residual=False)),
    ("gpt_mix3", dict(TINY, n_layers=3, placement=["pre", "post", "sandwich"])),
    ("encoder_mix3", dict(TINY, arch="encoder", n_layers=3, placement=["deepnorm", "prepost", "pre"])),
    ("gpt_mix_none_deepnorm", dict(TINY, placement=["none", "deepnorm"])),
    ("gpt_post_eps0", dict(TINY, placement="post", eps=0.0)),
    ("encoder_pre_rmsnorm_eps0", dict(TINY, arch="encoder", placement="pre", norm="rmsnorm", eps=0.0)),
]


def test_alt_forward():
    for name, cfg in VARIANTS:
        m = perturbed_model(cfg, seed=1)
        ids, labels = batch(cfg, seed=2)
        with torch.no_grad():
            l1, z1 = nt.forward(m, ids, labels)
            l2, z2 = alt_forward(m, ids, labels)
        err = max(abs(float(l1 - l2)), float((z1 - z2).abs().max()))
        check(f"forward == torch.nn built-ins: {name}", err < 1e-12, f"max err {err:.2e}")


# --------------------------------------------------------------------------------------------------
# 3. deepnorm formula
# --------------------------------------------------------------------------------------------------

def test_deepnorm():
    for L in (1, 2, 3, 6):
        a = nt.residual_alpha(nt.normalize_config(dict(TINY, n_layers=L, placement="deepnorm")), "deepnorm")
        check(f"deepnorm alpha = (2L)^(1/4), L={L}", abs(a - (2 * L) ** 0.25) < 1e-15, f"{a}")
    c = nt.normalize_config(dict(TINY, placement=["pre", "deepnorm"]))
    check("alpha = 1 for non-deepnorm layers of a mixed list", nt.residual_alpha(c, "pre") == 1.0
          and abs(nt.residual_alpha(c, "deepnorm") - 2 ** 0.5) < 1e-15)
    check("alpha = 0 without residual (deepnorm too)",
          nt.residual_alpha(nt.normalize_config(dict(TINY, residual=False)), "deepnorm") == 0.0)
    for norm in ("layernorm", "rmsnorm"):
        cfg = dict(TINY, placement="deepnorm", norm=norm)           # L = 2 -> alpha = sqrt(2)
        m = perturbed_model(cfg, seed=3)
        P = m.params
        cvec = torch.randn(TINY["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(4))
        with torch.no_grad():                                        # make F_attn(x) = cvec exactly
            P["h.0.attn.proj.weight"].zero_()
            P["h.0.attn.proj.bias"].copy_(cvec)
        x = torch.randn(2, 5, TINY["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            y = nt.sublayer(m.config, P, "h.0.attn", "deepnorm", nt.attention, x)
            alpha = 2 ** 0.5
            g = P["h.0.attn.ln_out.weight"]

            def hand_norm(z):
                if norm == "layernorm":
                    mu = z.mean(-1, keepdim=True)
                    return (z - mu) / ((z - mu).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * g \
                        + P["h.0.attn.ln_out.bias"]
                return z / (z.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * g
            right = hand_norm(alpha * x + cvec)
            wrong = hand_norm(x + alpha * cvec)
        e_right = float((y - right).abs().max())
        e_wrong = float((y - wrong).abs().max())
        check(f"deepnorm sublayer is N(alpha*x + F(x)) [{norm}]", e_right < 1e-12 and e_wrong > 1e-3,
              f"|y - N(a x + F)| = {e_right:.1e}, |y - N(x + a F)| = {e_wrong:.1e}")
        m2 = copy.deepcopy(m)
        m2.config = dict(m.config, residual=False)
        with torch.no_grad():
            y0 = nt.sublayer(m2.config, P, "h.0.attn", "deepnorm", nt.attention, x)
        e0 = float((y0 - hand_norm(cvec.expand_as(x))).abs().max())
        check(f"deepnorm with residual=false is N(F(x)) [{norm}]", e0 < 1e-12, f"{e0:.1e}")


# --------------------------------------------------------------------------------------------------
# 4. gradcheck
# --------------------------------------------------------------------------------------------------

def test_gradcheck():
    for name, cfg in VARIANTS:
        m = perturbed_model(cfg, seed=6)
        ids, labels = batch(cfg, B=2, T=4, seed=7)
        names = list(m.params)
        inputs = tuple(p.detach().clone().requires_grad_(True) for p in m.params.values())

        def f(*ts):
            return nt.forward_params(m.config, dict(zip(names, ts)), ids, labels)[0]
        try:
            ok = torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=True)
            detail = f"{sum(t.numel() for t in inputs)} inputs"
        except Exception as e:   # gradcheck's message names the offending input
            ok, detail = False, str(e).splitlines()[0][:300]
        check(f"gradcheck float64: {name}", ok, detail)


# --------------------------------------------------------------------------------------------------
# 5. causal mask
# --------------------------------------------------------------------------------------------------

def test_causality():
    for arch in ("gpt", "encoder"):
        cfg = dict(TINY, arch=arch, placement="pre")
        m = perturbed_model(cfg, seed=8)
        ids, _ = batch(cfg, B=1, T=6, seed=9)
        ids2 = ids.clone()
        ids2[0, 4] = (ids[0, 4] + 1) % 10
        with torch.no_grad():
            z1 = nt.forward(m, ids)[1]
            z2 = nt.forward(m, ids2)[1]
        before = float((z1[0, :4] - z2[0, :4]).abs().max())
        after = float((z1[0, 4:] - z2[0, 4:]).abs().max())
        if arch == "gpt":
            check("gpt: logits before t do not see token t", before == 0.0 and after > 1e-6,
                  f"before {before:.1e} after {after:.1e}")
        else:
            check("encoder: every position sees token t", before > 1e-6, f"{before:.1e}")


# --------------------------------------------------------------------------------------------------
# 6. init
# --------------------------------------------------------------------------------------------------

def test_init():
    for scheme in ("normal", "gpt2", "xavier", "deepnet", "auto"):
        for pl in ("pre", "deepnorm"):
            cfg = nt.normalize_config(dict(golden.SMALL, placement=pl, init=scheme, seed=11))
            t = {k: v.to(torch.float32) for k, v in nt.init_params(cfg).items()}
            probs = golden.check_init(cfg, t)
            check(f"init {scheme} ({pl}) passes golden.check_init", not probs, "; ".join(probs[:3]))
    # ... and check_init notices a wrong scheme (deepnet vs gpt2 std, fused-qkv fans for xavier)
    cfg = nt.normalize_config(dict(golden.SMALL, placement="pre", init="gpt2"))
    t = {k: v.to(torch.float32) for k, v in nt.init_params(cfg).items()}
    check("check_init rejects a gpt2 init read as deepnet", golden.check_init(dict(cfg, init="deepnet"), t))
    cfg = nt.normalize_config(dict(golden.SMALL, placement="deepnorm", init="deepnet"))
    t = {k: v.to(torch.float32) for k, v in nt.init_params(cfg).items()}
    C = cfg["d_model"]
    bad = dict(t)
    w = t["h.0.attn.qkv.weight"].clone()
    w[2 * C:] *= 1 / 0.5      # value rows with gain 1 instead of beta = (8L)^(-1/4) = 0.5
    bad["h.0.attn.qkv.weight"] = w
    check("check_init rejects deepnet value rows without beta", golden.check_init(cfg, bad))
    bad = dict(t)
    bad["h.1.attn.proj.bias"] = t["h.1.attn.proj.bias"] + 1e-3
    check("check_init rejects a non-zero bias", golden.check_init(cfg, bad))


# --------------------------------------------------------------------------------------------------
# 7. training pieces
# --------------------------------------------------------------------------------------------------

def test_training():
    tc = dict(steps=100, lr=1e-3, min_lr=1e-4, warmup_steps=10)
    f = lambda s, t: nt.lr_factor(dict(tc, lr_schedule=s), t)   # noqa: E731
    exp = [
        ("constant", 1, 1.0), ("constant", 50, 1.0),
        ("warmup", 1, 0.1), ("warmup", 10, 1.0), ("warmup", 11, 1.0), ("warmup", 5, 0.5),
        ("invsqrt", 1, 0.1), ("invsqrt", 10, 1.0), ("invsqrt", 40, 0.5), ("invsqrt", 90, 1 / 3),
        ("cosine", 5, 0.5), ("cosine", 10, 1.0), ("cosine", 100, 0.1), ("cosine", 55, 0.1 + 0.45),
    ]
    bad = [(s, t, f(s, t), v) for s, t, v in exp if abs(f(s, t) - v) > 1e-12]
    check("lr schedule values", not bad, f"{bad}")
    check("cosine with warmup 0 starts at 1", abs(nt.lr_factor(dict(tc, warmup_steps=0, lr_schedule="cosine"), 0)
                                                  - 1.0) < 1e-12 and
          abs(nt.lr_factor(dict(tc, warmup_steps=0, lr_schedule="cosine"), 100) - 0.1) < 1e-12)

    cfg = dict(golden.SMALL, placement="pre")
    m = nt.Model(cfg)
    opt, _ = nt.make_optimizer(m, dict(golden.TRAIN_CFG))
    decay_ids = {id(p) for p in opt.param_groups[0]["params"]}
    want = {id(p) for n, p in m.params.items() if n in ("wte.weight", "wpe.weight")
            or (n.endswith(".weight") and not nt.is_norm_param(n))}
    check("AdamW decay group = wte, wpe and linear weights", decay_ids == want
          and opt.param_groups[0]["weight_decay"] == 0.1 and opt.param_groups[1]["weight_decay"] == 0.0
          and len(opt.param_groups[0]["params"]) + len(opt.param_groups[1]["params"]) == len(m.params))

    ids, labels = batch(dict(cfg, vocab=256), B=3, T=7, seed=12)
    tcfg = dict(golden.TRAIN_CFG, steps=6, lr_schedule="cosine", warmup_steps=2, min_lr=3e-4)
    m = nt.Model(cfg)
    recs = nt.train(m, ids, labels, tcfg)
    lrs_ok = all(abs(r["lr"] - 3e-3 * nt.lr_factor(tcfg, r["step"])) < 1e-15 for r in recs)
    check("trainer lr of step s (1-based) = lr * f(s)", lrs_ok and abs(recs[0]["lr"] - 1.5e-3) < 1e-15,
          f"{[r['lr'] for r in recs]}")

    # a manual AdamW replica for 3 steps (clipping active), from the same start
    m1, m2 = nt.Model(cfg), nt.Model(cfg)
    tcfg = dict(golden.TRAIN_CFG, steps=3, grad_clip=0.5)
    recs = nt.train(m1, ids, labels, tcfg)
    b1, b2, eps, wd = 0.9, 0.95, 1e-8, 0.1
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in m2.params.items()}
    man = []
    for s in range(1, 4):
        m2.zero_grad()
        loss, _ = nt.forward(m2, ids, labels)
        loss.backward()
        gn = math.sqrt(sum(float((p.grad ** 2).sum()) for p in m2.parameters()))
        clip = min(1.0, 0.5 / (gn + 1e-6))
        lr = 3e-3 * nt.lr_factor(tcfg, s)
        with torch.no_grad():
            for n, p in m2.params.items():
                g = p.grad * clip
                mm, vv = state[n]
                mm.mul_(b1).add_((1 - b1) * g)
                vv.mul_(b2).add_((1 - b2) * g * g)
                if p.dim() == 2:
                    p.mul_(1 - lr * wd)
                mhat, vhat = mm / (1 - b1 ** s), vv / (1 - b2 ** s)
                p.sub_(lr * mhat / (vhat.sqrt() + eps))
        man.append((float(loss), gn))
    d = max(max(abs(a["loss"] - b[0]), abs(a["grad_norm"] - b[1])) for a, b in zip(recs, man))
    dp = max(float((p1 - p2).abs().max()) for p1, p2 in zip(m1.parameters(), m2.parameters()))
    check("trainer == hand-written AdamW + clipping", d < 1e-12 and dp < 1e-12, f"records {d:.1e} params {dp:.1e}")
    check("grad clipping was active in that run", all(r["grad_norm"] > 0.5 for r in recs),
          f"{[round(r['grad_norm'], 3) for r in recs]}")

    m = nt.Model(cfg)
    recs = nt.train(m, ids, labels, dict(golden.TRAIN_CFG, steps=30))
    check("training on a fixed batch lowers the loss", recs[-1]["loss"] < recs[0]["loss"] - 1.0,
          f"{recs[0]['loss']:.3f} -> {recs[-1]['loss']:.3f}")


# --------------------------------------------------------------------------------------------------
# 8. float32 calibration of golden.py's tolerances
# --------------------------------------------------------------------------------------------------

def test_calibration():
    worst_v = worst_g = 0.0
    for c in golden.build_cases():
        if c.kind != "grads":
            continue
        cfg = nt.normalize_config(c.intended_model())
        # the parameters golden.py's "perturbed" step uses (init + golden.perturb_tensors)
        t = golden.perturb_tensors({n: p.numpy() for n, p in nt.init_params(cfg).items()}, 13)
        t = {n: torch.from_numpy(v) for n, v in t.items()}
        m64, m32 = nt.Model(cfg, torch.float64), nt.Model(cfg, torch.float32)
        m64.load_tensors(t)
        m32.load_tensors(t)
        B, T = c.bt
        ids, labels = golden.make_tokens(cfg["arch"], cfg["vocab"], B, T, 14)
        ids, labels = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))
        res = {}
        for m in (m64, m32):
            loss, logits = nt.forward(m, ids, labels)
            loss.backward()
            res[m.dtype] = (loss.detach().double(), logits.detach().double(),
                            {n: p.grad.double() for n, p in m.params.items()})
        (l64, z64, g64), (l32, z32, g32) = res[torch.float64], res[torch.float32]
        v = max(abs(float(l32 - l64)) / abs(float(l64)), float((z32 - z64).abs().max() / z64.abs().max()))
        gmax = max(float(g.abs().max()) for g in g64.values())
        # error relative to what golden allows for that tensor
        g = max(float((g32[n] - g64[n]).abs().max()) /
                (golden.ATOL_GRAD_GLOBAL * gmax + golden.ATOL_FLOOR + golden.RTOL_GRAD * float(g64[n].abs().max()))
                for n in g64)
        worst_v, worst_g = max(worst_v, v), max(worst_g, g)
        print(f"  calib {c.name:32s} float32 rel err: loss/logits {v:.1e}  grads {g:.3f} of tolerance")
    check("float32 loss/logits error <= RTOL_VALUE / HEADROOM", worst_v <= golden.RTOL_VALUE / golden.HEADROOM,
          f"{worst_v:.1e}")
    check("float32 grad error <= tolerance / HEADROOM", worst_g <= 1 / golden.HEADROOM,
          f"{worst_g:.3f} of tolerance")

    worst_t = 0.0
    for c in golden.build_cases():
        if c.kind != "train":
            continue
        cfg = nt.normalize_config(c.intended_model())
        m64 = nt.Model(cfg, torch.float64)
        m64.load_tensors({n: p.detach().float() for n, p in m64.params.items()})
        m32 = nt.Model(cfg, torch.float32)
        m32.load_tensors({n: p.detach() for n, p in m64.params.items()})
        ids, labels = golden.make_tokens(cfg["arch"], cfg["vocab"], *c.bt, 15)
        ids, labels = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))
        r64 = nt.train(m64, ids, labels, c.train)
        r32 = nt.train(m32, ids, labels, c.train)
        rel = [abs(a["loss"] - b["loss"]) / b["loss"] /
               (golden.RTOL_TRAIN_LOSS * (1 + golden.RTOL_TRAIN_LOSS_GROWTH * (b["step"] - 1)))
               for a, b in zip(r32, r64)]
        gn = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(r32, r64))
        worst_t = max(worst_t, max(rel), gn / golden.RTOL_TRAIN_GRAD_NORM)
        print(f"  calib train {c.name:26s} float32 loss err {max(rel):.3f} of tolerance, grad_norm rel {gn:.1e};"
              f" loss {r64[0]['loss']:.3f} -> {r64[-1]['loss']:.3f}")
    check("float32 training error <= tolerance / HEADROOM", worst_t <= 1 / golden.HEADROOM,
          f"{worst_t:.3f} of tolerance")


def main():
    for t in (test_param_names, test_alt_forward, test_deepnorm, test_causality, test_init, test_training,
              test_gradcheck, test_calibration):
        try:
            t()
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(t.__name__, False, f"raised {type(e).__name__}: {e}")
    n_fail = RESULTS.count(False)
    print(f"{len(RESULTS) - n_fail} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
