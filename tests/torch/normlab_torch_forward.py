"""normlab_torch_forward: the oracle's forward pass (docs/MODEL.md), written out by hand: the norms,
activations and attention, one residual sub-layer of any method (sublayer_parts), a stack with
ResiDual's second stream (run_stack), the whole model (forward_outputs and its short forms), and the
Admin profile walk (admin_profile) that sets Admin's omegas from one batch.

Part of the PyTorch oracle; normlab_torch.py is the entry point and lists the whole API.
"""

import functools
import math

import torch
import torch.nn.functional as F

from normlab_torch_hyper import run_hyper_stack
from normlab_torch_config import (IGNORE_INDEX, METHODS, has_embed_norm, normalize_config, qk_norm_of, sites, stack_of,
                                  stacks, sublayer_kinds)


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


def dyt(z, gamma, beta, alpha):
    """DyT (Zhu et al. 2025): gamma * tanh(alpha z) + beta, alpha a learned scalar."""
    return torch.tanh(alpha * z) * gamma + beta


def derf(z, gamma, beta, alpha, shift):
    """Derf (Chen et al. 2025): gamma * erf(alpha z + s) + beta, alpha and s learned scalars."""
    return torch.erf(alpha * z + shift) * gamma + beta


def norm(config, params, prefix, z):
    kind = config["norm"]
    # a site without a gain (weightless QK-norm) or a bias (norm_bias = false) has gamma = 1, beta = 0
    gamma, beta = params.get(prefix + ".weight", 1.0), params.get(prefix + ".bias", 0.0)
    if kind == "layernorm":
        return layernorm(z, gamma, beta, config["eps"])
    if kind == "rmsnorm":
        return rmsnorm(z, gamma, config["eps"])
    if kind == "dyt":
        return dyt(z, gamma, beta, params[prefix + ".alpha"])
    if kind == "derf":
        return derf(z, gamma, beta, params[prefix + ".alpha"], params[prefix + ".shift"])
    if kind == "ssnorm":   # Outlier-Safe Pre-Training's single-scale RMSNorm: one learned scalar gain
        return rmsnorm(z, params.get(prefix + ".alpha", 1.0), config["eps"])
    if kind == "l2":   # the unit sphere (nGPT's justnorm): no parameters
        return z / torch.sqrt((z * z).sum(dim=-1, keepdim=True) + config["eps"])
    raise ValueError(f"unknown norm kind {kind!r}")


def embedding_scale(config, params):
    """The token embedding's factor: the learned scalar embed_scale, or the constant model.embed_scale."""
    return params["embed_scale"] if config.get("embed_scale_learned") else config.get("embed_scale", 1.0)


def gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def gelu_exact(u):
    return 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))


def activation(config, u):
    """The feed-forward activation; a gated one (SwiGLU, GeGLU) splits u's columns [gate | up]."""
    act = config["activation"]
    if act in ("swiglu", "geglu"):
        gate, up = u[..., : u.shape[-1] // 2], u[..., u.shape[-1] // 2:]
        return (gate * torch.sigmoid(gate) if act == "swiglu" else gelu_tanh(gate)) * up
    return {"gelu": gelu_tanh, "gelu_exact": gelu_exact, "relu": torch.relu}[act](u)


def linear(x, w, b):
    """x W^T + b; b None for a projection without bias (model.bias = none / qkv)."""
    return x @ w.t() if b is None else x @ w.t() + b


# QK-Clip's readings (normlab_torch_train.train with qk_clip > 0): while a dict, every self-attention
# records its heads' largest scores under its parameter prefix, the max over the forwards since reset.
LOGIT_MAX = None


def multihead(q, k, v, NH, causal=False, key_mask=None, scale=None, softcap=0.0, sinks=None, record=None):
    """Scaled dot-product attention, by hand. q (B, Tq, C), k and v (B, Tk, C); head n uses columns
    n*HS .. (n+1)*HS. Scores scale q.k (default 1/sqrt(HS)), then softcap tanh(S / softcap) when
    softcap > 0 (Gemma 2). causal: key j > query i gets -inf; key_mask (B, Tk), 0 = a padding key that
    gets -inf in every row. sinks (NH) or None: learned sink logits as gpt-oss's reference sdpa writes
    them, one more column of every head's scores, softmaxed with them and then dropped. record: called
    with each head's largest score (NH,) over the batch, masked keys and the sink left out.
    Returns y (B, Tq, C), the heads concatenated."""
    B, Tq, C = q.shape
    Tk = k.shape[1]
    HS = C // NH

    def heads(z, T):  # (B, T, C) -> (B, NH, T, HS)
        return z.reshape(B, T, NH, HS).permute(0, 2, 1, 3)

    q, k, v = heads(q, Tq), heads(k, Tk), heads(v, Tk)
    S = (q @ k.transpose(-1, -2)) * (scale if scale else 1.0 / math.sqrt(HS))       # (B, NH, Tq, Tk)
    if softcap and softcap > 0:
        S = softcap * torch.tanh(S / softcap)
    if causal:
        future = torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), diagonal=1)      # key j > query i
        S = S.masked_fill(future, float("-inf"))
    if key_mask is not None:  # (B, Tk): 0 = padding, which no query attends to
        S = S.masked_fill(~torch.as_tensor(key_mask).bool()[:, None, None, :], float("-inf"))
    if record is not None:
        record(S.detach().amax(dim=(0, 2, 3)))
    if sinks is not None:
        S = torch.cat([S, sinks.reshape(1, NH, 1, 1).expand(B, NH, Tq, 1)], dim=-1)
        P = torch.softmax(S, dim=-1)[..., :-1]
    else:
        P = torch.softmax(S, dim=-1)
    return (P @ v).permute(0, 2, 1, 3).reshape(B, Tq, C)                           # heads concatenated


