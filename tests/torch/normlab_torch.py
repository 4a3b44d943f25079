"""normlab_torch: an independent PyTorch implementation of the normlab model (docs/MODEL.md).

This is the oracle the C++ engine is checked against, so it is written for readability, not speed:
every formula is spelled out as in MODEL.md, attention is written by hand, and there is no dropout
(the configurations that are checked use dropout 0; a non-zero dropout is rejected).

Public API
    normalize_config(cfg)            -> config dict with every key explicit (as in checkpoint metadata)
    Model(config, dtype)             -> .config, .params (OrderedDict name -> Parameter, canonical order)
    load_checkpoint(path, dtype)     -> (model, config)   reads a normlab safetensors checkpoint
    save_checkpoint(model, path)     -> writes float32 tensors + metadata {"config": json}
    forward(model, input_ids, labels)-> (loss, logits)
    forward_params(config, params, input_ids, labels) -> (loss, logits)   functional form
    param_specs(config)              -> [(name, shape)] in canonical order
    lr_factor(train_cfg, t)          -> f(t) of the LR schedule (t is the 1-based step)
    make_optimizer(model, train_cfg) -> (torch.optim.AdamW, LambdaLR)
    train(model, input_ids, labels, train_cfg) -> list of {"step", "loss", "lr", "grad_norm"}
"""

import json
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F

PLACEMENTS = ("post", "pre", "sandwich", "prepost", "deepnorm", "none")
IN_NORM = ("pre", "sandwich", "prepost")         # ln_in before the branch
BRANCH_NORM = ("sandwich",)                      # ln_branch on the branch output
OUT_NORM = ("post", "prepost", "deepnorm")       # ln_out after the residual sum
FINAL_NORM = ("pre", "sandwich")                 # ln_f exists iff the last layer is one of these
IGNORE_INDEX = -100
MASK_TOKEN = 256

# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------

DEFAULTS = {
    "arch": "gpt",
    "d_model": 128,
    "n_heads": 4,
    "n_layers": 4,
    "d_ff": None,        # 4 * d_model
    "vocab": None,       # 256 (gpt) / 257 (encoder)
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
}


def normalize_config(cfg, strict=True):
    """Fill defaults and resolve every derived key, as normlab writes them into checkpoint metadata.

    strict=False ignores unknown keys (instead of raising) -- used when reading checkpoint metadata.
    """
    unknown = set(cfg) - set(DEFAULTS)
    if unknown and strict:
        raise ValueError(f"unknown model config keys: {sorted(unknown)}")
    c = dict(DEFAULTS)
    c.update({k: v for k, v in cfg.items() if k in DEFAULTS})
    if c["arch"] not in ("gpt", "encoder"):
        raise ValueError(f"arch must be gpt or encoder, got {c['arch']!r}")
    if c["norm"] not in ("layernorm", "rmsnorm"):
        raise ValueError(f"norm must be layernorm or rmsnorm, got {c['norm']!r}")
    if c["activation"] not in ("gelu", "gelu_exact", "relu"):
        raise ValueError(f"activation must be gelu, gelu_exact or relu, got {c['activation']!r}")
    if c["head"] not in ("tied", "mlm", "none"):
        raise ValueError(f"head must be tied, mlm or none, got {c['head']!r}")
    c["type_vocab"] = int(c["type_vocab"])
    c["embed_norm"] = bool(c["embed_norm"])
    L = int(c["n_layers"])
    if c["d_model"] % c["n_heads"] != 0:
        raise ValueError("n_heads must divide d_model")
    if c["d_ff"] is None:
        c["d_ff"] = 4 * c["d_model"]
    if c["vocab"] is None:
        c["vocab"] = 256 if c["arch"] == "gpt" else 257
    p = c["placement"]
    placement = [p] * L if isinstance(p, str) else list(p)
    if len(placement) != L:
        raise ValueError(f"placement list has {len(placement)} entries, n_layers is {L}")
    for q in placement:
        if q not in PLACEMENTS:
            raise ValueError(f"unknown placement {q!r}")
    c["placement"] = placement
    if c["init"] == "auto":
        c["init"] = "deepnet" if "deepnorm" in placement else "gpt2"
    if c["init"] not in ("normal", "gpt2", "xavier", "deepnet"):
        raise ValueError(f"unknown init {c['init']!r}")
    c["eps"] = float(c["eps"])
    c["init_std"] = float(c["init_std"])
    c["dropout"] = float(c["dropout"])
    c["residual"] = bool(c["residual"])
    c["mlp"] = bool(c["mlp"])
    return c


def residual_alpha(config, placement):
    """alpha of one sub-layer: 0 without residual, (2L)^(1/4) for deepnorm, else 1."""
    if not config["residual"]:
        return 0.0
    if placement == "deepnorm":
        return (2.0 * config["n_layers"]) ** 0.25
    return 1.0


