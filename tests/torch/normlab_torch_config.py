"""normlab_torch_config: the oracle's model config (docs/MODEL.md): the special token ids, the table of
methods (the values of `placement`), the config defaults and normalize_config, and the layer stacks a
config describes (stacks, with each stack's DeepNorm / DeepNet / T-Fixup / Admin constants).

Part of the PyTorch oracle; normlab_torch.py is the entry point and lists the whole API.
"""

import math
from collections import OrderedDict, namedtuple

IGNORE_INDEX = -100
MASK_TOKEN = 256     # encoder's mask token
BOS_TOKEN = 256      # encdec: the decoder's first input
EOS_TOKEN = 257      # encdec: the last label

# --------------------------------------------------------------------------------------------------
# Methods (MODEL.md, "Methods: the values of `placement`")
#
#   h = ln_in(x) if in_norm;  f = F(h);  g = ln_branch(f) if branch_norm
#   r = omega * x + lambda * g;  x' = ln_out(r) if out_norm
#
# shortcut (omega): "one" 1 | "deepnorm" the DeepNorm alpha of the stack | "omega" the (C) parameter
#                   `{prefix}.omega` (Admin).  residual = false makes omega 0 for every method.
# branch (lambda):  "one" 1 | "rezero" the (1) parameter `{layer prefix}.rezero` shared by the layer's
#                   sub-layers | "gain" the (1) parameter `{prefix}.gain` | "gain_c" the (C) one.
# final:            the stack ends with a final norm iff its last layer's method has final = True.
# dual:             a second stream x_d (ResiDual): it starts as the stack's input, every sub-layer
#                   adds g to it, and the stack ends x + ln_f(x_d) instead of ln_f(x). A stack is
#                   all dual or not dual at all (normalize_config refuses a mix).
# --------------------------------------------------------------------------------------------------

# embed:            a norm ln_emb of the embedding output when the stack's first layer has this method
#                   (Peri-LN; gpt and encoder only), as if embed_norm were set.
# lns:              ln_in's output times 1/sqrt(l), l = 1..L the layer's depth in its stack (LayerNorm
#                   Scaling, Sun et al. 2025).
# ffn:              the feed-forward sub-layer's (in_norm, branch_norm, out_norm) when they differ from
#                   the attention's (HybridNorm: N(h) is the attention's out norm, and the FFN has
#                   none, so x' = N(h) + FFN(N(h)) as the authors' code computes it).
# qkv:              the self-attention normalizes q, k and v (QKV-norm; per head unless qk_norm = whole).
# sphere:           nGPT (Loshchilov et al. 2025; the reference code NVIDIA/ngpt, model.py): shortcut
#                   "sphere" r = A + |a| (g - A), A = x/|x|, a = eigen_lr * 0.05 sqrt(C); q and k heads
#                   after RoPE become sqk sqrt(C) * q/|q| (one sqk (C) for both), scores times sqrt(HS);
#                   fc's output times suv sqrt(C); the logits times sz sqrt(C); every matrix renormalized
#                   after each optimizer step (normlab_torch_train).
Method = namedtuple("Method", "in_norm branch_norm out_norm shortcut branch final dual embed lns ffn qkv sphere",
                    defaults=(False, False, False, None, False, False))

METHODS = OrderedDict([
    ("post",       Method(False, False, True,  "one",      "one",    False)),   # Vaswani et al. 2017
    ("pre",        Method(True,  False, False, "one",      "one",    True)),    # Xiong et al. 2020, GPT-2
    ("sandwich",   Method(True,  True,  False, "one",      "one",    True)),    # CogView
    ("prepost",    Method(True,  False, True,  "one",      "one",    False)),   # "Sandwich-LN" of source 001
    ("deepnorm",   Method(False, False, True,  "deepnorm", "one",    False)),   # DeepNet
    ("none",       Method(False, False, False, "one",      "one",    False)),
    ("admin",      Method(False, False, True,  "omega",    "one",    False)),   # Admin (Liu et al. 2020)
    ("rezero",     Method(False, False, False, "one",      "rezero", False)),   # ReZero
    ("skipinit",   Method(False, False, False, "one",      "gain",   False)),   # SkipInit
    ("layerscale", Method(True,  False, False, "one",      "gain_c", True)),    # LayerScale (CaiT)
    ("tfixup",     Method(False, False, False, "one",      "one",    False)),   # T-Fixup: init only
    ("residual",   Method(False, False, True,  "one",      "one",    True, dual=True)),   # ResiDual
    ("peri",       Method(True,  True,  False, "one",      "one",    True, embed=True)),  # Peri-LN (Kim et al. 2025)
    ("reordered",  Method(False, True,  False, "one",      "one",    True)),    # OLMo 2's order (no QK-norm)
    ("lns",        Method(True,  False, False, "one",      "one",    True, lns=True)),    # LayerNorm Scaling
    ("hybridnorm", Method(False, False, True,  "one",      "one",    True, ffn=(False, False, False), qkv=True)),
    ("hybridnorm_pre", Method(True, False, False, "one",   "one",    True, qkv=True)),   # HybridNorm*'s layer 0
    ("ngpt",       Method(False, True,  True,  "sphere",   "one",    False, sphere=True)),   # nGPT
])
PLACEMENTS = tuple(METHODS)
def sites(method, kind):
    """(in_norm, branch_norm, out_norm) of a sub-layer of kind attn / cross / mlp in a layer of `method`."""
    m = METHODS[method]
    return m.ffn if kind == "mlp" and m.ffn else (m.in_norm, m.branch_norm, m.out_norm)


