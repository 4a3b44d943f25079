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
"""

import argparse
import fnmatch
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
# and perturbed parameters, padded batches included): loss/logits/memory <= 3.6e-6 relative;
# gradients <= 13.4% of the bound below (i.e. <= ~1.3e-5 relative; x_gpt_bert_pieces_pad's wte);
# 10-step training loss <= 2e-7 relative, grad_norm <= 9.2e-6 relative.
# A C++ engine summing in a different order changes the constant, not the order of magnitude; the
# bounds keep >= 5x headroom (checked by selftest.py) while catching subtle bugs: GELU's erf form
# instead of the tanh form moves logits by 2-3e-4 and gradients by 2-9e-4 relative (>= 2x the
# bounds), weight decay wrongly applied to gains/biases moves the step-6 training loss by 1.5e-4.
RTOL_VALUE = 2e-5        # loss, logits and (encdec) memory (forward only)
RTOL_GRAD = 1e-4         # every grad.<name> ...
RTOL_GRAD_SCALAR = 4e-4  # ... except a one-element parameter (ReZero's scalar, SkipInit's gain): its gradient
                         # sums B*T*C products per sub-layer (x3 for a decoder layer's shared ReZero) with
                         # cancellation; torch float32 reaches 0.16 of the 1e-4 bound on encdec cases (e.g.
                         # h.0.rezero: 1.7e-5 relative), under the 5x headroom. A missing or unshared gain
                         # changes it by O(1).
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


def grad_rtol(shape):
    """RTOL of one grad.<name> tensor (see RTOL_GRAD_SCALAR)."""
    return RTOL_GRAD_SCALAR if math.prod(shape) == 1 else RTOL_GRAD


# ==================================================================================================
# Cases
# ==================================================================================================

SMALL = dict(d_model=32, n_heads=4, n_layers=2, d_ff=48, seq_len=8)
SMALL_BT = (3, 7)
EXTRA = dict(d_model=96, n_heads=6, n_layers=3, seq_len=32)
EXTRA_BT = (2, 17)
# deep but narrow: LayerScale's depth-dependent init (0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond)
DEEP = dict(d_model=8, n_heads=2, d_ff=12, seq_len=6)
DEEP_BT = (2, 5)
# encoder-decoder: odd sizes (C = 36 with 3 heads of 12, F = 52), N = 2 encoder and M = 3 decoder
# layers; (B, S, T) with S != T and T = seq_len (the whole position table is used)
ENCDEC = dict(arch="encdec", d_model=36, n_heads=3, n_layers=2, dec_layers=3, d_ff=52, seq_len=9)
ENCDEC_BST = (3, 7, 9)
ENCDEC_EXTRA = dict(arch="encdec", d_model=96, n_heads=6, n_layers=3, dec_layers=2, seq_len=32)
ENCDEC_EXTRA_BST = (2, 17, 13)

TRAIN_CFG = dict(steps=10, lr=3e-3, lr_schedule="warmup", warmup_steps=4, weight_decay=0.1,
                 beta1=0.9, beta2=0.95, adam_eps=1e-8, grad_clip=1.0)


class Case:
    def __init__(self, name, model, bt, kind="grads", sets=None, train=None, extra=False, pad=False,
                 masks=("src", "tgt"), fresh=False):
        self.name, self.model, self.kind = name, model, kind
        self.bt = bt                      # (B, T); encdec: (B, S, T)
        self.pad = pad                    # gpt / encoder: right-padded rows with an attention_mask (and token types)
        self.masks = tuple(masks)         # encdec: which padding masks the token file holds ("src", "tgt");
                                          # a row's target is right-padded either way (labels -100 there)
        self.sets = sets or []            # --set overrides passed to `normlab init`
        self.train = train
        self.fresh = fresh                # train: from the trainer's own init instead of train.init_from
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


NEW_METHODS = ("admin", "rezero", "skipinit", "layerscale", "tfixup", "residual")


def build_cases():
    cases = []
    for arch in ("gpt", "encoder"):
        for p in nt.PLACEMENTS:       # every method, new ones (admin ... tfixup) included
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
        # the methods of MODEL.md "Methods" beyond the one-per-method cases above
        Case("gpt_admin_sqrt", dict(SMALL, placement="admin", admin_init="sqrt"), SMALL_BT),
        Case("encoder_admin_one", dict(SMALL, arch="encoder", placement="admin", admin_init="one"), SMALL_BT),
        Case("gpt_admin_rmsnorm", dict(SMALL, placement="admin", norm="rmsnorm"), SMALL_BT),
        Case("gpt_mix_admin_rezero_layerscale", dict(SMALL, n_layers=3, placement=["admin", "rezero", "layerscale"]),
             SMALL_BT),
        Case("gpt_mix_skipinit_tfixup_pre", dict(SMALL, n_layers=3, placement="pre"), SMALL_BT,
             sets=['model.placement=["skipinit","tfixup","pre"]']),
        Case("gpt_rezero_nomlp", dict(SMALL, placement="rezero", mlp=False), SMALL_BT),
        Case("gpt_layerscale_noresidual", dict(SMALL, placement="layerscale", residual=False), SMALL_BT),
        Case("encoder_skipinit_pad", dict(SMALL, arch="encoder", placement="skipinit"), SMALL_BT, pad=True),
        Case("gpt_layerscale_pad", dict(SMALL, placement="layerscale", activation="gelu_exact"), SMALL_BT, pad=True),
        Case("gpt_pre_init_tfixup", dict(SMALL, placement="pre", init="tfixup"), SMALL_BT),
        Case("gpt_layerscale_depth19", dict(DEEP, n_layers=19, placement="layerscale"), DEEP_BT),
        # encoder-decoder: every method at least once in each stack, mixed per-layer lists, shared and
        # unshared embeddings, source and target padding, odd sizes
        Case("encdec_pre", dict(ENCDEC, placement="pre"), ENCDEC_BST),
        Case("encdec_post_unshared", dict(ENCDEC, placement="post", shared_embeddings=False, src_vocab=300),
             ENCDEC_BST),
        Case("encdec_mix_deepnorm_sandwich_pre_prepost", dict(
            ENCDEC, placement=["deepnorm", "sandwich", "pre", "prepost", "deepnorm"]), ENCDEC_BST),
        Case("encdec_mix_admin_rezero_skipinit_layerscale_none", dict(
            ENCDEC, placement=["admin", "rezero", "skipinit", "layerscale", "none"], shared_embeddings=False),
            ENCDEC_BST),
        Case("encdec_mix_layerscale_skipinit_rezero_admin_post", dict(ENCDEC, placement="pre"), ENCDEC_BST,
             sets=['model.placement=["layerscale","skipinit","rezero","admin","post"]']),
        Case("encdec_mix_none_prepost_sandwich_post_pre", dict(
            ENCDEC, placement=["none", "prepost", "sandwich", "post", "pre"], shared_embeddings=False,
            src_vocab=261), ENCDEC_BST),
        Case("encdec_tfixup_unshared", dict(ENCDEC, placement="tfixup", shared_embeddings=False), ENCDEC_BST),
        Case("encdec_tfixup_shared", dict(ENCDEC, placement="tfixup"), ENCDEC_BST),
        Case("encdec_deepnorm", dict(ENCDEC, placement="deepnorm"), ENCDEC_BST),
        Case("encdec_admin_sqrt_rmsnorm", dict(ENCDEC, placement="admin", admin_init="sqrt", norm="rmsnorm"),
             ENCDEC_BST),
        Case("encdec_rezero", dict(ENCDEC, placement="rezero"), ENCDEC_BST),
        Case("encdec_layerscale_skipinit", dict(ENCDEC, placement=["skipinit", "skipinit", "layerscale",
                                                                  "layerscale", "layerscale"]), ENCDEC_BST),
        Case("encdec_pre_nomasks", dict(ENCDEC, placement="pre"), ENCDEC_BST, masks=()),
        Case("encdec_post_srcmask", dict(ENCDEC, placement="post"), ENCDEC_BST, masks=("src",)),
        Case("encdec_sandwich_tgtmask", dict(ENCDEC, placement="sandwich"), ENCDEC_BST, masks=("tgt",)),
        # dec_layers omitted: M = N (2 + 2 layers)
        Case("encdec_default_dec_layers", dict({k: v for k, v in ENCDEC.items() if k != "dec_layers"},
                                               placement="prepost"), ENCDEC_BST),
        Case("encdec_pre_init_xavier", dict(ENCDEC, placement="pre", init="xavier"), ENCDEC_BST),
        Case("encdec_prepost_init_normal_gelu_exact", dict(ENCDEC, placement="prepost", init="normal",
                                                           activation="gelu_exact"), ENCDEC_BST),
        Case("encdec_pre_init_deepnet_relu", dict(ENCDEC, placement="pre", init="deepnet", activation="relu"),
             ENCDEC_BST),
        Case("encdec_sandwich_N1_M1", dict(ENCDEC, n_layers=1, dec_layers=1, placement="sandwich"), ENCDEC_BST),
        Case("encdec_pre_T1", dict(ENCDEC, placement="pre"), (2, 3, 1)),
        Case("encdec_post_S1", dict(ENCDEC, placement="post"), (2, 1, 4)),
        Case("encdec_layerscale_depths", dict(DEEP, arch="encdec", n_layers=2, dec_layers=19,
                                              placement="layerscale"), (2, 5, 4)),
        Case("train_gpt_pre", dict(SMALL, placement="pre"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_gpt_post", dict(SMALL, placement="post"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_encoder_pre", dict(SMALL, arch="encoder", placement="pre"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
        Case("train_encdec_mix", dict(ENCDEC, placement=["pre", "post", "pre", "deepnorm", "pre"]), ENCDEC_BST,
             kind="train", train=TRAIN_CFG),
        # ResiDual (two streams per stack): every arch, both norms, padding, BERT pieces around it, an encdec
        # whose stacks differ (each stack has its own second stream), attention-only, and training
        Case("gpt_residual_rmsnorm_pad", dict(SMALL, placement="residual", norm="rmsnorm"), SMALL_BT, pad=True),
        Case("encoder_residual_bert_pieces_pad", dict(SMALL, arch="encoder", placement="residual", embed_norm=True,
                                                      head="mlm", type_vocab=2), SMALL_BT, pad=True),
        Case("encdec_residual", dict(ENCDEC, placement="residual"), ENCDEC_BST),
        Case("encdec_residual_pre_unshared_rmsnorm", dict(ENCDEC, placement=["residual"] * 2 + ["pre"] * 3,
             shared_embeddings=False, src_vocab=300, norm="rmsnorm"), ENCDEC_BST),
        Case("encdec_post_residual_tgtmask", dict(ENCDEC, placement=["post"] * 2 + ["residual"] * 3), ENCDEC_BST,
             masks=("tgt",)),
        Case("encdec_residual_nomlp_T1", dict(ENCDEC, placement="residual", mlp=False), (2, 3, 1)),
        Case("train_gpt_residual", dict(SMALL, placement="residual"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_encdec_residual", dict(ENCDEC, placement="residual"), ENCDEC_BST, kind="train", train=TRAIN_CFG),
        # Admin's profile: both chains (the decoder's after a pre layer), from the trainer's own init
        Case("train_encdec_admin_profile", dict(ENCDEC, placement=["admin", "admin", "admin", "pre", "admin"],
             admin_init="profile"), ENCDEC_BST, kind="train", train=TRAIN_CFG, fresh=True),
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
        for p in NEW_METHODS:
            ex.append(Case(f"x_{arch}_{p}", dict(EXTRA, arch=arch, placement=p), EXTRA_BT, extra=True))
    ex.append(Case("x_gpt_mix_admin_layerscale_rezero_pad", dict(EXTRA, placement=["admin", "layerscale", "rezero"]),
                   EXTRA_BT, extra=True, pad=True))
    ex.append(Case("x_gpt_layerscale_depth25", dict(DEEP, n_layers=25, placement="layerscale"), DEEP_BT,
                   extra=True))
    for p in ("post", "pre", "deepnorm", "admin", "tfixup", "residual"):
        ex.append(Case(f"x_encdec_{p}", dict(ENCDEC_EXTRA, placement=p), ENCDEC_EXTRA_BST, extra=True))
    ex += [
        Case("x_encdec_mix_all_unshared", dict(ENCDEC_EXTRA, placement=["sandwich", "rezero", "layerscale",
             "skipinit", "prepost"], shared_embeddings=False, src_vocab=259, norm="rmsnorm"),
             ENCDEC_EXTRA_BST, extra=True),
        Case("x_encdec_pre_nomlp", dict(ENCDEC_EXTRA, placement="pre", mlp=False), ENCDEC_EXTRA_BST, extra=True),
        Case("x_encdec_post_noresidual", dict(ENCDEC_EXTRA, placement="post", residual=False), ENCDEC_EXTRA_BST,
             extra=True),
    ]
    ex.append(Case("x_train_gpt_sandwich", dict(EXTRA, placement="sandwich"), EXTRA_BT, kind="train",
                   train=TRAIN_CFG, extra=True))
    ex.append(Case("x_train_encoder_deepnorm", dict(EXTRA, arch="encoder", placement="deepnorm"), EXTRA_BT,
                   kind="train", train=TRAIN_CFG, extra=True))
    # New methods in training. They assume that `normlab train` with train.init_from keeps the
    # checkpoint's Admin omegas (the profile initialization is for a *fresh* model, MODEL.md).
    ex.append(Case("x_train_gpt_rezero_skipinit_layerscale", dict(SMALL, n_layers=3,
                   placement=["rezero", "skipinit", "layerscale"]), SMALL_BT, kind="train", train=TRAIN_CFG,
                   extra=True))
    ex.append(Case("x_train_gpt_admin", dict(SMALL, placement="admin"), SMALL_BT, kind="train", train=TRAIN_CFG,
                   extra=True))
    # admin_init = profile, a fresh model: the trainer profiles the omegas on the (fixed) batch before step 1
    ex.append(Case("x_train_gpt_admin_profile", dict(SMALL, n_layers=3, placement="admin", admin_init="profile"),
                   SMALL_BT, kind="train", train=TRAIN_CFG, extra=True, fresh=True))
    # ... and from a checkpoint (train.init_from) it keeps the checkpoint's omegas (the log values)
    ex.append(Case("x_train_gpt_admin_profile_init_from", dict(SMALL, placement="admin", admin_init="profile"),
                   SMALL_BT, kind="train", train=TRAIN_CFG, extra=True))
    ex.append(Case("x_train_encdec_methods", dict(ENCDEC, placement=["admin", "layerscale", "rezero", "skipinit",
                   "tfixup"], shared_embeddings=False), ENCDEC_BST, kind="train", train=TRAIN_CFG, extra=True))
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


def encdec_special_ids(config):
    """(BOS, EOS, number of byte ids) of an encdec vocabulary: 256, 257, 256 for the default 258
    (a smaller vocabulary -- only in selftest.py's tiny models -- uses its last two ids)."""
    V = config["vocab"]
    return min(nt.BOS_TOKEN, V - 2), min(nt.EOS_TOKEN, V - 1), min(256, V - 2)


def make_encdec_tokens(config, B, S, T, seed, masks=("src", "tgt")):
    """A random seq2seq batch in Hugging Face's names (MODEL.md, "Token files of an encoder-decoder").

    Source row b keeps max(1, S - 2b) tokens (right padding, attention_mask 0 after them); target row b
    has k = max(1, T - 3b) - 1 bytes y: decoder_input_ids = [BOS, y_1 .. y_k, 0 ...], labels =
    [y_1 .. y_k, EOS, -100 ...], decoder_attention_mask 1 on the first k + 1 positions. Padded ids are 0.
    masks: which of the two masks the batch holds ("src", "tgt"); the target is right-padded anyway.
    """
    rng = np.random.RandomState(seed)
    bos, eos, n_bytes = encdec_special_ids(config)
    src_vocab = config["vocab"] if config["shared_embeddings"] else config["src_vocab"]
    src = rng.randint(0, min(256, src_vocab), size=(B, S))
    src_mask = np.zeros((B, S), np.int32)
    y = rng.randint(0, n_bytes, size=(B, T))
    dec_in = np.zeros((B, T), np.int64)
    labels = np.full((B, T), nt.IGNORE_INDEX, np.int64)
    dec_mask = np.zeros((B, T), np.int32)
    for b in range(B):
        src_mask[b, :max(1, S - 2 * b)] = 1
        n = max(1, T - 3 * b)                       # real decoder positions: BOS + k bytes
        dec_in[b, 0] = bos
        dec_in[b, 1:n] = y[b, :n - 1]
        labels[b, :n - 1] = y[b, :n - 1]
        labels[b, n - 1] = eos
        dec_mask[b, :n] = 1
    src = np.where(src_mask == 1, src, 0)
    batch = {"input_ids": src.astype(np.int32), "decoder_input_ids": dec_in.astype(np.int32),
             "labels": labels.astype(np.int32)}
    if "src" in masks:
        batch["attention_mask"] = src_mask
    if "tgt" in masks:
        batch["decoder_attention_mask"] = dec_mask
    return batch


def make_batch(case, config, seed):
    """The token file of a case: name -> int32 array (the names of MODEL.md's token files)."""
    if config["arch"] == "encdec":
        B, S, T = case.bt
        return make_encdec_tokens(config, B, S, T, seed, case.masks)
    B, T = case.bt
    ids, labels = make_tokens(config["arch"], config["vocab"], B, T, seed)
    batch = {"input_ids": ids, "labels": labels}
    if case.pad:
        ids, labels, mask, types = pad_tokens(config["arch"], ids, labels, config["type_vocab"], seed)
        batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if types is not None:
            batch["token_type_ids"] = types
    return batch


def save_batch(path, batch):
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v.astype(np.int32)) for k, v in batch.items()}, str(path))


