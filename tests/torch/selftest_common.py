"""selftest_common.py: what the oracle's self-checks share: the check() record, tiny configs,
perturbed models, batches and input dicts (selftest.py runs the checks)."""
import copy
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
# golden.py's cases, inputs and checks (selftest.py and selftest_methods.py take them from `import *`)
import golden_cases  # noqa: E402,F401
import golden_checks  # noqa: E402,F401
import golden_inputs  # noqa: E402
import normlab_torch as nt  # noqa: E402
from normlab_alt import alt_forward, transformer_forward  # noqa: E402

torch.set_num_threads(1)

RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append(bool(cond))
    print(("PASS " if cond else "FAIL ") + name + (f": {detail}" if detail else ""), flush=True)


TINY = dict(d_model=8, n_heads=2, n_layers=2, d_ff=12, vocab=11, seq_len=6)
# encdec for gradcheck: odd sizes, HS = 2, N = 2 encoder and M = 3 decoder layers, S = 5, T = 7
TINY_ED = dict(arch="encdec", d_model=6, n_heads=3, n_layers=2, dec_layers=3, d_ff=10, vocab=11, seq_len=7)
TINY_ED_BST = (2, 5, 7)
# the brief's size for the directional-derivative check
MID_ED = dict(arch="encdec", d_model=36, n_heads=3, n_layers=2, dec_layers=3, d_ff=44, seq_len=8)
MID_ED_BST = (2, 5, 7)


def perturbed_model(cfg, seed=0, dtype=torch.float64):
    """A model whose gains/biases are not at their init values (so no term hides behind 1 or 0)."""
    m = nt.Model(cfg, dtype)
    g = torch.Generator().manual_seed(seed)
    # T-Fixup's Xavier weights are already of order 1/sqrt(fan): x5 would saturate everything
    scale = 1.0 if m.config["init"] == "tfixup" else 5.0
    with torch.no_grad():
        for name, p in m.params.items():
            if nt.is_norm_param(name) and name.endswith(".weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
            elif name.endswith(".bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
            elif name.endswith(".omega"):      # Admin: channel-varying, in [1, 2]
                p.copy_(1.0 + torch.rand(p.shape, generator=g, dtype=torch.float64).to(dtype))
            elif name.endswith((".gain", ".rezero")):   # ReZero / SkipInit / LayerScale: +-[0.3, 1]
                u = 0.3 + 0.7 * torch.rand(p.shape, generator=g, dtype=torch.float64)
                sign = torch.where(torch.rand(p.shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
                p.copy_((u * sign).to(dtype))
            else:
                p.mul_(scale)   # weights of std ~0.1: activations of order 1, softmax not uniform
    return m


def batch(cfg, B=2, T=5, seed=0):
    c = nt.normalize_config(cfg)
    ids, labels = golden_inputs.make_tokens(c["arch"], c["vocab"] if c["arch"] == "gpt" else min(c["vocab"], 256),
                                     B, T, seed)
    if c["arch"] == "encoder":   # tiny vocab: map the mask token into range
        ids = np.where(ids == nt.MASK_TOKEN, c["vocab"] - 1, ids % c["vocab"])
        labels = np.where(labels == nt.IGNORE_INDEX, labels, labels % c["vocab"])
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))


def inputs(cfg, bt, seed=0, masks=("src", "tgt"), pad=False):
    """(ids, labels, forward kwargs) of any arch: golden.py's batches (encdec:
    golden_inputs.make_encdec_tokens, source row b keeps S - 2b tokens, target row b T - 3b positions)."""
    c = nt.normalize_config(cfg)
    if c["arch"] == "encdec":
        return golden_inputs.forward_inputs(golden_inputs.make_encdec_tokens(c, *bt, seed, masks))
    ids, labels = batch(cfg, *bt, seed=seed)
    kw = {}
    if pad:
        ids, labels, mask, _ = golden_inputs.pad_tokens(c["arch"], ids.numpy(), labels.numpy(), 0, seed)
        ids, labels = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))
        kw["key_mask"] = torch.from_numpy(mask.astype(np.int64))
    return ids, labels, kw
