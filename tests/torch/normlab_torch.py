"""normlab_torch: an independent PyTorch implementation of the normlab model (docs/MODEL.md).

This is the oracle the C++ engine is checked against, so it is written for readability, not speed:
every formula is spelled out as in MODEL.md, attention is written by hand, and there is no dropout
(the configurations that are checked use dropout 0; a non-zero dropout is rejected).

Architectures: `gpt` (causal), `encoder` (bidirectional) and `encdec` (an encoder stack over the
source, a decoder stack with cross-attention over the target). Methods (the values of `placement`):
post pre sandwich prepost deepnorm none admin rezero skipinit layerscale tfixup residual (MODEL.md,
"Methods"); residual (ResiDual) carries a second stream through its stack (run_stack).

Public API
    normalize_config(cfg)            -> config dict with every key explicit (as in checkpoint metadata)
    stacks(config)                   -> [Stack]: the layer stacks (one, or encoder + decoder for encdec)
    Model(config, dtype)             -> .config, .params (OrderedDict name -> Parameter, canonical order)
    load_checkpoint(path, dtype)     -> (model, config)   reads a normlab safetensors checkpoint
    save_checkpoint(model, path)     -> writes float32 tensors + metadata {"config": json}
    forward(model, input_ids, labels, **inputs) -> (loss, logits)
    forward_params(config, params, input_ids, labels, token_types, key_mask,
                   decoder_input_ids, decoder_mask) -> (loss, logits)           functional form
    forward_outputs(...same...)      -> {"loss", "logits", "memory" (encdec), "hidden" (list)}
        encdec: input_ids = the source (B, S), key_mask = its padding mask (B, S) (0 = padding),
        decoder_input_ids = the target input (B, T), decoder_mask = its padding mask (B, T) or None
        (Hugging Face's input_ids / attention_mask / decoder_input_ids / decoder_attention_mask).
    param_specs(config)              -> [(name, shape)] in canonical order
    param_table(config)              -> [ParamSpec]: name, shape, role, stack, sub-layer kind, row blocks
    init_params(config)              -> OrderedDict of freshly initialized tensors
    admin_init_value(config, stack)  -> the closed-form Admin omega (log / sqrt / one)
    admin_profile(config, params, input_ids, ...) -> sets every Admin omega by the profile walk
    lr_factor(train_cfg, t)          -> f(t) of the LR schedule (t is the 1-based step)
    make_optimizer(model, train_cfg) -> (torch.optim.AdamW, LambdaLR)
    train(model, input_ids, labels, train_cfg, **inputs) -> list of {"step", "loss", "lr", "grad_norm"}
"""

import functools
import json
import math
from collections import OrderedDict, namedtuple

import torch
import torch.nn.functional as F

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

Method = namedtuple("Method", "in_norm branch_norm out_norm shortcut branch final dual", defaults=(False,))

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
])
PLACEMENTS = tuple(METHODS)
IN_NORM = tuple(m for m, d in METHODS.items() if d.in_norm)            # ln_in before the branch
BRANCH_NORM = tuple(m for m, d in METHODS.items() if d.branch_norm)    # ln_branch on the branch output
OUT_NORM = tuple(m for m, d in METHODS.items() if d.out_norm)          # ln_out after the residual sum
FINAL_NORM = tuple(m for m, d in METHODS.items() if d.final)           # a final norm after such a last layer

