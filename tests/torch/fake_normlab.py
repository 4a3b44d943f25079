#!/usr/bin/env python3
"""fake_normlab: a stand-in for the normlab CLI built on normlab_torch in float32.

It exists only to test golden.py itself (its plumbing, and that its tolerances are loose enough for
float32 rounding yet tight enough to catch bugs): `golden.py --normlab tests/torch/fake_normlab`.
Subcommands mirror the C++ CLI as far as golden.py uses it:

    init  --config C.toml --out M.safetensors [--set section.key=value ...]
    grads --checkpoint M --tokens X --out G
    train --config C.toml

FAKE_NORMLAB_BUG=<name> injects a deliberate bug (see BUGS) so one can see golden.py catch it; a bug
replaces an oracle function or table through nt.patch, which reaches every module of the oracle.
"""

import json
import os
import sys
import tomllib
from collections import OrderedDict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import normlab_torch as nt  # noqa: E402

torch.set_num_threads(1)

BUGS = {
    "none": "no bug",
    "deepnorm_alpha_on_branch": "deepnorm computes N(x + alpha*F(x))",
    "no_causal_mask": "gpt attention without the causal mask",
    "gelu_erf": "exact (erf) GELU instead of the tanh form",
    "ln_eps_outside": "LayerNorm divides by sqrt(var) + eps",
    "final_norm_always": "ln_f applied even when the last layer is post",
    "wd_on_all": "weight decay also on biases and gains",
    "lr_off_by_one": "the lr of step s uses f(s) with s 0-based",
    "grad_scale": "gradients 1.001x too large",
    "ignore_masks": "the token file's attention masks are not used",
    "cross_ignores_src_mask": "cross-attention attends to padded source positions",
    "decoder_not_causal": "encdec decoder self-attention without the causal mask",
    "encdec_deepnorm_gpt_alpha": "encdec DeepNorm alpha (2(N+M))^(1/4) in both stacks",
    "admin_omega_on_branch": "Admin computes LN(x + omega*F(x))",
    "layerscale_init_0.1": "LayerScale gains init 0.1 at every depth",
    "tfixup_embedding_unscaled": "T-Fixup token embeddings N(0, C^-1/2) without the (9M)^(-1/4) factor",
}
BUG = os.environ.get("FAKE_NORMLAB_BUG", "none")
if BUG not in BUGS:
    sys.exit(f"unknown FAKE_NORMLAB_BUG {BUG!r}; known: {sorted(BUGS)}")


def install_bug():
    # (the sub-layer bugs replace sublayer_parts: run_stack and sublayer both call it)
    if BUG == "deepnorm_alpha_on_branch":
        orig = nt.sublayer_parts

        def sublayer_parts(config, params, prefix, method, branch, x, key_mask=None, stack=None):
            if method != "deepnorm":
                return orig(config, params, prefix, method, branch, x, key_mask, stack)
            a = nt.shortcut_scale(config, params, prefix, method, stack)
            f = branch(config, params, prefix, x, key_mask)
            return nt.norm(config, params, prefix + ".ln_out", x + a * f), f, a, f
        nt.patch("sublayer_parts", sublayer_parts)
    elif BUG == "admin_omega_on_branch":
        orig = nt.sublayer_parts

        def sublayer_parts(config, params, prefix, method, branch, x, key_mask=None, stack=None):
            if method != "admin":
                return orig(config, params, prefix, method, branch, x, key_mask, stack)
            w = params[prefix + ".omega"]
            f = branch(config, params, prefix, x, key_mask)
            return nt.norm(config, params, prefix + ".ln_out", x + w * f), f, w, f
        nt.patch("sublayer_parts", sublayer_parts)
    elif BUG == "no_causal_mask":
        orig = nt.attention
        nt.patch("attention", lambda config, params, prefix, h, key_mask=None, causal=None: orig(
            config, params, prefix, h, key_mask, causal=False))
    elif BUG == "decoder_not_causal":
        orig = nt.stacks
        nt.patch("stacks", lambda config: [s._replace(causal=False) if s.name == "dec" else s for s in orig(config)])
    elif BUG == "encdec_deepnorm_gpt_alpha":
        orig = nt.stacks

        def stacks(config):
            st = orig(config)
            if config["arch"] != "encdec":
                return st
            a = (2.0 * (config["n_layers"] + config["dec_layers"])) ** 0.25
            return [s._replace(alpha=a) for s in st]
        nt.patch("stacks", stacks)
    elif BUG == "cross_ignores_src_mask":
        orig = nt.cross_attention
        nt.patch("cross_attention", lambda config, params, prefix, h, key_mask=None, memory=None: orig(
            config, params, prefix, h, None, memory))
    elif BUG == "layerscale_init_0.1":
        nt.patch("layerscale_init", lambda depth: 0.1)
    elif BUG == "tfixup_embedding_unscaled":
        orig = nt.stacks
        # the stacks' depth feeds (9 depth)^(-1/4) of the embeddings (and LayerScale): depth 1/9 -> factor 1
        nt.patch("stacks", lambda config: [s._replace(depth=1.0 / 9.0) for s in orig(config)]
                 if config["init"] == "tfixup" and not any(p == "layerscale" for p in config["placement"])
                 else orig(config))
    elif BUG == "gelu_erf":
        nt.patch("gelu_tanh", lambda u: torch.nn.functional.gelu(u))
    elif BUG == "ln_eps_outside":
        def layernorm(z, g, b, eps):
            m = z.mean(-1, keepdim=True)
            v = ((z - m) ** 2).mean(-1, keepdim=True)
            return (z - m) / (torch.sqrt(v) + eps) * g + b
        nt.patch("layernorm", layernorm)
    elif BUG == "final_norm_always":
        nt.patch("METHODS", OrderedDict((k, m._replace(final=True)) for k, m in nt.METHODS.items()))
    elif BUG == "lr_off_by_one":
        orig = nt.lr_factor
        nt.patch("lr_factor", lambda tc, t: orig(tc, max(t - 1, 1e-9)) if tc["lr_schedule"] != "constant" else 1.0)