def qk_norm_of(config, method):
    """The QK-norm layout of a layer's self-attention (none / heads / whole) and whether v is normalized."""
    qk = config["qk_norm"] if config["qk_norm"] != "none" else "heads" if METHODS[method].qkv else "none"
    return qk, qk != "none" and (config["v_norm"] or METHODS[method].qkv)


IN_NORM = tuple(m for m, d in METHODS.items() if d.in_norm)            # ln_in before the branch
BRANCH_NORM = tuple(m for m, d in METHODS.items() if d.branch_norm)    # ln_branch on the branch output
OUT_NORM = tuple(m for m, d in METHODS.items() if d.out_norm)          # ln_out after the residual sum
FINAL_NORM = tuple(m for m, d in METHODS.items() if d.final)           # a final norm after such a last layer

def has_embed_norm(c):
    """A normalized config has ln_emb: embed_norm, or its first layer's method asks for it (Peri-LN)."""
    placement = c["placement"] if isinstance(c["placement"], list) else [c["placement"]]
    return bool(c["embed_norm"]) or (c["arch"] != "encdec" and METHODS[placement[0]].embed)


ARCHS = ("gpt", "encoder", "encdec")
ACTIVATIONS = ("gelu", "gelu_exact", "relu", "swiglu", "geglu")
GATED = ("swiglu", "geglu")   # fc holds [gate; up] rows: act(gate) * up
INITS = ("normal", "gpt2", "xavier", "deepnet", "tfixup")
ADMIN_INITS = ("log", "sqrt", "one", "profile")

# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------