ARCHS = ("gpt", "encoder", "encdec")
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
    "d_ff": None,        # 4 * d_model
    "vocab": None,       # 256 (gpt) / 257 (encoder) / 258 (encdec: 256 = BOS, 257 = EOS)
    "seq_len": 128,
    "norm": "layernorm",
    "eps": 1e-5,
    "activation": "gelu",  # gelu (tanh form), gelu_exact (erf form), relu
    "type_vocab": 0,       # token-type embedding rows (0: none)
    "embed_norm": False,   # a norm of the embedding sum (BERT)
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
    if c["norm"] not in ("layernorm", "rmsnorm"):
        raise ValueError(f"norm must be layernorm or rmsnorm, got {c['norm']!r}")
    if c["activation"] not in ("gelu", "gelu_exact", "relu"):
        raise ValueError(f"activation must be gelu, gelu_exact or relu, got {c['activation']!r}")
    if c["head"] not in ("tied", "mlm", "none"):
        raise ValueError(f"head must be tied, mlm or none, got {c['head']!r}")
    c["type_vocab"] = int(c["type_vocab"])
    c["embed_norm"] = bool(c["embed_norm"])
    if encdec and (c["type_vocab"] != 0 or c["embed_norm"] or c["head"] != "tied"):
        raise ValueError("encdec refuses type_vocab, embed_norm and head = mlm / none (its head is tied)")
    if not encdec:
        given = [k for k in ENCDEC_ONLY if cfg.get(k) is not None]
        if given and strict:
            raise ValueError(f"{given} are encdec-only keys (arch is {c['arch']})")
        for k in ENCDEC_ONLY:
            del c[k]
    L = int(c["n_layers"])
    if c["d_model"] % c["n_heads"] != 0:
        raise ValueError("n_heads must divide d_model")
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
    placement = [p] * n_total if isinstance(p, str) else list(p)
    if len(placement) != n_total:
        what = "n_layers + dec_layers" if encdec else "n_layers"
        raise ValueError(f"placement list has {len(placement)} entries, {what} is {n_total}")
    for q in placement:
        if q not in METHODS:
            raise ValueError(f"unknown placement {q!r}")
    c["placement"] = placement
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
        c["init"] = "deepnet" if "deepnorm" in placement else "tfixup" if "tfixup" in placement else "gpt2"
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


def layerscale_init(depth):
    """LayerScale's initial gain for a stack of `depth` layers (CaiT): 0.1, 1e-5 or 1e-6."""
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6


def admin_init_value(config, stack, mode=None):
    """Admin's closed-form omega: log sqrt((S+1)/ln(S+1) - 1), sqrt sqrt(S), one 1 (S = stack.n_residual).
    "profile" is set from data (admin_profile); a model built without data gets the log value."""
    mode = mode or config["admin_init"]
    S = stack.n_residual
    if mode in ("log", "profile"):
        return math.sqrt((S + 1) / math.log(S + 1) - 1)
    if mode == "sqrt":
        return math.sqrt(S)
    if mode == "one":
        return 1.0
    raise ValueError(f"unknown admin_init {mode!r}")


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

# role: tok_emb pos_emb type_emb norm_weight norm_bias bias linear omega gain rezero
# matrix: for linear weights and their biases, the map ("attn.qkv", "cross.kv", "mlp.proj", "head.dense")
# blocks: for linear weights, [(tag, r0, r1)] row blocks that init as one projection each:
#         attn.qkv q / k / v, cross.kv k / v, else one block tagged "q" (cross.q) or "" (the rest)
# method: the method of the layer the parameter belongs to (None outside the layers)
ParamSpec = namedtuple("ParamSpec", "name shape role stack matrix blocks method", defaults=(None,))


def _norm_table(config, prefix, stack, method=None):
    C = config["d_model"]
    t = [ParamSpec(prefix + ".weight", (C,), "norm_weight", stack, None, None, method)]
    if config["norm"] == "layernorm":
        t.append(ParamSpec(prefix + ".bias", (C,), "norm_bias", stack, None, None, method))
    return t


def _linear_table(name, rows, cols, stack, matrix, blocks=None, method=None):
    return [ParamSpec(name + ".weight", (rows, cols), "linear", stack, matrix, blocks or [("", 0, rows)], method),
            ParamSpec(name + ".bias", (rows,), "bias", stack, matrix, None, method)]