def rope(config, x, heads=None):
    """Rotary positions (Su et al. 2021), written as complex multiplication: in each head the pairs
    (x[i], x[i + R/2]), i < R/2, are the complex numbers x[i] + j x[i + R/2], multiplied by
    exp(j t base^(-2i/R)) at position t; the head's dimensions past R are left as they are."""
    B, T, C = x.shape
    NH = heads or config["n_heads"]
    HS = C // NH
    R = 2 * int(math.floor(config["rope_fraction"] * HS / 2))
    xh = x.reshape(B, T, NH, HS)
    half = R // 2
    inv = config["rope_base"] ** (-2.0 * torch.arange(half, dtype=torch.float64) / R)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]            # (T, R/2)
    turn = torch.polar(torch.ones_like(angle), angle).to(torch.complex128)[None, :, None, :]
    z = torch.complex(xh[..., :half].to(torch.float64), xh[..., half:R].to(torch.float64)) * turn
    out = torch.cat([z.real.to(x.dtype), z.imag.to(x.dtype), xh[..., R:]], dim=-1)
    return out.reshape(B, T, C)


def position_table(config, params, name, T):
    """The learned positions added to the embedding (wpe / enc.wpe), or 0 without learned positions."""
    return params[name][0:T] if config.get("positions", "learned") == "learned" else 0.0