install_bug()

# token file name -> keyword of normlab_torch.forward
FORWARD_KEYS = {"token_type_ids": "token_types", "attention_mask": "key_mask",
                "decoder_input_ids": "decoder_input_ids", "decoder_attention_mask": "decoder_mask"}


def token_inputs(tok):
    """(input_ids, labels, forward kwargs) from a token file's tensors."""
    kw = {FORWARD_KEYS[k]: v.long() for k, v in tok.items() if k in FORWARD_KEYS}
    if BUG == "ignore_masks":
        kw.pop("key_mask", None)
        kw.pop("decoder_mask", None)
    return tok["input_ids"].long(), tok["labels"].long(), kw


def arg(argv, flag, default=None, multi=False):
    vals = [argv[i + 1] for i, a in enumerate(argv) if a == flag and i + 1 < len(argv)]
    if multi:
        return vals
    if not vals and default is None:
        sys.exit(f"fake_normlab: missing {flag}")
    return vals[-1] if vals else default


def read_config(path, sets=()):
    cfg = tomllib.loads(Path(path).read_text())
    for s in sets:
        key, val = s.split("=", 1)
        sec, k = key.split(".", 1)
        cfg.setdefault(sec, {})[k] = tomllib.loads("v = " + val)["v"]
    return cfg


def cmd_init(argv):
    cfg = read_config(arg(argv, "--config"), arg(argv, "--set", multi=True))
    model = nt.Model(cfg.get("model", {}), torch.float32)
    nt.save_checkpoint(model, arg(argv, "--out"))


def cmd_grads(argv):
    from safetensors.torch import load_file, save_file
    model, _ = nt.load_checkpoint(arg(argv, "--checkpoint"), torch.float32)
    ids, labels, kw = token_inputs(load_file(arg(argv, "--tokens")))
    o = nt.forward_outputs(model.config, model.params, ids, labels, **kw)
    o["loss"].backward()
    scale = 1.001 if BUG == "grad_scale" else 1.0
    out = {"loss": o["loss"].detach().reshape(()), "logits": o["logits"].detach().contiguous()}
    if "memory" in o:
        out["memory"] = o["memory"].detach().contiguous()
    out.update({"grad." + n: ((p.grad if p.grad is not None else torch.zeros_like(p)) * scale).contiguous()
                for n, p in model.params.items()})
    save_file(out, arg(argv, "--out"))


def cmd_train(argv):
    from safetensors.torch import load_file
    cfg = read_config(arg(argv, "--config"), arg(argv, "--set", multi=True))
    tc = cfg["train"]
    ids, labels, kw = token_inputs(load_file(cfg["data"]["tokens"]))
    lines = []
    if "init_from" in tc:
        model, _ = nt.load_checkpoint(tc["init_from"], torch.float32)
    else:   # a fresh model (the init of `init`); admin_init = profile profiles it on the batch first
        model = nt.Model(cfg.get("model", {}), torch.float32)
        if model.config["admin_init"] == "profile" and "admin" in model.config["placement"]:
            omegas = nt.admin_profile(model.config, model.params, ids, **kw)
            lines.append(dict(type="admin_profile", omega=[v for _, v in omegas]))
    if BUG == "wd_on_all":
        orig = nt.make_optimizer

        def make_optimizer(m, t):
            opt, s = orig(m, t)
            opt.param_groups[1]["weight_decay"] = t["weight_decay"]
            return opt, s
        nt.patch("make_optimizer", make_optimizer)
    recs = nt.train(model, ids, labels, tc, **kw)
    out = Path(tc["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "w") as f:
        for r in lines + [dict(type="train", **r) for r in recs]:
            f.write(json.dumps(r) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: fake_normlab {init,grads,train} ...")
    {"init": cmd_init, "grads": cmd_grads, "train": cmd_train}[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