def param_table(config):
    """Every parameter in canonical order (MODEL.md, "Parameters" and the encdec table)."""
    c = config
    C, Fd, V = c["d_model"], c["d_ff"], c["vocab"]
    t = [ParamSpec("wte.weight", (V, C), "tok_emb", None, None, None),
         ParamSpec("wpe.weight", (c["seq_len"], C), "pos_emb", None, None, None)]
    if c["arch"] == "encdec":
        if not c["shared_embeddings"]:
            t.append(ParamSpec("enc.wte.weight", (c["src_vocab"], C), "tok_emb", "enc", None, None))
        t.append(ParamSpec("enc.wpe.weight", (c["seq_len"], C), "pos_emb", "enc", None, None))
    if c["type_vocab"] > 0:
        t.append(ParamSpec("wtt.weight", (c["type_vocab"], C), "type_emb", None, None, None))
    if c["embed_norm"]:
        t += _norm_table(c, "ln_emb", None)
    for st in stacks(c):
        for l, method in enumerate(st.methods):
            m = METHODS[method]
            lp = f"{st.prefix}.{l}"
            for kind in sublayer_kinds(c, st):
                pre = f"{lp}.{kind}"
                if m.in_norm:
                    t += _norm_table(c, pre + ".ln_in", st.name, method)
                if kind == "attn":
                    t += _linear_table(pre + ".qkv", 3 * C, C, st.name, "attn.qkv",
                                       [("q", 0, C), ("k", C, 2 * C), ("v", 2 * C, 3 * C)], method)
                    t += _linear_table(pre + ".proj", C, C, st.name, "attn.proj", None, method)
                elif kind == "cross":
                    t += _linear_table(pre + ".q", C, C, st.name, "cross.q", [("q", 0, C)], method)
                    t += _linear_table(pre + ".kv", 2 * C, C, st.name, "cross.kv", [("k", 0, C), ("v", C, 2 * C)],
                                       method)
                    t += _linear_table(pre + ".proj", C, C, st.name, "cross.proj", None, method)
                else:
                    t += _linear_table(pre + ".fc", Fd, C, st.name, "mlp.fc", None, method)
                    t += _linear_table(pre + ".proj", C, Fd, st.name, "mlp.proj", None, method)
                if m.branch_norm:
                    t += _norm_table(c, pre + ".ln_branch", st.name, method)
                if m.out_norm:
                    t += _norm_table(c, pre + ".ln_out", st.name, method)
                if m.shortcut == "omega":
                    t.append(ParamSpec(pre + ".omega", (C,), "omega", st.name, None, None, method))
                if m.branch in ("gain", "gain_c"):
                    t.append(ParamSpec(pre + ".gain", (1,) if m.branch == "gain" else (C,), "gain", st.name,
                                       None, None, method))
            if m.branch == "rezero":
                t.append(ParamSpec(lp + ".rezero", (1,), "rezero", st.name, None, None, method))
        if st.final:
            t += _norm_table(c, st.final, st.name)
    if c["head"] == "mlm":
        t += _linear_table("head.dense", C, C, None, "head.dense")
        t += _norm_table(c, "head.ln", None)
        t.append(ParamSpec("head.bias", (V,), "bias", None, "head.bias", None))
    return t


def param_specs(config):
    """[(name, shape)] in canonical order (MODEL.md, "Parameters")."""
    return [(p.name, p.shape) for p in param_table(config)]


def is_norm_param(name):
    return any(f".{k}." in "." + name for k in ("ln_in", "ln_branch", "ln_out", "ln_f", "ln_emb", "ln"))


def init_params(config, dtype=torch.float64):
    """The initialization schemes of MODEL.md, drawn from torch's RNG seeded with config["seed"].

    (Not bit-identical to normlab's RNG -- only the distributions are the contract.)
    """
    c = config
    g = torch.Generator().manual_seed(int(c["seed"]))
    C, std, scheme = c["d_model"], c["init_std"], c["init"]
    by_name = {st.name: st for st in stacks(c)}
    n_layers_total = c["n_layers"] + (c["dec_layers"] if c["arch"] == "encdec" else 0)
    out = OrderedDict()

    def normal(shape, s):
        return torch.randn(shape, generator=g, dtype=torch.float64) * s

    def uniform(shape, a):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * a

    def filled(shape, v):
        return torch.full(shape, float(v), dtype=torch.float64)

    def tfixup_embedding_stack(spec):
        # the stack whose (9 depth)^(-1/4) scales a token table: enc.wte -> encoder; wte -> decoder
        # (gpt: its L layers; encoder-only: its L layers too)
        return by_name["enc"] if spec.stack == "enc" else stacks(c)[-1]

    for spec in param_table(c):
        st = by_name.get(spec.stack)
        if spec.role == "tok_emb" and scheme == "tfixup":
            t = normal(spec.shape, C ** -0.5) * (9.0 * tfixup_embedding_stack(spec).depth) ** -0.25
        elif spec.role in ("tok_emb", "pos_emb", "type_emb"):
            t = normal(spec.shape, std)
        elif spec.role in ("norm_weight",):
            t = filled(spec.shape, 1.0)
        elif spec.role in ("norm_bias", "bias", "rezero"):
            t = filled(spec.shape, 0.0)
        elif spec.role == "omega":
            t = filled(spec.shape, admin_init_value(c, st))
        elif spec.role == "gain":
            t = filled(spec.shape, layerscale_init(st.depth) if spec.method == "layerscale" else 0.0)   # / skipinit
        else:  # linear weight (out, in), row blocks initialized as separate projections
            assert spec.role == "linear"
            t = torch.empty(spec.shape, dtype=torch.float64)
            for tag, r0, r1 in spec.blocks:
                fan_out, fan_in = r1 - r0, spec.shape[1]
                bshape = (r1 - r0, spec.shape[1])
                if scheme == "normal":
                    t[r0:r1] = normal(bshape, std)
                elif scheme == "gpt2":
                    s = std / math.sqrt(2 * n_layers_total) if spec.matrix.endswith(".proj") else std
                    t[r0:r1] = normal(bshape, s)
                elif scheme == "xavier":
                    t[r0:r1] = uniform(bshape, math.sqrt(6.0 / (fan_in + fan_out)))
                elif scheme == "deepnet":
                    gain = 1.0 if tag in ("q", "k") or st is None else st.beta
                    t[r0:r1] = normal(bshape, gain * math.sqrt(2.0 / (fan_in + fan_out)))
                elif scheme == "tfixup":
                    scaled = st is not None and tag not in ("q", "k")   # v rows, attn/cross proj, mlp
                    t[r0:r1] = uniform(bshape, math.sqrt(6.0 / (fan_in + fan_out))) * (st.tfixup if scaled else 1.0)
        out[spec.name] = t.to(dtype)
    return out