# token file name -> keyword of normlab_torch.forward_params
FORWARD_KEYS = {"token_type_ids": "token_types", "attention_mask": "key_mask",
                "decoder_input_ids": "decoder_input_ids", "decoder_attention_mask": "decoder_mask"}


def forward_inputs(batch):
    """(input_ids, labels, kwargs) of normlab_torch.forward_params / train for a token-file batch."""
    t = {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in batch.items()}
    return t["input_ids"], t["labels"], {FORWARD_KEYS[k]: v for k, v in t.items() if k in FORWARD_KEYS}


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

def metadata_key_optional(config, key):
    """Keys that may be absent from checkpoint metadata because they cannot affect that model:
    admin_init without an admin layer, src_vocab with shared embeddings. (MODEL.md says "every key
    explicit"; the engine writes these two only where they matter -- a reading we accept. When
    present they must still equal the normalized value.)"""
    if key == "admin_init":
        return "admin" not in config["placement"]
    if key == "src_vocab":
        return config.get("shared_embeddings", True)
    return False


def check_metadata_config(meta_cfg, intended):
    """The metadata must hold every key explicitly, equal to the normalized intended config."""
    want = nt.normalize_config(intended)
    problems = []
    for k, v in want.items():
        if k not in meta_cfg:
            if not metadata_key_optional(want, k):
                problems.append(f"metadata config lacks key {k!r}")
            continue
        m = meta_cfg[k]
        if isinstance(v, float) and not isinstance(m, bool) and isinstance(m, (int, float)):
            if not math.isclose(float(m), v, rel_tol=RTOL_CONFIG_FLOAT, abs_tol=0.0):
                problems.append(f"metadata {k} = {m!r}, expected {v!r}")
        elif m != v:
            problems.append(f"metadata {k} = {m!r}, expected {v!r}")
    return problems


