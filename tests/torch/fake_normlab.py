#!/usr/bin/env python3
"""fake_normlab: a stand-in for the normlab CLI built on normlab_torch in float32.

It exists only to test golden.py itself (its plumbing, and that its tolerances are loose enough for
float32 rounding yet tight enough to catch bugs): `golden.py --normlab tests/torch/fake_normlab`.
Subcommands mirror the C++ CLI as far as golden.py uses it:

    init  --config C.toml --out M.safetensors [--set section.key=value ...]
    grads --checkpoint M --tokens X --out G
    train --config C.toml

FAKE_NORMLAB_BUG=<name> injects a deliberate bug (see BUGS) so one can see golden.py catch it.
"""

import json
import math
import os
import sys
import tomllib
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
}
BUG = os.environ.get("FAKE_NORMLAB_BUG", "none")
if BUG not in BUGS:
    sys.exit(f"unknown FAKE_NORMLAB_BUG {BUG!r}; known: {sorted(BUGS)}")


def install_bug():
    if BUG == "deepnorm_alpha_on_branch":
        orig = nt.sublayer

        def sublayer(config, params, prefix, placement, branch, x):
            if placement != "deepnorm":
                return orig(config, params, prefix, placement, branch, x)
            a = nt.residual_alpha(config, placement)
            return nt.norm(config, params, prefix + ".ln_out", x + a * branch(config, params, prefix, x))
        nt.sublayer = sublayer
    elif BUG == "no_causal_mask":
        orig = nt.attention
        nt.attention = lambda config, params, prefix, h: orig(dict(config, arch="encoder"), params, prefix, h)
    elif BUG == "gelu_erf":
        nt.gelu_tanh = lambda u: torch.nn.functional.gelu(u)
    elif BUG == "ln_eps_outside":
        def layernorm(z, g, b, eps):
            m = z.mean(-1, keepdim=True)
            v = ((z - m) ** 2).mean(-1, keepdim=True)
            return (z - m) / (torch.sqrt(v) + eps) * g + b
        nt.layernorm = layernorm
    elif BUG == "final_norm_always":
        nt.FINAL_NORM = nt.PLACEMENTS
    elif BUG == "lr_off_by_one":
        orig = nt.lr_factor
        nt.lr_factor = lambda tc, t: orig(tc, max(t - 1, 1e-9)) if tc["lr_schedule"] != "constant" else 1.0


install_bug()


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
    tok = load_file(arg(argv, "--tokens"))
    loss, logits = nt.forward(model, tok["input_ids"].long(), tok["labels"].long())
    loss.backward()
    scale = 1.001 if BUG == "grad_scale" else 1.0
    out = {"loss": loss.detach().reshape(()), "logits": logits.detach().contiguous()}
    out.update({"grad." + n: (p.grad * scale).contiguous() for n, p in model.params.items()})
    save_file(out, arg(argv, "--out"))


def cmd_train(argv):
    from safetensors.torch import load_file
    cfg = read_config(arg(argv, "--config"), arg(argv, "--set", multi=True))
    tc = cfg["train"]
    model, _ = nt.load_checkpoint(tc["init_from"], torch.float32)
    tok = load_file(cfg["data"]["tokens"])
    if BUG == "wd_on_all":
        orig = nt.make_optimizer

        def make_optimizer(m, t):
            opt, s = orig(m, t)
            opt.param_groups[1]["weight_decay"] = t["weight_decay"]
            return opt, s
        nt.make_optimizer = make_optimizer
    recs = nt.train(model, tok["input_ids"].long(), tok["labels"].long(), tc)
    out = Path(tc["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "w") as f:
        for r in recs:
            f.write(json.dumps(dict(type="train", **r)) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: fake_normlab {init,grads,train} ...")
    {"init": cmd_init, "grads": cmd_grads, "train": cmd_train}[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