class Model:
    """The normlab model: a config (normalized) and an ordered dict of named parameters."""

    def __init__(self, config_dict, dtype=torch.float64, strict=True):
        self.config = normalize_config(config_dict, strict)
        if self.config["dropout"] != 0.0:
            raise ValueError("normlab_torch has no dropout; use dropout = 0")
        self.dtype = dtype
        self.params = OrderedDict(
            (name, torch.nn.Parameter(t)) for name, t in init_params(self.config, dtype).items()
        )

    def parameters(self):
        return list(self.params.values())

    def named_parameters(self):
        return list(self.params.items())

    def load_tensors(self, tensors):
        """Copy a name -> tensor mapping into the parameters; names and shapes must match exactly."""
        want, got = set(self.params), set(tensors)
        if want != got:
            raise ValueError(f"checkpoint tensors differ: missing {sorted(want - got)}, extra {sorted(got - want)}")
        with torch.no_grad():
            for name, p in self.params.items():
                t = tensors[name]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: checkpoint shape {tuple(t.shape)}, expected {tuple(p.shape)}")
                p.copy_(torch.as_tensor(t).to(self.dtype))

    def zero_grad(self):
        for p in self.params.values():
            p.grad = None


def load_checkpoint(path, dtype=torch.float64):
    """Read a normlab checkpoint: tensors + JSON config under metadata key "config". Training
    checkpoints also hold AdamW moments ("optimizer.m.<name>", "optimizer.v.<name>"): skipped."""
    from safetensors import safe_open

    tensors = {}
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "config" not in meta:
            raise ValueError(f"{path}: no 'config' in safetensors metadata")
        config = json.loads(meta["config"])
        for k in f.keys():
            if not k.startswith("optimizer."):
                tensors[k] = f.get_tensor(k)
    model = Model(config, dtype, strict=False)
    model.load_tensors(tensors)
    return model, config


def save_checkpoint(model, path, metadata_config=None):
    """Write the parameters as float32 with metadata {"config": json}."""
    from safetensors.torch import save_file

    cfg = model.config if metadata_config is None else metadata_config
    tensors = {n: p.detach().to(torch.float32).contiguous() for n, p in model.params.items()}
    save_file(tensors, str(path), metadata={"config": json.dumps(cfg)})


# --------------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------------

def layernorm(z, gamma, beta, eps):
    mean = z.mean(dim=-1, keepdim=True)
    var = ((z - mean) ** 2).mean(dim=-1, keepdim=True)       # biased variance over C
    return (z - mean) / torch.sqrt(var + eps) * gamma + beta


def rmsnorm(z, gamma, eps):
    ms = (z * z).mean(dim=-1, keepdim=True)
    return z / torch.sqrt(ms + eps) * gamma


def norm(config, params, prefix, z):
    if config["norm"] == "layernorm":
        return layernorm(z, params[prefix + ".weight"], params[prefix + ".bias"], config["eps"])
    return rmsnorm(z, params[prefix + ".weight"], config["eps"])


def gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def gelu_exact(u):
    return 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))


def activation(config, u):
    return {"gelu": gelu_tanh, "gelu_exact": gelu_exact, "relu": torch.relu}[config["activation"]](u)


