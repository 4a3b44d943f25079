"""normlab_torch_params: the oracle's parameters (docs/MODEL.md, "Parameters"): the parameter table
(names, shapes, roles, row blocks) in canonical order, the initialization schemes (with the closed-form
LayerScale and Admin values), the Model holding the tensors, and safetensors checkpoints in and out.

Part of the PyTorch oracle; normlab_torch.py is the entry point and lists the whole API.
"""

import json
import math
from collections import OrderedDict, namedtuple

import torch

from normlab_torch_hyper import hyper_init, hyper_param_specs
from normlab_torch_config import (GATED, METHODS, has_embed_norm, normalize_config, qk_norm_of, sites, stacks,
                                  sublayer_kinds)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

# role: tok_emb pos_emb type_emb norm_weight norm_bias norm_alpha bias linear omega gain rezero
# matrix: for linear weights and their biases, the map ("attn.qkv", "cross.kv", "mlp.proj", "head.dense")
# blocks: for linear weights, [(tag, r0, r1)] row blocks that init as one projection each:
#         attn.qkv q / k / v, cross.kv k / v, else one block tagged "q" (cross.q) or "" (the rest)
# method: the method of the layer the parameter belongs to (None outside the layers)
ParamSpec = namedtuple("ParamSpec", "name shape role stack matrix blocks method", defaults=(None,))


def _norm_table(config, prefix, stack, method=None, width=None):
    C = width or config["d_model"]
    qk = prefix.endswith(("q_norm", "k_norm", "v_norm"))
    affine = not qk or config["qk_norm_affine"]          # a weightless QK-norm holds no gain and no bias
    if config["norm"] == "l2":                           # the unit sphere has no parameters
        return []
    if config["norm"] == "ssnorm":                       # one scalar gain (init 1), none when weightless
        return [ParamSpec(prefix + ".alpha", (1,), "norm_alpha", stack, None, None, method)] if affine else []
    t = [ParamSpec(prefix + ".weight", (C,), "norm_weight", stack, None, None, method)] if affine else []
    if config["norm"] in ("layernorm", "dyt", "derf") and affine and config["norm_bias"]:
        t.append(ParamSpec(prefix + ".bias", (C,), "norm_bias", stack, None, None, method))
    if config["norm"] in ("dyt", "derf"):   # learned scalars: alpha (init norm_alpha); Derf's shift (init 0)
        t.append(ParamSpec(prefix + ".alpha", (1,), "norm_alpha", stack, None, None, method))
    if config["norm"] == "derf":
        t.append(ParamSpec(prefix + ".shift", (1,), "norm_bias", stack, None, None, method))
    return t


def _linear_table(name, rows, cols, stack, matrix, blocks=None, method=None, bias=True):
    t = [ParamSpec(name + ".weight", (rows, cols), "linear", stack, matrix, blocks or [("", 0, rows)], method)]
    if bias:
        t.append(ParamSpec(name + ".bias", (rows,), "bias", stack, matrix, None, method))
    return t