def has_final_norm(config):
    return config["placement"][-1] in FINAL_NORM


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

def _norm_specs(config, prefix):
    C = config["d_model"]
    specs = [(prefix + ".weight", (C,))]
    if config["norm"] == "layernorm":
        specs.append((prefix + ".bias", (C,)))
    return specs


def param_specs(config):
    """[(name, shape)] in canonical order (MODEL.md, "Parameters")."""
    C, Fd, V = config["d_model"], config["d_ff"], config["vocab"]
    specs = [("wte.weight", (V, C)), ("wpe.weight", (config["seq_len"], C))]
    if config["type_vocab"] > 0:
        specs.append(("wtt.weight", (config["type_vocab"], C)))
    if config["embed_norm"]:
        specs += _norm_specs(config, "ln_emb")
    for l, p in enumerate(config["placement"]):
        for sub, (in_lin, in_shape), (out_lin, out_shape) in (
            ("attn", ("qkv", (3 * C, C)), ("proj", (C, C))),
            ("mlp", ("fc", (Fd, C)), ("proj", (C, Fd))),
        ):
            if sub == "mlp" and not config["mlp"]:
                continue
            pre = f"h.{l}.{sub}"
            if p in IN_NORM:
                specs += _norm_specs(config, pre + ".ln_in")
            specs += [(f"{pre}.{in_lin}.weight", in_shape), (f"{pre}.{in_lin}.bias", (in_shape[0],))]
            specs += [(f"{pre}.{out_lin}.weight", out_shape), (f"{pre}.{out_lin}.bias", (out_shape[0],))]
            if p in BRANCH_NORM:
                specs += _norm_specs(config, pre + ".ln_branch")
            if p in OUT_NORM:
                specs += _norm_specs(config, pre + ".ln_out")
    if has_final_norm(config):
        specs += _norm_specs(config, "ln_f")
    if config["head"] == "mlm":
        specs += [("head.dense.weight", (C, C)), ("head.dense.bias", (C,))]
        specs += _norm_specs(config, "head.ln")
        specs.append(("head.bias", (V,)))
    return specs


def is_norm_param(name):
    return any(f".{k}." in "." + name for k in ("ln_in", "ln_branch", "ln_out", "ln_f", "ln_emb", "ln"))


def init_params(config, dtype=torch.float64):
    """The initialization schemes of MODEL.md, drawn from torch's RNG seeded with config["seed"].

    (Not bit-identical to normlab's RNG -- only the distributions are the contract.)
    """
    g = torch.Generator().manual_seed(int(config["seed"]))
    C, L, std = config["d_model"], config["n_layers"], config["init_std"]
    scheme = config["init"]
    beta = (8.0 * L) ** -0.25
    out = OrderedDict()

    def normal(shape, s):
        return torch.randn(shape, generator=g, dtype=torch.float64) * s

    def uniform(shape, a):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * a

    for name, shape in param_specs(config):
        if name in ("wte.weight", "wpe.weight", "wtt.weight"):
            t = normal(shape, std)
        elif is_norm_param(name):
            t = torch.ones(shape, dtype=torch.float64) if name.endswith(".weight") else torch.zeros(shape, dtype=torch.float64)
        elif name.endswith(".bias"):
            t = torch.zeros(shape, dtype=torch.float64)
        else:  # linear weight (out, in)
            t = torch.empty(shape, dtype=torch.float64)
            is_qkv = name.endswith("attn.qkv.weight")
            blocks = [(0, C), (C, 2 * C), (2 * C, 3 * C)] if is_qkv else [(0, shape[0])]
            for bi, (r0, r1) in enumerate(blocks):
                fan_out, fan_in = r1 - r0, shape[1]
                bshape = (r1 - r0, shape[1])
                if scheme == "normal":
                    t[r0:r1] = normal(bshape, std)
                elif scheme == "gpt2":
                    s = std / math.sqrt(2 * L) if name.endswith(".proj.weight") else std
                    t[r0:r1] = normal(bshape, s)
                elif scheme == "xavier":
                    t[r0:r1] = uniform(bshape, math.sqrt(6.0 / (fan_in + fan_out)))
                elif scheme == "deepnet":
                    gain = 1.0 if (is_qkv and bi < 2) or name.startswith("head.") else beta
                    t[r0:r1] = normal(bshape, gain * math.sqrt(2.0 / (fan_in + fan_out)))
        out[name] = t.to(dtype)
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
                p.copy_(t.to(self.dtype))

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