def linear(x, w, b):
    return x @ w.t() + b


def multihead(q, k, v, NH, causal=False, key_mask=None):
    """Scaled dot-product attention, by hand. q (B, Tq, C), k and v (B, Tk, C); head n uses columns
    n*HS .. (n+1)*HS. causal: key j > query i gets -inf; key_mask (B, Tk), 0 = a padding key that
    gets -inf in every row. Returns y (B, Tq, C), the heads concatenated."""
    B, Tq, C = q.shape
    Tk = k.shape[1]
    HS = C // NH

    def heads(z, T):  # (B, T, C) -> (B, NH, T, HS)
        return z.reshape(B, T, NH, HS).permute(0, 2, 1, 3)

    q, k, v = heads(q, Tq), heads(k, Tk), heads(v, Tk)
    S = (q @ k.transpose(-1, -2)) / math.sqrt(HS)                                  # (B, NH, Tq, Tk)
    if causal:
        future = torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), diagonal=1)      # key j > query i
        S = S.masked_fill(future, float("-inf"))
    if key_mask is not None:  # (B, Tk): 0 = padding, which no query attends to
        S = S.masked_fill(~torch.as_tensor(key_mask).bool()[:, None, None, :], float("-inf"))
    P = torch.softmax(S, dim=-1)
    return (P @ v).permute(0, 2, 1, 3).reshape(B, Tq, C)                           # heads concatenated


def attention(config, params, prefix, h, key_mask=None, causal=None):
    """Self-attention. causal=None: causal iff arch is gpt (a gpt / encoder model's only stack)."""
    C = h.shape[-1]
    if causal is None:
        causal = config["arch"] == "gpt"
    qkv = linear(h, params[prefix + ".qkv.weight"], params[prefix + ".qkv.bias"])   # (B, T, 3C) [q | k | v]
    q, k, v = qkv[..., 0:C], qkv[..., C:2 * C], qkv[..., 2 * C:3 * C]
    y = multihead(q, k, v, config["n_heads"], causal, key_mask)
    return linear(y, params[prefix + ".proj.weight"], params[prefix + ".proj.bias"])


def cross_attention(config, params, prefix, h, key_mask=None, memory=None):
    """Cross-attention: queries from the decoder stream h (B, T, C), keys and values from the memory
    (B, S, C); key_mask is the source padding mask (B, S)."""
    C = h.shape[-1]
    q = linear(h, params[prefix + ".q.weight"], params[prefix + ".q.bias"])           # (B, T, C)
    kv = linear(memory, params[prefix + ".kv.weight"], params[prefix + ".kv.bias"])   # (B, S, 2C) [k | v]
    k, v = kv[..., 0:C], kv[..., C:2 * C]
    y = multihead(q, k, v, config["n_heads"], False, key_mask)
    return linear(y, params[prefix + ".proj.weight"], params[prefix + ".proj.bias"])


def mlp(config, params, prefix, h, key_mask=None):
    u = linear(h, params[prefix + ".fc.weight"], params[prefix + ".fc.bias"])
    a = activation(config, u)
    return linear(a, params[prefix + ".proj.weight"], params[prefix + ".proj.bias"])


def shortcut_scale(config, params, prefix, method, stack=None):
    """omega of the sub-layer: 0 without residual; the DeepNorm alpha; Admin's (C) parameter; or 1."""
    if not config["residual"]:
        return 0.0
    m = METHODS[method]
    if m.shortcut == "omega":
        return params[prefix + ".omega"]
    if m.shortcut == "deepnorm":
        return (stack or stack_of(config, prefix)).alpha
    return 1.0


def branch_scale(params, prefix, method):
    """lambda of the sub-layer: ReZero's per-layer scalar, SkipInit's / LayerScale's gain, or 1."""
    m = METHODS[method]
    if m.branch == "rezero":
        return params[prefix.rsplit(".", 1)[0] + ".rezero"]     # {layer prefix}.rezero, shared
    if m.branch in ("gain", "gain_c"):
        return params[prefix + ".gain"]
    return 1.0