def param_table(config):
    """Every parameter in canonical order (MODEL.md, "Parameters" and the encdec table)."""
    c = config
    C, Fd, V = c["d_model"], c["d_ff"], c["vocab"]
    learned = c["positions"] == "learned"   # rope / none: no position table
    t = [ParamSpec("wte.weight", (V, C), "tok_emb", None, None, None)]
    if c["embed_scale_learned"]:
        t.append(ParamSpec("embed_scale", (1,), "gain", None, None, None))
    if learned:
        t.append(ParamSpec("wpe.weight", (c["seq_len"], C), "pos_emb", None, None, None))
    if c["arch"] == "encdec":
        if not c["shared_embeddings"]:
            t.append(ParamSpec("enc.wte.weight", (c["src_vocab"], C), "tok_emb", "enc", None, None))
        if learned:
            t.append(ParamSpec("enc.wpe.weight", (c["seq_len"], C), "pos_emb", "enc", None, None))
    if c["type_vocab"] > 0:
        t.append(ParamSpec("wtt.weight", (c["type_vocab"], C), "type_emb", None, None, None))
    if has_embed_norm(c):
        t += _norm_table(c, "ln_emb", None)
    qb, ob = c["bias"] != "none", c["bias"] == "all"   # model.bias: the q/k/v maps' biases; the others'
    for st in stacks(c):
        for l, method in enumerate(st.methods):
            m = METHODS[method]
            lp = f"{st.prefix}.{l}"
            for kind in sublayer_kinds(c, st):
                pre = f"{lp}.{kind}"
                in_norm, branch_norm, out_norm = sites(method, kind)
                if in_norm:
                    t += _norm_table(c, pre + ".ln_in", st.name, method)
                if kind == "attn":
                    W = c["n_kv_heads"] * (C // c["n_heads"])   # the key and value projections' rows
                    t += _linear_table(pre + ".qkv", C + 2 * W, C, st.name, "attn.qkv",
                                       [("q", 0, C), ("k", C, C + W), ("v", C + W, C + 2 * W)], method, qb)
                    qk, v = qk_norm_of(c, method)   # QK-norm: a gain per head (HS) or per projection
                    if qk != "none":
                        HS = C // c["n_heads"]
                        for part, width in (("q", C), ("k", W), ("v", W))[:3 if v else 2]:
                            t += _norm_table(c, f"{pre}.{part}_norm", st.name, method, HS if qk == "heads" else width)
                    if c["attn_gate"] != "none":   # gated attention: the gate map, biased as the q map ("g": a
                        G = c["n_heads"] if c["attn_gate"] == "headwise" else C   # map of h, no branch scaling)
                        t += _linear_table(pre + ".gate", G, C, st.name, "attn.gate", [("g", 0, G)], method, qb)
                    if c["attn_sink"]:   # learned sink logits, one per query head, starting at 0
                        t.append(ParamSpec(pre + ".sinks", (c["n_heads"],), "sink", st.name, None, None, method))
                    t += _linear_table(pre + ".proj", C, C, st.name, "attn.proj", None, method, ob)
                elif kind == "cross":
                    t += _linear_table(pre + ".q", C, C, st.name, "cross.q", [("q", 0, C)], method, qb)
                    t += _linear_table(pre + ".kv", 2 * C, C, st.name, "cross.kv", [("k", 0, C), ("v", C, 2 * C)],
                                       method, qb)
                    t += _linear_table(pre + ".proj", C, C, st.name, "cross.proj", None, method, ob)
                else:
                    if c["activation"] in GATED:   # [gate; up] rows, each an (F, C) projection
                        t += _linear_table(pre + ".fc", 2 * Fd, C, st.name, "mlp.fc",
                                           [("gate", 0, Fd), ("up", Fd, 2 * Fd)], method, ob)
                    else:
                        t += _linear_table(pre + ".fc", Fd, C, st.name, "mlp.fc", None, method, ob)
                    t += _linear_table(pre + ".proj", C, Fd, st.name, "mlp.proj", None, method, ob)
                if branch_norm:
                    t += _norm_table(c, pre + ".ln_branch", st.name, method)
                if out_norm:
                    t += _norm_table(c, pre + ".ln_out", st.name, method)
                if m.shortcut == "omega" and c["residual"]:   # residual = false: no skip, no omega
                    t.append(ParamSpec(pre + ".omega", (C,), "omega", st.name, None, None, method))
                if m.sphere:   # nGPT: the eigen learning rate (C), s_qk (C) or s_uv (fc width)
                    t.append(ParamSpec(pre + ".eigen_lr", (C,), "sphere", st.name, None, None, method))
                    if kind == "attn":
                        t.append(ParamSpec(pre + ".sqk", (C,), "sphere", st.name, None, None, method))
                    if kind == "mlp":
                        t.append(ParamSpec(pre + ".suv", ((2 if c["activation"] in GATED else 1) * Fd,), "sphere",
                                           st.name, None, None, method))
                if m.branch in ("gain", "gain_c"):
                    t.append(ParamSpec(pre + ".gain", (1,) if m.branch == "gain" else (C,), "gain", st.name,
                                       None, None, method))
                for name, shape in hyper_param_specs(c, pre):
                    t.append(ParamSpec(name, shape, "hyper", st.name, None, None, method))
            if m.branch == "rezero":
                t.append(ParamSpec(lp + ".rezero", (1,), "rezero", st.name, None, None, method))
        if c.get("hyper") == "attn_res":   # the output aggregate's gain and pseudo-query (normlab_torch_hyper.py)
            for name, shape in hyper_param_specs(c, "out"):
                t.append(ParamSpec(name, shape, "hyper", st.name, None, None, None))
        if st.final:
            t += _norm_table(c, st.final, st.name)
    if c["head"] == "untied":
        t += _linear_table("lm_head", V, C, None, "lm_head", bias=False)
    pl = c["placement"] if isinstance(c["placement"], list) else [c["placement"]]
    if any(METHODS[q].sphere for q in pl) and c["head"] != "none":
        t.append(ParamSpec("sz", (V,), "sphere", None, None, None))   # nGPT's logit scale
    if c["head"] == "mlm":
        t += _linear_table("head.dense", C, C, None, "head.dense")
        t += _norm_table(c, "head.ln", None)
        t.append(ParamSpec("head.bias", (V,), "bias", None, "head.bias", None))
    return t


def param_specs(config):
    """[(name, shape)] in canonical order (MODEL.md, "Parameters")."""
    return [(p.name, p.shape) for p in param_table(config)]


def is_norm_param(name):
    return any(f".{k}." in "." + name
               for k in ("ln_in", "ln_branch", "ln_out", "ln_f", "ln_emb", "ln", "q_norm", "k_norm", "v_norm"))


# --------------------------------------------------------------------------------------------------
# Initialization
# --------------------------------------------------------------------------------------------------

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


def norm_alpha_init(config, name):
    """DyT / Derf: norm_alpha_attn at each self-attention's input norm when set (DyT's LLaMA recipe), else norm_alpha.
    SSNorm: its gain, 1."""
    if config["norm"] == "ssnorm":
        return 1.0
    if config.get("norm_alpha_attn") is not None and name.endswith(".attn.ln_in.alpha"):  # (resolved: never None)
        return config["norm_alpha_attn"]
    return config["norm_alpha"]


def sphere_init(config, name):
    """nGPT's stored initial values (the reference code): eigen_lr, sqk, sz 1/sqrt(C); suv 1."""
    return 1.0 if name.endswith(".suv") else 1.0 / math.sqrt(config["d_model"])


def project_to_sphere(config, params):
    """nGPT's normalize_matrices, in place: rows of wte, lm_head, qkv and fc, columns of proj, to length 1."""
    with torch.no_grad():
        for name, w in params.items():
            if w.dim() != 2:
                continue
            if name in ("wte.weight", "lm_head.weight") or name.endswith((".qkv.weight", ".fc.weight")):
                w.div_(torch.sqrt((w * w).sum(dim=1, keepdim=True)))
            elif name.endswith(".proj.weight"):
                w.div_(torch.sqrt((w * w).sum(dim=0, keepdim=True)))


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
        # (gpt: its L layers; encoder-only: its L layers too); a table the encoder shares -> encoder
        # (the official T-Fixup code scales a shared table in the encoder, not again in the decoder)
        shared = c["arch"] == "encdec" and c["shared_embeddings"]
        return by_name["enc"] if spec.stack == "enc" or shared else stacks(c)[-1]

    for spec in param_table(c):
        st = by_name.get(spec.stack)
        if spec.role == "tok_emb" and scheme == "tfixup":
            t = normal(spec.shape, C ** -0.5) * (9.0 * tfixup_embedding_stack(spec).depth) ** -0.25
        elif spec.role in ("tok_emb", "pos_emb", "type_emb"):
            t = normal(spec.shape, std)
        elif spec.role == "hyper":
            t = hyper_init(c, spec.name, spec.shape, normal)
        elif spec.role in ("norm_weight",):
            t = filled(spec.shape, 1.0)
        elif spec.role == "norm_alpha":
            t = filled(spec.shape, norm_alpha_init(c, spec.name))
        elif spec.name == "embed_scale":
            t = filled(spec.shape, c["embed_scale"])
        elif spec.role in ("norm_bias", "bias", "rezero", "sink"):
            t = filled(spec.shape, 0.0)
        elif spec.role == "omega":
            t = filled(spec.shape, admin_init_value(c, st))
        elif spec.role == "sphere":
            t = filled(spec.shape, sphere_init(c, spec.name))
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
                    gain = 1.0 if tag in ("q", "k", "g") or st is None else st.beta
                    t[r0:r1] = normal(bshape, gain * math.sqrt(2.0 / (fan_in + fan_out)))
                elif scheme == "tfixup":
                    scaled = st is not None and tag not in ("q", "k", "g")   # v rows, attn/cross proj, mlp
                    qk = st is not None and tag in ("q", "k")         # fairseq's Xavier gain 1/sqrt(2)
                    t[r0:r1] = uniform(bshape, math.sqrt(6.0 / (fan_in + fan_out))) * (
                        st.tfixup if scaled else 2 ** -0.5 if qk else 1.0)
        out[spec.name] = t.to(dtype)
    pl = c["placement"] if isinstance(c["placement"], list) else [c["placement"]]
    if any(METHODS[q].sphere for q in pl):
        project_to_sphere(c, out)
    return out


# --------------------------------------------------------------------------------------------------
# Model and checkpoints
# --------------------------------------------------------------------------------------------------

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