DEFAULTS = {
    "arch": "gpt",
    "d_model": 128,
    "n_heads": 4,
    "n_layers": 4,       # L; the encoder's N for encdec
    "n_kv_heads": None,  # key-value heads (grouped-query attention), default n_heads
    "d_ff": None,        # 4 * d_model
    "vocab": None,       # 256 (gpt) / 257 (encoder) / 258 (encdec: 256 = BOS, 257 = EOS)
    "seq_len": 128,
    "norm": "layernorm",
    "eps": 1e-5,
    "norm_alpha": 0.5,     # dyt / derf: every site's initial alpha
    "norm_alpha_attn": None,  # dyt / derf: the initial alpha of each self-attention's input norm (None: norm_alpha)
    "norm_bias": True,     # layernorm / dyt / derf sites hold a bias (False: none)
    "activation": "gelu",  # gelu (tanh form), gelu_exact (erf form), relu
    "bias": "all",         # all | qkv (q, k, v maps only: Qwen2) | none (Llama): the blocks' linear biases
    "positions": "learned",  # learned (wpe) | rope (rotary q, k in self-attention) | none
    "rope_base": 10000.0,
    "rope_fraction": 1.0,    # share of each head's dimensions rotated: R = 2 floor(f HS / 2)
    "qk_norm": "none",       # none | heads (a gain of HS shared by the heads) | whole (of the projection's width)
    "v_norm": False,         # the values too (QKV-norm)
    "qk_norm_affine": True,  # False: QK-norm sites hold no gain and no bias (weightless)
    "attn_gate": "none",     # none | headwise | elementwise: gated attention, y * sigmoid(h W_g^T + b_g) before proj
    "attn_sink": False,      # a learned sink logit per query head (gpt-oss), one more softmax column, dropped
    "hyper": "none",         # none | hc | hc_static | mhc | mhc_lite | attn_res (normlab_torch_hyper.py)
    "hyper_streams": 4,      # n, the residual streams of hyper-connections
    "attn_res_block": 1,     # attn_res: sub-layers per block (1: Full AttnRes)
    "sinkhorn_iters": 20,    # mhc: Sinkhorn-Knopp iterations
    "value_residual": 0.0,   # > 0: later self-attentions use (1 - lambda) v + lambda v_1, v_1 the stack's first (ResFormer)
    "type_vocab": 0,       # token-type embedding rows (0: none)
    "embed_norm": False,   # a norm of the embedding sum (BERT)
    "embed_scale": 1.0,    # the token embedding times this (Gemma: sqrt(d)); no learned positions or types
    "embed_scale_learned": False,  # the scale is a parameter "embed_scale" (1), starting at embed_scale
    "attn_scale": None,    # the self-attention's factor on q.k (None: 1/sqrt(HS), resolved as normlab writes it)
    "mup_base_width": 0,   # > 0: muP with this base width (microsoft/mup: readout / m, scores / HS, MuAdamW)
    "completep_base_depth": 0,  # > 0: CompleteP (nanoGPT-mup's completep branch, alpha 1): branches x L_base / L,
                                # Adam's eps x L_base / L (and / m with muP), init without a depth term
    "attn_softcap": 0.0,   # > 0: scores <- c tanh(scores / c) (Gemma 2)
    "logit_softcap": 0.0,  # > 0: logits <- c tanh(logits / c) (Gemma 2)
    "head": "tied",        # tied | mlm (dense + act + norm + tied decoder + bias) | none
    "placement": "pre",
    "residual": True,
    "mlp": True,         # False: attention-only blocks
    "init": "auto",
    "init_std": 0.02,
    "dropout": 0.0,
    "seed": 1337,
    "admin_init": "log",   # log | sqrt | one | profile: the initial Admin omega (any arch)
    # encdec only (not in a gpt / encoder config):
    "dec_layers": None,          # M, default n_layers
    "shared_embeddings": True,   # False: the source has its own enc.wte
    "src_vocab": None,           # rows of enc.wte, default vocab
}
ENCDEC_ONLY = ("dec_layers", "shared_embeddings", "src_vocab")