def sublayer_parts(config, params, prefix, method, branch, x, key_mask=None, stack=None):
    """One residual sub-layer (MODEL.md, "Methods"). Returns (x', f, omega, g) with f = F(h) the branch
    output, omega the shortcut scale (a number or Admin's (C) tensor) and g = ln_branch(f) (or f), what
    a second stream adds (before the branch scale lambda, which only r applies)."""
    m = METHODS[method]
    omega = shortcut_scale(config, params, prefix, method, stack)
    lam = branch_scale(params, prefix, method)
    h = norm(config, params, prefix + ".ln_in", x) if m.in_norm else x
    f = branch(config, params, prefix, h, key_mask)
    g = norm(config, params, prefix + ".ln_branch", f) if m.branch_norm else f
    r = omega * x + lam * g
    out = norm(config, params, prefix + ".ln_out", r) if m.out_norm else r
    return out, f, omega, g


def sublayer(config, params, prefix, placement, branch, x, key_mask=None, stack=None):
    return sublayer_parts(config, params, prefix, placement, branch, x, key_mask, stack)[0]  # (one stream only)


def stack_sublayers(config, stack, key_mask, memory=None, memory_mask=None):
    """[(prefix, method, branch, mask)] of the stack's sub-layers in order; branch takes
    (config, params, prefix, h, mask) like attention / mlp."""
    out = []
    for l, method in enumerate(stack.methods):
        for kind in sublayer_kinds(config, stack):
            prefix = f"{stack.prefix}.{l}.{kind}"
            if kind == "attn":
                out.append((prefix, method, functools.partial(attention, causal=stack.causal), key_mask))
            elif kind == "cross":
                out.append((prefix, method, functools.partial(cross_attention, memory=memory), memory_mask))
            else:
                out.append((prefix, method, mlp, None))
    return out


def stack_output(config, params, stack, x, xd):
    """How a stack ends: final(x), or x + final(x_d) with ResiDual's second stream, or x."""
    if stack.dual:
        return x + norm(config, params, stack.final, xd)
    return norm(config, params, stack.final, x) if stack.final else x


def run_stack(config, params, stack, x, key_mask=None, memory=None, memory_mask=None, hidden=None):
    """The stack's layers and its ending. hidden (a list) receives the stream entering each layer
    and the one leaving the last layer (before the final norm; ResiDual: the normalized stream x).
    ResiDual: x_d starts as the input x and every sub-layer adds its branch output to it."""
    subs = stack_sublayers(config, stack, key_mask, memory, memory_mask)
    per_layer = len(subs) // len(stack.methods)
    xd = x
    for i, (prefix, method, branch, mask) in enumerate(subs):
        if hidden is not None and i % per_layer == 0:
            hidden.append(x)
        x, _, _, g = sublayer_parts(config, params, prefix, method, branch, x, mask, stack)
        xd = xd + g
    if hidden is not None:
        hidden.append(x)
    return stack_output(config, params, stack, x, xd)


def _embed_source(config, params, src):
    S = src.shape[1]
    table = params["wte.weight"] if config["shared_embeddings"] else params["enc.wte.weight"]
    return table[src] + params["enc.wpe.weight"][0:S]