def attention(config, params, prefix, h, key_mask=None, causal=None, first_values=None):
    """Self-attention. causal=None: causal iff arch is gpt (a gpt / encoder model's only stack).
    first_values: the stack's list for value residual learning (value_residual > 0; ResFormer, as its
    authors' modeling_llama_resformer.py: the first layer appends its values, every later one uses
    (1 - lambda) v + lambda v_1; here after the v-norm, which their Llama does not have)."""
    C = h.shape[-1]
    if causal is None:
        causal = config["arch"] == "gpt"
    qkv = linear(h, params[prefix + ".qkv.weight"], params.get(prefix + ".qkv.bias"))   # [q (C) | k (W) | v (W)]
    NH, KVH = config["n_heads"], config["n_kv_heads"]
    W = KVH * (C // NH)                     # grouped-query: KVH key-value heads, NH / KVH queries each
    q, k, v = qkv[..., 0:C], qkv[..., C:C + W], qkv[..., C + W:C + 2 * W]
    st = stack_of(config, prefix)
    qk, vn = qk_norm_of(config, st.methods[int(prefix.split(".")[-2])])
    if qk != "none":   # QK-norm before RoPE: per head (rows of HS) or over the whole projection
        def qk_norm(t, name):
            if qk == "whole":
                return norm(config, params, f"{prefix}.{name}", t)
            shape = t.shape
            return norm(config, params, f"{prefix}.{name}", t.reshape(*shape[:-1], -1, C // NH)).reshape(shape)
        q, k = qk_norm(q, "q_norm"), qk_norm(k, "k_norm")
        if vn:
            v = qk_norm(v, "v_norm")
    lam = config.get("value_residual", 0.0)
    if lam > 0 and first_values is not None:
        if not first_values:
            first_values.append(v)
        else:
            v = (1 - lam) * v + lam * first_values[0]
    if config.get("positions", "learned") == "rope":
        q, k = rope(config, q), rope(config, k, KVH)
    if METHODS[st.methods[int(prefix.split(".")[-2])]].sphere:   # nGPT: each head onto the sphere, times s_qk
        s = (params[prefix + ".sqk"] * math.sqrt(C)).reshape(NH, C // NH)
        def unit_heads(t):
            t = t.reshape(*t.shape[:-1], NH, C // NH)
            return (s * t / torch.sqrt((t * t).sum(dim=-1, keepdim=True) + config["eps"])).reshape(*t.shape[:-2], C)
        q, k = unit_heads(q), unit_heads(k)
    if KVH != NH:   # every query head gets a copy of its group's key and value head
        def widen(t):
            return t.reshape(*t.shape[:-1], KVH, C // NH).repeat_interleave(NH // KVH, dim=-2).reshape(*t.shape[:-1], C)
        k, v = widen(k), widen(v)
    def record(m):   # QK-Clip's maxima (LOGIT_MAX above)
        LOGIT_MAX[prefix] = torch.maximum(LOGIT_MAX[prefix], m) if prefix in LOGIT_MAX else m
    scale = config.get("attn_scale")
    if config.get("mup_base_width", 0) > 0:   # muP: attn_mult / HS with attn_mult = HS_base, the base's heads alike
        HS = C // NH
        HS_base = HS * config["mup_base_width"] / config["d_model"]
        mine = math.sqrt(HS_base) / HS
        if scale is not None and abs(scale - mine) > 1e-12 * mine:
            raise ValueError(f"attn_scale {scale} with muP: the oracle computes {mine}")
        scale = mine
    y = multihead(q, k, v, NH, causal, key_mask, scale, config.get("attn_softcap", 0.0),
                  params.get(prefix + ".sinks"), record if LOGIT_MAX is not None else None)
    if config.get("attn_gate", "none") != "none":   # gated attention (Qiu et al. 2025): y * sigmoid(h W_g^T + b_g)
        g = torch.sigmoid(linear(h, params[prefix + ".gate.weight"], params.get(prefix + ".gate.bias")))
        if config["attn_gate"] == "headwise":   # one gate per head, over its HS channels
            y = (y.reshape(*y.shape[:-1], NH, C // NH) * g.unsqueeze(-1)).reshape(y.shape)
        else:
            y = y * g
    return linear(y, params[prefix + ".proj.weight"], params.get(prefix + ".proj.bias"))


def cross_attention(config, params, prefix, h, key_mask=None, memory=None):
    """Cross-attention: queries from the decoder stream h (B, T, C), keys and values from the memory
    (B, S, C); key_mask is the source padding mask (B, S)."""
    C = h.shape[-1]
    q = linear(h, params[prefix + ".q.weight"], params.get(prefix + ".q.bias"))           # (B, T, C)
    kv = linear(memory, params[prefix + ".kv.weight"], params.get(prefix + ".kv.bias"))   # (B, S, 2C) [k | v]
    k, v = kv[..., 0:C], kv[..., C:2 * C]
    y = multihead(q, k, v, config["n_heads"], False, key_mask)
    return linear(y, params[prefix + ".proj.weight"], params.get(prefix + ".proj.bias"))


def mlp(config, params, prefix, h, key_mask=None):
    u = linear(h, params[prefix + ".fc.weight"], params.get(prefix + ".fc.bias"))
    if prefix + ".suv" in params:   # nGPT: s_uv sqrt(C), column by column
        u = u * (params[prefix + ".suv"] * math.sqrt(config["d_model"]))
    a = activation(config, u)
    return linear(a, params[prefix + ".proj.weight"], params.get(prefix + ".proj.bias"))


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


def input_scale(prefix, method):
    """LayerNorm Scaling: ln_in's output times 1/sqrt(l), l = 1..L the layer's depth in its stack
    (read from the prefix: "h.3.attn", "enc.h.0.mlp" -> l = 4, 1); 1 for every other method."""
    if not METHODS[method].lns:
        return 1.0
    parts = prefix.split(".")
    return 1.0 / math.sqrt(int(parts[parts.index("h") + 1]) + 1)


def sublayer_parts(config, params, prefix, method, branch, x, key_mask=None, stack=None):
    """One residual sub-layer (MODEL.md, "Methods"). Returns (x', f, omega, g) with f = F(h) the branch
    output, omega the shortcut scale (a number or Admin's (C) tensor) and g = ln_branch(f) (or f), what
    a second stream adds (before the branch scale lambda, which only r applies)."""
    in_norm, branch_norm, out_norm = sites(method, prefix.rsplit(".", 1)[-1])
    omega = shortcut_scale(config, params, prefix, method, stack)
    lam = branch_scale(params, prefix, method)
    h = norm(config, params, prefix + ".ln_in", x) * input_scale(prefix, method) if in_norm else x
    f = branch(config, params, prefix, h, key_mask)
    g = norm(config, params, prefix + ".ln_branch", f) if branch_norm else f
    if METHODS[method].shortcut == "sphere":   # nGPT: A + |a| (g - A), A = x / |x|, a = eigen_lr 0.05 sqrt(C)
        a = torch.abs(params[prefix + ".eigen_lr"] * 0.05 * math.sqrt(config["d_model"]))
        A = x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + config["eps"])
        r = A + a * (g - A)
    else:   # CompleteP (nanoGPT-mup's Block: x + residual_scaling * branch, residual_scaling = 1 / depth_multiplier)
        beta = config["completep_base_depth"] / config["n_layers"] if config.get("completep_base_depth", 0) > 0 else 1.0
        r = omega * x + beta * (lam * g)
    out = norm(config, params, prefix + ".ln_out", r) if out_norm else r
    return out, f, omega, g


def sublayer(config, params, prefix, placement, branch, x, key_mask=None, stack=None):
    return sublayer_parts(config, params, prefix, placement, branch, x, key_mask, stack)[0]  # (one stream only)


def stack_sublayers(config, stack, key_mask, memory=None, memory_mask=None):
    """[(prefix, method, branch, mask)] of the stack's sub-layers in order; branch takes
    (config, params, prefix, h, mask) like attention / mlp."""
    out = []
    first_values = []   # value residual: the stack's first self-attention's values, for the later ones
    for l, method in enumerate(stack.methods):
        for kind in sublayer_kinds(config, stack):
            prefix = f"{stack.prefix}.{l}.{kind}"
            if kind == "attn":
                out.append((prefix, method, functools.partial(attention, causal=stack.causal, first_values=first_values),
                            key_mask))
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
    if config.get("hyper", "none") != "none":   # n streams (normlab_torch_hyper.py)
        out = run_hyper_stack(config, params, [sub + (stack,) for sub in subs], x, sublayer_parts, hidden)
        return stack_output(config, params, stack, out, None)
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
    return table[src] + position_table(config, params, "enc.wpe.weight", S)


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
        x = wte[tgt] + position_table(config, params, "wpe.weight", T)
        if decoder_mask is not None:
            decoder_mask = torch.as_tensor(decoder_mask)
        xf = run_stack(config, params, dec, x, decoder_mask, memory, key_mask, out["hidden"])
    else:
        if decoder_input_ids is not None or decoder_mask is not None:
            raise ValueError(f"decoder inputs given to a {config['arch']} model")
        _check_ids(config, input_ids, config["vocab"], "input_ids")
        T = input_ids.shape[1]
        x = wte[input_ids] * embedding_scale(config, params) + position_table(config, params, "wpe.weight", T)
        if config["type_vocab"] > 0:
            types = torch.zeros_like(input_ids) if token_types is None else torch.as_tensor(token_types).long()
            x = x + params["wtt.weight"][types]
        if has_embed_norm(config):
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
        w_out = params["lm_head.weight"] if config["head"] == "untied" else wte    # untied: its own matrix
        logits = xf @ w_out.t()                                                      # tied output
        if config.get("mup_base_width", 0) > 0:   # muP's MuReadout / MuSharedReadout: output_mult x / width_mult
            logits = (xf / (config["d_model"] / config["mup_base_width"])) @ w_out.t()
    if "sz" in params:   # nGPT: s_z sqrt(C), column by column
        logits = logits * (params["sz"] * math.sqrt(config["d_model"]))
    if config.get("logit_softcap", 0.0) > 0:   # Gemma 2's final soft-capping
        logits = config["logit_softcap"] * torch.tanh(logits / config["logit_softcap"])
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
            x = params["wte.weight"][tgt] + position_table(config, params, "wpe.weight", tgt.shape[1])
            walk(dec, x, None if decoder_mask is None else torch.as_tensor(decoder_mask), memory, key_mask)
        else:
            T = input_ids.shape[1]
            x = params["wte.weight"][input_ids] * embedding_scale(config, params) + position_table(config, params, "wpe.weight", T)
            if config["type_vocab"] > 0:
                types = torch.zeros_like(input_ids) if token_types is None else torch.as_tensor(token_types).long()
                x = x + params["wtt.weight"][types]
            if has_embed_norm(config):
                x = norm(config, params, "ln_emb", x)
            walk(stacks(config)[0], x, key_mask)
    return set_values
