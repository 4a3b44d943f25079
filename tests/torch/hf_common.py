"""hf_common.py: what the parity checks against transformers share (hf_parity.py, hf_parity_tf5.py): the
tolerances, the list of failures every check appends to, the comparison, running normlab, perturbed
weights and padded batches, the map from a Llama-family parameter to normlab's gradient, normlab's logits
after a config.json edit (logits_with), config.json edits that must be refused, and the exit.

Tolerances (float32 engine vs float64 reference): hidden states and logits within 2e-5 of the
tensor's largest magnitude; gradients within 1e-4 of the tensor's largest magnitude (they pass
through one more accumulation over the batch); the loss within 1e-5 relative.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file

FWD_TOL = 2e-5
GRAD_TOL = 1e-4
LOSS_TOL = 1e-5

failures = []


def check(name, got, want, tol):
    """Records a failure unless max|got - want| <= tol * max|want|; returns whether it passed."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        failures.append(f"{name}: shape {got.shape} vs reference {want.shape}")
        return
    scale = max(np.abs(want).max(), 1e-30)
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err), err.shape) if err.size else ()
    rel = err.max() / scale if err.size else 0.0
    if not rel <= tol:
        failures.append(f"{name}: max |normlab - transformers| / max|ref| = {rel:.3g} > {tol:g} "
                        f"at {worst}: {got[worst]:.8g} vs {want[worst]:.8g}")
        return False
    return True


def run(normlab, *args, expect_ok=True):
    p = subprocess.run([normlab, *args], capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        raise SystemExit(f"normlab {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def padded_batch(vocab, B, T, lengths, seed, types=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(B, T)).astype(np.int32)
    mask = np.zeros((B, T), dtype=np.int32)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = 0
    tt = rng.integers(0, types, size=(B, T)).astype(np.int32) if types else None
    return ids, mask, tt


def llama_grad(got, hf, A, KV, F, sandwich=False, olmo2=False):
    """The normlab gradient of Hugging Face parameter `hf` (rows of the fused qkv, whose q part is A = heads x
    head_dim rows, and of fc); sandwich: Gemma 2's norms; olmo2: OLMo 2's (branch-output norms, q and k norms
    over the whole projections)."""
    n = hf[len("model."):] if hf.startswith("model.") else hf
    if n == "embed_tokens.weight":
        return got["grad.wte.weight"]
    if n == "norm.weight":
        return got["grad.ln_f.weight"]
    if n == "lm_head.weight":
        return got["grad.lm_head.weight"]
    parts = n.split(".")
    l, rest = parts[1], ".".join(parts[2:])
    h = f"grad.h.{l}."
    rows = {"q_proj": (0, A), "k_proj": (A, A + KV), "v_proj": (A + KV, A + 2 * KV)}
    if rest.startswith("self_attn.") and rest.split(".")[1] in rows:
        a, b = rows[rest.split(".")[1]]
        return got[h + "attn.qkv." + rest.split(".")[2]][a:b]
    simple = {"input_layernorm.weight": "attn.ln_in.weight", "post_attention_layernorm.weight": "mlp.ln_in.weight",
              "self_attn.qkv_proj.weight": "attn.qkv.weight", "mlp.gate_up_proj.weight": "mlp.fc.weight",  # Phi-3
              "self_attn.o_proj.weight": "attn.proj.weight", "self_attn.o_proj.bias": "attn.proj.bias",
              "mlp.down_proj.weight": "mlp.proj.weight", "mlp.down_proj.bias": "mlp.proj.bias"}
    simple.update({"self_attn.q_norm.weight": "attn.q_norm.weight", "self_attn.k_norm.weight": "attn.k_norm.weight"})
    if olmo2:
        simple.update({"post_attention_layernorm.weight": "attn.ln_branch.weight",
                       "post_feedforward_layernorm.weight": "mlp.ln_branch.weight"})
    if sandwich:   # Gemma 2: a norm on each branch's output; the FFN's input norm has its own name
        simple.update({"post_attention_layernorm.weight": "attn.ln_branch.weight",
                       "pre_feedforward_layernorm.weight": "mlp.ln_in.weight",
                       "post_feedforward_layernorm.weight": "mlp.ln_branch.weight"})
    if rest in simple:
        return got[h + simple[rest]]
    kind, p = rest.split(".")[1], rest.split(".")[2]
    fc = got[h + "mlp.fc." + p]
    return fc[:F] if kind == "gate_proj" else fc[F:]


def config_refusals(normlab, work, label, cases, d=None, tok=None):
    """Edits of a directory's config.json (`d`, default work/label, its tokens `tok`) that normlab does not
    represent (name, {key: value}, expected words): each refused with one line naming it, nothing written."""
    d = d or os.path.join(work, label)
    tok = tok or os.path.join(d, "tokens.safetensors")
    for name, edit, expected in cases:
        bad = os.path.join(work, label + "_bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(d, bad)
        with open(os.path.join(bad, "config.json")) as f:
            config = json.load(f)
        config.update(edit)
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(config, f)
        out = os.path.join(bad, "refused.safetensors")
        p = run(normlab, "grads", "--checkpoint", bad, "--tokens", tok, "--out", out, expect_ok=False)
        msg = (p.stderr or "").strip()
        if p.returncode != 1 or expected not in msg or len(msg.splitlines()) != 1 or os.path.exists(out):
            failures.append(f"{label} {name}: exit {p.returncode}, expected one line with '{expected}', got {msg!r}")


def logits_with(normlab, work, name, d, tok, edit):
    """normlab's logits on a copy of directory d whose config.json is changed by edit(config)."""
    v = os.path.join(work, f"{name}_variant")
    shutil.rmtree(v, ignore_errors=True)
    shutil.copytree(d, v)
    with open(os.path.join(v, "config.json")) as f:
        config = json.load(f)
    edit(config)
    with open(os.path.join(v, "config.json"), "w") as f:
        json.dump(config, f)
    out = os.path.join(v, "out.safetensors")
    run(normlab, "grads", "--checkpoint", v, "--tokens", tok, "--out", out)
    return load_file(out)["logits"]


def finish(passed):
    """Lists the failures and exits 1, or prints `passed`."""
    if failures:
        print(f"\n{len(failures)} FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print(passed)