def _check_ids(config, ids, vocab, what):
    if ids.dim() != 2:
        raise ValueError(f"{what} must be (B, T), got shape {tuple(ids.shape)}")
    if ids.shape[1] > config["seq_len"]:
        raise ValueError(f"{what}: length {ids.shape[1]} > seq_len={config['seq_len']}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"{what}: ids must be in [0, {vocab})")


def forward_outputs(config, params, input_ids, labels=None, token_types=None, key_mask=None,
                    decoder_input_ids=None, decoder_mask=None):
    """Functional forward. Returns {"loss" (None without labels), "logits" (None when head = none),
    "hidden" (the streams entering each layer of the last stack, and leaving it), "final" (what the
    head reads) and, for encdec, "memory" (B, S, C)}."""
    config = normalize_config(config, strict=False)   # idempotent on an already-normalized config
    input_ids = torch.as_tensor(input_ids).long()
    if key_mask is not None:
        key_mask = torch.as_tensor(key_mask)
    out = {"hidden": []}
    wte = params["wte.weight"]
    if config["arch"] == "encdec":
        if decoder_input_ids is None:
            raise ValueError("encdec needs decoder_input_ids")
        if token_types is not None:
            raise ValueError("encdec has no token types")
        src = input_ids
        tgt = torch.as_tensor(decoder_input_ids).long()
        _check_ids(config, src, config["src_vocab"] if not config["shared_embeddings"] else config["vocab"],
                   "input_ids (source)")
        _check_ids(config, tgt, config["vocab"], "decoder_input_ids")
        if tgt.shape[0] != src.shape[0]:
            raise ValueError("source and target batch sizes differ")
        enc, dec = stacks(config)
        memory = run_stack(config, params, enc, _embed_source(config, params, src), key_mask)   # (B, S, C)
        out["memory"] = memory
        T = tgt.shape[1]
        x = wte[tgt] + params["wpe.weight"][0:T]
        if decoder_mask is not None:
            decoder_mask = torch.as_tensor(decoder_mask)
        xf = run_stack(config, params, dec, x, decoder_mask, memory, key_mask, out["hidden"])
    else:
        if decoder_input_ids is not None or decoder_mask is not None:
            raise ValueError(f"decoder inputs given to a {config['arch']} model")
        _check_ids(config, input_ids, config["vocab"], "input_ids")
        T = input_ids.shape[1]
        x = wte[input_ids] + params["wpe.weight"][0:T]
        if config["type_vocab"] > 0:
            types = torch.zeros_like(input_ids) if token_types is None else torch.as_tensor(token_types).long()
            x = x + params["wtt.weight"][types]
        if config["embed_norm"]:
            x = norm(config, params, "ln_emb", x)
        xf = run_stack(config, params, stacks(config)[0], x, key_mask, hidden=out["hidden"])
    out["final"] = xf
    out["loss"] = out["logits"] = None
    if config["head"] == "none":
        return out
    if config["head"] == "mlm":
        t = activation(config, linear(xf, params["head.dense.weight"], params["head.dense.bias"]))
        t = norm(config, params, "head.ln", t)
        logits = t @ wte.t() + params["head.bias"]
    else:
        logits = xf @ wte.t()                                                        # tied output
    out["logits"] = logits
    if labels is not None:
        labels = torch.as_tensor(labels).long()
        V = logits.shape[-1]
        out["loss"] = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    return out


def forward_params(config, params, input_ids, labels=None, token_types=None, key_mask=None,
                   decoder_input_ids=None, decoder_mask=None):
    """Functional forward: params is a name -> tensor mapping. Returns (loss or None, logits);
    logits is None for a headless model (head = none)."""
    o = forward_outputs(config, params, input_ids, labels, token_types, key_mask, decoder_input_ids, decoder_mask)
    return o["loss"], o["logits"]


def forward(model, input_ids, labels=None, **inputs):
    """inputs: token_types, key_mask, decoder_input_ids, decoder_mask (see forward_outputs)."""
    return forward_params(model.config, model.params, input_ids, labels, **inputs)


# --------------------------------------------------------------------------------------------------
# Admin's profile initialization (MODEL.md, "Admin omega", admin_init = profile)
# --------------------------------------------------------------------------------------------------

def _population_var(z):
    z = z.double()
    return float(((z - z.mean()) ** 2).mean())


def admin_profile(config, params, input_ids, token_types=None, key_mask=None, decoder_input_ids=None,
                  decoder_mask=None, chain="admin"):
    """Set every Admin omega in place from one batch: walk the sub-layers of each stack in order with
    ratio = 1; an Admin sub-layer i gets omega_i <- ratio (every channel); run sub-layer i; then
    ratio <- sqrt(Var(omega_i * x) + Var(f_i)), population variances over every element of the batch
    (padding positions included), x the stream entering sub-layer i and f_i = F(h) its branch output.
    The encoder and the decoder are separate chains (each starts at 1); the decoder reads the memory
    of the profiled encoder. No dropout (evaluation mode).

    A stack that mixes Admin with other methods: MODEL.md does not say whether the other sub-layers
    advance the chain. chain = "admin" (the default, and what the engine does): only Admin
    sub-layers take and advance the ratio, the others just transform the stream. chain = "all": every
    sub-layer advances it with its own omega (1, the DeepNorm alpha, 0 without residual).
    Returns [(omega name, value)] in walk order."""
    if chain not in ("admin", "all"):
        raise ValueError(f"chain must be admin or all, got {chain!r}")
    config = normalize_config(config, strict=False)
    input_ids = torch.as_tensor(input_ids).long()
    if key_mask is not None:
        key_mask = torch.as_tensor(key_mask)
    set_values = []

    def walk(stack, x, mask, memory=None, memory_mask=None):
        ratio = 1.0
        xd = x
        for prefix, method, branch, m in stack_sublayers(config, stack, mask, memory, memory_mask):
            if METHODS[method].shortcut == "omega":
                params[prefix + ".omega"].fill_(ratio)
                set_values.append((prefix + ".omega", ratio))
            x_next, f, omega, g = sublayer_parts(config, params, prefix, method, branch, x, m, stack)
            if chain == "all" or METHODS[method].shortcut == "omega":
                ratio = math.sqrt(_population_var(omega * x) + _population_var(f))
            x, xd = x_next, xd + g
        return stack_output(config, params, stack, x, xd)

    with torch.no_grad():
        if config["arch"] == "encdec":
            enc, dec = stacks(config)
            memory = walk(enc, _embed_source(config, params, input_ids), key_mask)
            tgt = torch.as_tensor(decoder_input_ids).long()
            x = params["wte.weight"][tgt] + params["wpe.weight"][0:tgt.shape[1]]
            walk(dec, x, None if decoder_mask is None else torch.as_tensor(decoder_mask), memory, key_mask)
        else:
            T = input_ids.shape[1]
            x = params["wte.weight"][input_ids] + params["wpe.weight"][0:T]
            if config["type_vocab"] > 0:
                types = torch.zeros_like(input_ids) if token_types is None else torch.as_tensor(token_types).long()
                x = x + params["wtt.weight"][types]
            if config["embed_norm"]:
                x = norm(config, params, "ln_emb", x)
            walk(stacks(config)[0], x, key_mask)
    return set_values


# --------------------------------------------------------------------------------------------------
# Training: AdamW, LR schedule, grad clipping
# --------------------------------------------------------------------------------------------------

TRAIN_DEFAULTS = {
    "lr": 1e-3,
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "min_lr": 0.0,
    "weight_decay": 0.0,
    "beta1": 0.9,
    "beta2": 0.999,
    "adam_eps": 1e-8,
    "grad_clip": 0.0,
}


def lr_factor(tc, t):
    """f(t), t = 1-based step; the lr used at that step is lr * f(t)."""
    sched, w = tc["lr_schedule"], int(tc["warmup_steps"])
    if sched == "constant":
        return 1.0
    if sched == "warmup":
        return 1.0 if w <= 0 else min(1.0, t / w)
    if sched == "invsqrt":
        if w <= 0:
            raise ValueError("invsqrt needs warmup_steps > 0")
        return min(t / w, math.sqrt(w / t))
    if sched == "cosine":
        if w > 0 and t <= w:
            return t / w
        steps = int(tc["steps"])
        min_ratio = tc["min_lr"] / tc["lr"]
        return min_ratio + 0.5 * (1.0 - min_ratio) * (1.0 + math.cos(math.pi * (t - w) / (steps - w)))
    raise ValueError(f"unknown lr_schedule {sched!r}")


def make_optimizer(model, train_cfg):
    tc = dict(TRAIN_DEFAULTS)
    tc.update(train_cfg)
    # "weight_decay: on embeddings and linear weights only" (configs/example.toml): the 2-D tensors
    decay = [p for p in model.params.values() if p.dim() == 2]        # wte, wpe, enc.*, linear weights
    no_decay = [p for p in model.params.values() if p.dim() != 2]     # biases, norm gains/biases, omega, gain, rezero
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(tc["weight_decay"])},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=float(tc["lr"]), betas=(float(tc["beta1"]), float(tc["beta2"])), eps=float(tc["adam_eps"]),
    )
    # LambdaLR evaluates the lambda at last_epoch = 0, 1, ... (0-based step s); we want f(s + 1).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(tc, s + 1))
    return opt, sched


def global_grad_norm(params):
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params if p.grad is not None))


def train(model, input_ids, labels, train_cfg, **inputs):
    """Train on the same fixed batch every step; returns one record per step (1-based "step").
    inputs: the batch's other forward inputs (token_types, key_mask, decoder_input_ids, decoder_mask)."""
    tc = dict(TRAIN_DEFAULTS)
    tc.update(train_cfg)
    opt, sched = make_optimizer(model, tc)
    params = model.parameters()
    records = []
    for s in range(int(tc["steps"])):
        lr_now = opt.param_groups[0]["lr"]
        opt.zero_grad(set_to_none=True)
        loss, _ = forward(model, input_ids, labels, **inputs)
        loss.backward()
        if tc["grad_clip"] > 0:
            gn = float(torch.nn.utils.clip_grad_norm_(params, float(tc["grad_clip"])))
        else:
            gn = global_grad_norm(params)
        opt.step()
        sched.step()
        records.append({"step": s + 1, "loss": float(loss.detach()), "lr": lr_now, "grad_norm": gn})
    return records