def normalize_config(cfg, strict=True):
    """Fill defaults and resolve every derived key, as normlab writes them into checkpoint metadata.

    strict=False ignores unknown keys (instead of raising) -- used when reading checkpoint metadata;
    it also drops the encdec-only keys of a gpt / encoder config instead of refusing them.
    """
    unknown = set(cfg) - set(DEFAULTS)
    if unknown and strict:
        raise ValueError(f"unknown model config keys: {sorted(unknown)}")
    c = dict(DEFAULTS)
    c.update({k: v for k, v in cfg.items() if k in DEFAULTS})
    if c["arch"] not in ARCHS:
        raise ValueError(f"arch must be gpt, encoder or encdec, got {c['arch']!r}")
    encdec = c["arch"] == "encdec"
    if c["norm"] not in ("layernorm", "rmsnorm", "dyt", "derf", "l2", "ssnorm"):
        raise ValueError(f"norm must be layernorm, rmsnorm, dyt, derf, l2 or ssnorm, got {c['norm']!r}")
    if c["norm"] in ("rmsnorm", "l2", "ssnorm"):  # no bias to hold: normlab writes norm_bias as what the sites hold
        c["norm_bias"] = False
    if c["positions"] not in ("learned", "rope", "none"):
        raise ValueError(f"positions must be learned, rope or none, got {c['positions']!r}")
    if c["qk_norm"] not in ("none", "heads", "whole"):
        raise ValueError(f"qk_norm must be none, heads or whole, got {c['qk_norm']!r}")
    c["v_norm"] = bool(c["v_norm"])
    c["attn_sink"] = bool(c["attn_sink"])
    if c["attn_gate"] not in ("none", "headwise", "elementwise"):
        raise ValueError(f"attn_gate must be none, headwise or elementwise, got {c['attn_gate']!r}")
    if c["norm_alpha_attn"] is None:   # resolved as normlab writes it: the attention's input norm starts at norm_alpha
        c["norm_alpha_attn"] = c["norm_alpha"]
    if c["attn_scale"] is None:        # resolved as normlab writes it: 1 / sqrt(head size) (nGPT: sqrt(head size))
        pl = c["placement"] if isinstance(c["placement"], list) else [c["placement"]]
        hs = c["d_model"] // c["n_heads"]
        c["attn_scale"] = math.sqrt(hs) if any(METHODS[q].sphere for q in pl if q in METHODS) else 1.0 / math.sqrt(hs)
        if c["mup_base_width"] > 0:   # muP: sqrt(HS_base) / HS, the base with the same heads
            c["attn_scale"] = math.sqrt(hs * c["mup_base_width"] / c["d_model"]) / hs
    if c["v_norm"] and c["qk_norm"] == "none":
        raise ValueError("v_norm needs qk_norm")
    if c["bias"] not in ("all", "qkv", "none"):
        raise ValueError(f"bias must be all, qkv or none, got {c['bias']!r}")
    if c["activation"] not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {c['activation']!r}")
    if c["activation"] in GATED and c["head"] == "mlm":
        raise ValueError("head = mlm needs an element-wise activation")
    if c["head"] not in ("tied", "mlm", "none", "untied"):
        raise ValueError(f"head must be tied, mlm, none or untied, got {c['head']!r}")
    c["type_vocab"] = int(c["type_vocab"])
    c["embed_norm"] = bool(c["embed_norm"])
    if encdec and (c["type_vocab"] != 0 or c["embed_norm"] or c["head"] not in ("tied", "untied")):
        raise ValueError("encdec refuses type_vocab, embed_norm and head = mlm / none (its head is tied or untied)")
    if not encdec:
        given = [k for k in ENCDEC_ONLY if cfg.get(k) is not None]
        if given and strict:
            raise ValueError(f"{given} are encdec-only keys (arch is {c['arch']})")
        for k in ENCDEC_ONLY:
            del c[k]
    L = int(c["n_layers"])
    if c["d_model"] % c["n_heads"] != 0:
        raise ValueError("n_heads must divide d_model")
    c["n_kv_heads"] = c["n_heads"] if c["n_kv_heads"] is None else int(c["n_kv_heads"])
    if c["n_heads"] % c["n_kv_heads"] != 0 or (encdec and c["n_kv_heads"] != c["n_heads"]):
        raise ValueError("n_kv_heads must divide n_heads (and equal it for encdec)")
    if c["d_ff"] is None:
        c["d_ff"] = 4 * c["d_model"]
    if c["vocab"] is None:
        c["vocab"] = {"gpt": 256, "encoder": 257, "encdec": 258}[c["arch"]]
    n_total = L
    if encdec:
        c["dec_layers"] = L if c["dec_layers"] is None else int(c["dec_layers"])
        c["shared_embeddings"] = bool(c["shared_embeddings"])
        if c["src_vocab"] is None:
            c["src_vocab"] = c["vocab"]
        c["src_vocab"] = int(c["src_vocab"])
        if c["shared_embeddings"] and c["src_vocab"] != c["vocab"] and strict:
            raise ValueError("src_vocab only applies with shared_embeddings = false")
        if L < 1 or c["dec_layers"] < 1:
            raise ValueError("encdec needs n_layers >= 1 and dec_layers >= 1")
        n_total = L + c["dec_layers"]
    p = c["placement"]
    if p == "hybridnorm*":   # HybridNorm*: Pre-LN attention in the first layer
        p = ["hybridnorm_pre"] + ["hybridnorm"] * (n_total - 1)
    placement = [p] * n_total if isinstance(p, str) else list(p)
    if len(placement) != n_total:
        what = "n_layers + dec_layers" if encdec else "n_layers"
        raise ValueError(f"placement list has {len(placement)} entries, {what} is {n_total}")
    for q in placement:
        if q not in METHODS:
            raise ValueError(f"unknown placement {q!r}")
    c["placement"] = placement
    if encdec and any(METHODS[q].embed for q in placement):
        raise ValueError("encdec has no embedding norm, which peri needs")
    if encdec and (c["qk_norm"] != "none" or any(METHODS[q].qkv for q in placement)):
        raise ValueError("encdec has no QK-norm")
    # ResiDual's second stream spans a whole stack: a stack is all "residual" or has none
    spans = [placement[:L], placement[L:]] if encdec else [placement]
    for span in spans:
        dual = [METHODS[q].dual for q in span]
        if any(dual) and not all(dual):
            raise ValueError(f"residual (ResiDual) cannot be mixed with other methods in one stack: {span}")
        if any(dual) and not c["residual"]:
            raise ValueError("residual = false removes the skip paths; ResiDual's second stream is one")
    if c["init"] == "auto":
        # MODEL.md: auto = deepnet if any layer is deepnorm, else gpt2. T-Fixup is a method that is
        # "initialization only", so a model with a tfixup layer resolves auto to the tfixup scheme
        # (our reading; deepnorm takes precedence when both are present).
        c["init"] = "deepnet" if "deepnorm" in placement else "tfixup" if "tfixup" in placement else \
            "normal" if c["completep_base_depth"] > 0 else "gpt2"
    if c["init"] not in INITS:
        raise ValueError(f"unknown init {c['init']!r}")
    if c["admin_init"] not in ADMIN_INITS:
        raise ValueError(f"admin_init must be one of {ADMIN_INITS}, got {c['admin_init']!r}")
    c["eps"] = float(c["eps"])
    c["init_std"] = float(c["init_std"])
    c["dropout"] = float(c["dropout"])
    c["residual"] = bool(c["residual"])
    c["mlp"] = bool(c["mlp"])
    return c