def _init_stack_constants(config, name):
    """MODEL.md's per-stack constants for a parameter name, derived here independently of
    normlab_torch: depth (LayerScale, T-Fixup), S (Admin), beta (DeepNet), tfixup (T-Fixup matrices)."""
    arch, n = config["arch"], config["n_layers"]
    if arch == "encdec":
        N, M = n, config["dec_layers"]
        if name.startswith("enc."):
            return dict(depth=N, S=2 * N, beta=0.87 * (N ** 4 * M) ** (-1 / 16), tfixup=0.67 * N ** -0.25)
        return dict(depth=M, S=3 * M, beta=(12 * M) ** -0.25, tfixup=(9 * M) ** -0.25)
    tf = 0.67 * n ** -0.25 if arch == "encoder" else (9 * n) ** -0.25
    return dict(depth=n, S=2 * n, beta=(8 * n) ** -0.25, tfixup=tf)


def _layer_method(config, name):
    """The method of the layer a parameter belongs to ("h.3.attn.qkv.weight" -> placement[N + 3] in an
    encdec, placement[3] otherwise), or None outside the layers."""
    parts = name.split(".")
    if parts[0] == "enc" and len(parts) > 2 and parts[1] == "h":
        return config["placement"][int(parts[2])]
    if parts[0] == "h":
        off = config["n_layers"] if config["arch"] == "encdec" else 0
        return config["placement"][off + int(parts[1])]
    return None