def attention(config, params, prefix, h, key_mask=None):
    B, T, C = h.shape
    NH = config["n_heads"]
    HS = C // NH
    qkv = linear(h, params[prefix + ".qkv.weight"], params[prefix + ".qkv.bias"])   # (B, T, 3C)
    q, k, v = qkv[..., 0:C], qkv[..., C:2 * C], qkv[..., 2 * C:3 * C]

    def heads(z):  # (B, T, C) -> (B, NH, T, HS); head n = columns n*HS .. (n+1)*HS
        return z.reshape(B, T, NH, HS).permute(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    S = (q @ k.transpose(-1, -2)) / math.sqrt(HS)                                  # (B, NH, T, T)
    if config["arch"] == "gpt":
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)        # key j > query i
        S = S.masked_fill(future, float("-inf"))
    if key_mask is not None:  # (B, T): 0 = padding, which no query attends to
        S = S.masked_fill(~key_mask.bool()[:, None, None, :], float("-inf"))
    P = torch.softmax(S, dim=-1)
    y = (P @ v).permute(0, 2, 1, 3).reshape(B, T, C)                                # heads concatenated
    return linear(y, params[prefix + ".proj.weight"], params[prefix + ".proj.bias"])


def mlp(config, params, prefix, h, key_mask=None):
    u = linear(h, params[prefix + ".fc.weight"], params[prefix + ".fc.bias"])
    a = activation(config, u)
    return linear(a, params[prefix + ".proj.weight"], params[prefix + ".proj.bias"])


def sublayer(config, params, prefix, placement, branch, x, key_mask=None):
    alpha = residual_alpha(config, placement)
    h = norm(config, params, prefix + ".ln_in", x) if placement in IN_NORM else x
    f = branch(config, params, prefix, h, key_mask)
    g = norm(config, params, prefix + ".ln_branch", f) if placement in BRANCH_NORM else f
    r = alpha * x + g
    return norm(config, params, prefix + ".ln_out", r) if placement in OUT_NORM else r


def forward_params(config, params, input_ids, labels=None, token_types=None, key_mask=None):
    """Functional forward: params is a name -> tensor mapping. Returns (loss or None, logits);
    logits is None for a headless model (head = none)."""
    config = normalize_config(config, strict=False)   # idempotent on an already-normalized config
    input_ids = torch.as_tensor(input_ids).long()
    B, T = input_ids.shape
    if T > config["seq_len"]:
        raise ValueError(f"T={T} > seq_len={config['seq_len']}")
    wte = params["wte.weight"]
    x = wte[input_ids] + params["wpe.weight"][0:T]
    if config["type_vocab"] > 0:
        types = torch.zeros_like(input_ids) if token_types is None else torch.as_tensor(token_types).long()
        x = x + params["wtt.weight"][types]
    if config["embed_norm"]:
        x = norm(config, params, "ln_emb", x)
    if key_mask is not None:
        key_mask = torch.as_tensor(key_mask)
    for l, p in enumerate(config["placement"]):
        x = sublayer(config, params, f"h.{l}.attn", p, attention, x, key_mask)
        if config["mlp"]:
            x = sublayer(config, params, f"h.{l}.mlp", p, mlp, x, key_mask)
    xf = norm(config, params, "ln_f", x) if has_final_norm(config) else x
    if config["head"] == "none":
        return None, None
    if config["head"] == "mlm":
        t = activation(config, linear(xf, params["head.dense.weight"], params["head.dense.bias"]))
        t = norm(config, params, "head.ln", t)
        logits = t @ wte.t() + params["head.bias"]
    else:
        logits = xf @ wte.t()                                                        # tied output
    loss = None
    if labels is not None:
        labels = torch.as_tensor(labels).long()
        V = logits.shape[-1]
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    return loss, logits


def forward(model, input_ids, labels=None):
    return forward_params(model.config, model.params, input_ids, labels)


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
    decay = [p for p in model.params.values() if p.dim() == 2]        # wte, wpe, linear weights
    no_decay = [p for p in model.params.values() if p.dim() != 2]     # biases, norm gains/biases
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


def train(model, input_ids, labels, train_cfg):
    """Train on the same fixed batch every step; returns one record per step (1-based "step")."""
    tc = dict(TRAIN_DEFAULTS)
    tc.update(train_cfg)
    opt, sched = make_optimizer(model, tc)
    params = model.parameters()
    records = []
    for s in range(int(tc["steps"])):
        lr_now = opt.param_groups[0]["lr"]
        opt.zero_grad(set_to_none=True)
        loss, _ = forward(model, input_ids, labels)
        loss.backward()
        if tc["grad_clip"] > 0:
            gn = float(torch.nn.utils.clip_grad_norm_(params, float(tc["grad_clip"])))
        else:
            gn = global_grad_norm(params)
        opt.step()
        sched.step()
        records.append({"step": s + 1, "loss": float(loss.detach()), "lr": lr_now, "grad_norm": gn})
    return records