# --------------------------------------------------------------------------------------------------
# Stacks: one per gpt / encoder model, encoder + decoder for encdec
# --------------------------------------------------------------------------------------------------

Stack = namedtuple("Stack", [
    "name",          # "main" (gpt / encoder), "enc" or "dec" (encdec)
    "prefix",        # parameter prefix of its layers: "h" or "enc.h"
    "first",         # global index of its layer 0 (methods and per-layer lists use global layers)
    "methods",       # the method of each of its layers
    "causal",        # causal self-attention
    "cross",         # layers have a cross-attention sub-layer (decoder of encdec)
    "final",         # the final-norm prefix ("ln_f" / "enc.ln_f"), or None when there is none
    "depth",         # its number of layers (L, N or M): LayerScale's init and T-Fixup's scales
    "n_residual",    # S of the Admin closed forms: 2L, 2N or 3M
    "alpha",         # DeepNorm shortcut constant
    "beta",          # DeepNet init gain
    "tfixup",        # T-Fixup scale of its value / output / MLP matrices
    "encoder_like",  # an encoder stack (T-Fixup's 0.67 N^(-1/4) rule), else a decoder stack
    "dual",          # ResiDual's second stream: the output is x + final(x_d) instead of final(x)
])


def stacks(config):
    """The layer stacks of a normalized config, in canonical (parameter) order."""
    c = config
    pl = c["placement"]
    if c["arch"] != "encdec":
        L = c["n_layers"]
        enc = c["arch"] == "encoder"
        return [Stack("main", "h", 0, pl, not enc, False, "ln_f" if METHODS[pl[-1]].final else None, L, 2 * L,
                      (2.0 * L) ** 0.25, (8.0 * L) ** -0.25,
                      0.67 * L ** -0.25 if enc else (9.0 * L) ** -0.25, enc, METHODS[pl[-1]].dual)]
    N, M = c["n_layers"], c["dec_layers"]
    enc_pl, dec_pl = pl[:N], pl[N:]
    return [
        Stack("enc", "enc.h", 0, enc_pl, False, False, "enc.ln_f" if METHODS[enc_pl[-1]].final else None, N,
              2 * N, 0.81 * (N ** 4 * M) ** (1.0 / 16), 0.87 * (N ** 4 * M) ** (-1.0 / 16), 0.67 * N ** -0.25,
              True, METHODS[enc_pl[-1]].dual),
        Stack("dec", "h", N, dec_pl, True, True, "ln_f" if METHODS[dec_pl[-1]].final else None, M,
              3 * M, (3.0 * M) ** 0.25, (12.0 * M) ** -0.25, (9.0 * M) ** -0.25, False, METHODS[dec_pl[-1]].dual),
    ]


def stack_of(config, prefix):
    """The stack a parameter prefix ("enc.h.0.attn", "h.1.cross", "ln_f", ...) belongs to."""
    st = stacks(config)
    if config["arch"] == "encdec" and prefix.startswith("enc."):
        return st[0]
    return st[-1]


def sublayer_kinds(config, stack):
    """The sub-layers of one layer of the stack, in order: attn (cross) (mlp)."""
    kinds = ["attn"] + (["cross"] if stack.cross else []) + (["mlp"] if config["mlp"] else [])
    return kinds


def residual_alpha(config, placement, stack=None):
    """The shortcut constant of a method without an omega parameter: 0 without residual, the stack's
    DeepNorm alpha for deepnorm ((2L)^(1/4) for gpt / encoder), else 1."""
    if not config["residual"]:
        return 0.0
    if METHODS[placement].shortcut == "deepnorm":
        return (stack or stacks(config)[-1]).alpha
    return 1.0


def has_final_norm(config, stack=None):
    """gpt / encoder: ln_f exists iff the last layer's method has a final norm. encdec: per stack."""
    return (stack or stacks(config)[-1]).final is not None