def check_init(config, tensors):
    """Statistical check of MODEL.md's init schemes on a freshly initialized checkpoint; the constant
    inits (norms, biases, Admin omega, SkipInit / LayerScale gains, ReZero) exactly (to float32)."""
    C, std0 = config["d_model"], config["init_std"]
    scheme = config["init"]
    total_layers = config["n_layers"] + (config["dec_layers"] if config["arch"] == "encdec" else 0)
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

    def const_ok(name, w, want, what):
        if not np.allclose(w, want, rtol=1e-6, atol=0.0):
            problems.append(f"{name}: {what} init must be all {want:.7g}, got {np.unique(w)[:4]}")

    for name, _ in nt.param_specs(config):
        w = tensors[name].numpy().astype(np.float64)
        k = _init_stack_constants(config, name)
        method = _layer_method(config, name)
        if nt.is_norm_param(name):
            want = 1.0 if name.endswith(".weight") else 0.0
            if not np.all(w == want):
                problems.append(f"{name}: init must be all {want}")
        elif name.endswith(".bias"):
            if not np.all(w == 0):
                problems.append(f"{name}: init must be all 0")
        elif name.endswith(".omega"):          # Admin: log (also without data for profile), sqrt, one
            S = k["S"]
            want = {"log": math.sqrt((S + 1) / math.log(S + 1) - 1), "profile": math.sqrt((S + 1) / math.log(S + 1) - 1),
                    "sqrt": math.sqrt(S), "one": 1.0}[config["admin_init"]]
            const_ok(name, w, want, f"admin ({config['admin_init']}, S={S}) omega")
        elif name.endswith(".rezero"):
            const_ok(name, w, 0.0, "ReZero")
        elif name.endswith(".gain"):
            if method == "skipinit":
                const_ok(name, w, 0.0, "SkipInit gain")
            else:
                d = k["depth"]
                const_ok(name, w, 0.1 if d <= 18 else 1e-5 if d <= 24 else 1e-6, f"LayerScale (depth {d}) gain")
        elif name in ("wte.weight", "enc.wte.weight"):
            if scheme == "tfixup":
                d = k["depth"]       # wte: the decoder stack (gpt / encoder-only: L); enc.wte: the encoder's N
                std_ok(name, w, C ** -0.5 * (9 * d) ** -0.25)
            else:
                std_ok(name, w, std0)
        elif name in ("wpe.weight", "enc.wpe.weight", "wtt.weight"):
            std_ok(name, w, std0)
        else:
            if name.endswith("attn.qkv.weight"):
                blocks = [("q", 0, C), ("k", C, 2 * C), ("v", 2 * C, 3 * C)]
            elif name.endswith("cross.kv.weight"):
                blocks = [("k", 0, C), ("v", C, 2 * C)]
            elif name.endswith("cross.q.weight"):
                blocks = [("q", 0, C)]
            else:
                blocks = [("", 0, w.shape[0])]
            in_layers = method is not None       # head.dense is outside the stacks: no beta, no T-Fixup scale
            for tag, r0, r1 in blocks:
                bn = f"{name}[{tag}]" if len(blocks) > 1 else name
                blk = w[r0:r1]
                fan_out, fan_in = r1 - r0, w.shape[1]
                if scheme == "normal":
                    std_ok(bn, blk, std0)
                elif scheme == "gpt2":
                    std_ok(bn, blk, std0 / math.sqrt(2 * total_layers) if name.endswith(".proj.weight") else std0)
                elif scheme in ("xavier", "tfixup"):
                    scale = k["tfixup"] if scheme == "tfixup" and in_layers and tag not in ("q", "k") else 1.0
                    a = math.sqrt(6.0 / (fan_in + fan_out)) * scale
                    if np.max(np.abs(blk)) > a * (1 + 1e-6):
                        problems.append(f"{bn}: {scheme} init exceeds bound {a:.5g}")
                    std_ok(bn, blk, a / math.sqrt(3.0))
                elif scheme == "deepnet":
                    gain = 1.0 if tag in ("q", "k") or not in_layers else k["beta"]
                    std_ok(bn, blk, gain * math.sqrt(2.0 / (fan_in + fan_out)))
    return problems


PERTURB_EMB_STD = 0.3       # wte/wpe: logits of std ~1-2, so the softmax is far from uniform
PERTURB_LINEAR_GAIN = 1.5   # linear weights ~ N(0, gain^2 / fan_in): pre-activations of order 1-2, so
                            # attention is peaked and GELU's tanh form differs measurably from erf's
PERTURB_OMEGA = (1.0, 2.0)  # Admin omega: U(1, 2) per channel (a shortcut that is not 1 nor constant)
PERTURB_GAIN = (0.3, 1.0)   # ReZero / SkipInit / LayerScale: magnitude U(0.3, 1), random sign (init 0 or
                            # tiny would hide the whole branch, and every gradient inside it)
EMBEDDINGS = ("wte.weight", "wpe.weight", "wtt.weight", "enc.wte.weight", "enc.wpe.weight")


def perturb_tensors(tensors, seed, config=None):
    """Move every parameter off its init into a regime with activations of order 1.

    Gains 1 -> 1 + 0.2 N, biases 0 -> 0.1 N, embeddings + N(0, 0.3^2), linear weights + N(0, 1.5^2/fan_in);
    Admin omegas := U(1, 2); ReZero / SkipInit / LayerScale gains := +-U(0.3, 1) (element-wise).
    With the (normalized) config: the output projections (`proj`) of a layer without any norm (none,
    rezero, skipinit, tfixup), init + perturbation, are multiplied by 1 / (2 sqrt(S)) (S residual
    sub-layers of its stack; T-Fixup's Xavier init is itself of gain ~0.5): each
    such sub-layer then adds ~1/S to the variance of the stream, which grows by ~e over the stack
    instead of ~3x per sub-layer (an encdec decoder of 3 layers without norms would otherwise reach
    logits of ~1e3, where softmax and loss saturate and the comparison loses its power).
    With init values (gains 1, biases 0, std 0.02 weights, branch gains 0), a forgotten gain or bias, a
    swapped norm or a wrong activation form would be invisible; here they are not.
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
        elif name.endswith(".omega"):
            w = rng.uniform(*PERTURB_OMEGA, size=w.shape)
        elif name.endswith((".gain", ".rezero")):
            w = rng.uniform(*PERTURB_GAIN, size=w.shape) * rng.choice([-1.0, 1.0], size=w.shape)
        elif name in EMBEDDINGS:
            w = w + PERTURB_EMB_STD * rng.randn(*w.shape)
        else:
            damp = 1.0
            method = _layer_method(config, name) if config is not None else None
            if method is not None and name.endswith(".proj.weight") and not (
                    nt.METHODS[method].in_norm or nt.METHODS[method].out_norm):
                damp = 1.0 / (2.0 * math.sqrt(_init_stack_constants(config, name)["S"]))
            w = damp * (w + PERTURB_LINEAR_GAIN / math.sqrt(w.shape[1]) * rng.randn(*w.shape))
        out[name] = np.ascontiguousarray(w.astype(np.float32))
    return out


def perturb_checkpoint(src, dst, seed):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    with safe_open(str(src), framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    config = nt.normalize_config(json.loads(meta["config"]), strict=False)
    save_file(perturb_tensors(tensors, seed, config), str(dst), metadata=meta)


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
            status = f"FAIL {c.name}: {type(e).__name__}: {e}"
            failed += 1
        if out and (not args.quiet or status.startswith("FAIL")):
            print("\n".join(out))
        print(status, flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
