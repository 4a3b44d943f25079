"""normlab_torch_hyper: hyper-connections (model.hyper) in the PyTorch oracle, written from the authors'
code rather than from normlab's: Zhu et al.'s HC as lucidrains/hyper-connections computes it (the
width connection's einsum of alpha (n, n+1) with the streams, the depth connection's beta, the dynamic
parts tanh(norm(H) W) times a scale), and DeepSeek's mHC as MaxText's layers/mhc.py does (an RMSNorm over
the flattened n C streams, one fused projection, sigmoid pre and 2 sigmoid post maps, Sinkhorn-Knopp on
the residual map, or with mHC-lite a softmax over the n! permutation matrices), and Kimi's Attention
Residuals as Kimi K3's layer computes them (Megatron Bridge's KimiK3TransformerLayer and attn_res_aggregate:
a bank of finished blocks and the current block's prefix sum, each sub-layer's input a softmax over the
bank and the prefix of w . RMSNorm(row), a block written at every attn_res_block-th sub-layer, one more
aggregate at the end). The norms are normlab's (x / sqrt(mean x^2 + eps) times a gain): lucidrains' RMSNorm
is x / |x| sqrt(C) (gamma + 1), the same map with eps = 0 and the gain stored as gamma + 1.

Part of the PyTorch oracle; normlab_torch.py is the entry point and lists the whole API.
"""

import itertools
import math

import torch


def hyper_param_specs(config, pre):
    """[(name, shape)] of sub-layer `pre`'s hyper-connection ("h.3.attn"), in normlab's order."""
    form, n, C = config["hyper"], config["hyper_streams"], config["d_model"]
    if form == "none":
        return []
    if form == "hc_static":
        return [(pre + ".hc.alpha", (n, n + 1)), (pre + ".hc.beta", (n,))]
    if form == "hc":
        return [(pre + ".hc.norm.weight", (C,)), (pre + ".hc.alpha", (n, n + 1)), (pre + ".hc.beta", (n,)),
                (pre + ".hc.alpha_fn", (n + 1, C)), (pre + ".hc.alpha_scale", (1,)), (pre + ".hc.beta_fn", (C,)),
                (pre + ".hc.beta_scale", (1,))]
    if form == "attn_res":   # Kimi K3's *_res_norm (RMSNorm gain) and *_res_proj (Linear(C, 1), the pseudo-query)
        return [(pre + ".hc.norm.weight", (C,)), (pre + ".hc.query", (C,))]
    if form in ("mhc", "mhc_lite"):
        W = 2 * n + (n * n if form == "mhc" else math.factorial(n))
        return [(pre + ".hc.norm.weight", (n * C,)), (pre + ".hc.phi", (W, n * C)), (pre + ".hc.scale", (3,)),
                (pre + ".hc.bias", (W,))]
    raise ValueError(f"hyper must be none, hc, hc_static, mhc, mhc_lite or attn_res, got {form!r}")


def hyper_init(config, name, shape, normal):
    """The initial value of hyper-connection parameter `name`: lucidrains' static alpha [e_(i mod n) | I]
    (i the sub-layer's index in its stack, its layer_index), beta 1, the dynamic maps 0 and their scales
    0.01; MaxText's mHC projection normal with variance 1 / fan-in, scales 0.01, biases 0; gains 1."""
    n = config["hyper_streams"]
    what = name.split(".hc.", 1)[1]
    if what == "alpha":
        parts = name.split(".")
        slot = 2 * int(parts[parts.index("h") + 1]) + (1 if parts[parts.index("h") + 2] == "mlp" else 0)
        a = torch.zeros(shape, dtype=torch.float64)
        a[slot % n, 0] = 1.0
        a[:, 1:] = torch.eye(n, dtype=torch.float64)
        return a
    if what in ("beta", "norm.weight"):
        return torch.ones(shape, dtype=torch.float64)
    if what in ("alpha_scale", "beta_scale", "scale"):
        return torch.full(shape, 0.01, dtype=torch.float64)
    if what == "phi":
        return normal(shape, 1.0 / math.sqrt(shape[1]))
    return torch.zeros(shape, dtype=torch.float64)


def _rmsnorm(z, w, eps):
    return z / torch.sqrt((z * z).mean(dim=-1, keepdim=True) + eps) * w


def sinkhorn(t, iters):
    """MaxText's sinkhorn(): rows and columns of the last two axes summing to 1."""
    eps = 1e-6
    t = torch.softmax(t, dim=-1) + eps
    t = t / (t.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        t = t / (t.sum(dim=-1, keepdim=True) + eps)
        t = t / (t.sum(dim=-2, keepdim=True) + eps)
    return t


def width_connection(config, params, pre, H):
    """H (B, T, n, C) -> (branch input (B, T, C), residuals (B, T, n, C), beta (B, T, n))."""
    form, n, eps = config["hyper"], config["hyper_streams"], config["eps"]
    if form in ("hc", "hc_static"):   # lucidrains HyperConnections.width_connection
        alpha = params[pre + ".hc.alpha"]
        beta = params[pre + ".hc.beta"]
        if form == "hc":
            normed = _rmsnorm(H, params[pre + ".hc.norm.weight"], eps)
            alpha = alpha + torch.tanh(normed @ params[pre + ".hc.alpha_fn"].T) * params[pre + ".hc.alpha_scale"]
            beta = beta + torch.tanh(normed @ params[pre + ".hc.beta_fn"]) * params[pre + ".hc.beta_scale"]
        else:
            beta = beta.expand(H.shape[:-2] + (n,))
        mix = torch.einsum("...st,...sd->...td", alpha, H)
        return mix[..., 0, :], mix[..., 1:, :], beta
    # mhc: MaxText ManifoldConstrainedHyperConnections.__call__
    B, T, _, C = H.shape
    norm_x = _rmsnorm(H.reshape(B, T, n * C), params[pre + ".hc.norm.weight"], eps)
    h = norm_x @ params[pre + ".hc.phi"].T   # (nn.Linear layout)
    scale, bias = params[pre + ".hc.scale"], params[pre + ".hc.bias"]
    h_pre, h_post, h_res = h[..., :n], h[..., n:2 * n], h[..., 2 * n:]
    pre_map = torch.sigmoid(scale[0] * h_pre + bias[:n]) + 1e-6
    post_map = 2.0 * torch.sigmoid(scale[1] * h_post + bias[n:2 * n])
    if form == "mhc_lite":   # MaxText's res_mapping with enable_mhc_lite: softmax weights of the n! permutations
        perms = torch.eye(n, dtype=H.dtype)[torch.tensor(list(itertools.permutations(range(n))))]   # (n!, n, n)
        weights = torch.softmax(scale[2] * h_res + bias[2 * n:], dim=-1)
        res_map = torch.einsum("bsn,nkm->bskm", weights, perms)
    else:
        res_map = sinkhorn(scale[2] * h_res.reshape(B, T, n, n) + bias[2 * n:].reshape(n, n), config["sinkhorn_iters"])
    layer_input = torch.einsum("bsk,bskd->bsd", pre_map, H)
    residuals = torch.einsum("bskm,bskd->bsmd", res_map, H)
    return layer_input, residuals, post_map


def attn_res_aggregate(prefix, bank, norm_weight, query, eps):
    """Kimi K3's attn_res_aggregate: rows = [bank..., prefix]; scores = RMSNorm(rows) . (gain * w);
    the softmax over the rows weights them."""
    rows = torch.stack(bank + [prefix], dim=-2)
    normalized = rows / torch.sqrt((rows * rows).mean(dim=-1, keepdim=True) + eps)
    scores = (normalized * (norm_weight * query)).sum(dim=-1)
    return (torch.softmax(scores, dim=-1).unsqueeze(-1) * rows).sum(dim=-2)


def run_attn_res_stack(config, params, subs, x, sublayer_parts, hidden=None):
    """Attention Residuals as KimiK3TransformerLayer.forward runs them, its block size counted in sub-layers:
    the prefix starts as x and the bank empty; each sub-layer's input is the aggregate of the bank and the
    prefix; a sub-layer at a multiple of attn_res_block first moves the prefix into the bank and starts a new
    prefix with its output, any other adds its output to the prefix; the stack ends with the output
    aggregate (output_attn_res_norm, output_attn_res_proj). hidden: what normlab reports per layer, the
    embedding output, then x plus every output so far, and the final aggregate."""
    block, eps = config["attn_res_block"], config["eps"]
    per_layer = max(1, len(subs) // max(1, config["n_layers"]))
    bank, prefix = [], x
    for i, (name, method, branch, mask, stack) in enumerate(subs):
        if hidden is not None and i % per_layer == 0:
            hidden.append(x if i == 0 else sum(bank) + prefix)
        u = attn_res_aggregate(prefix, bank, params[name + ".hc.norm.weight"], params[name + ".hc.query"], eps)
        _, _, _, g = sublayer_parts(config, params, name, method, branch, u, mask, stack)
        if i % block == 0:
            bank, prefix = bank + [prefix], g
        else:
            prefix = prefix + g
    out = attn_res_aggregate(prefix, bank, params["out.hc.norm.weight"], params["out.hc.query"], eps)
    if hidden is not None:
        hidden.append(out)
    return out


def run_hyper_stack(config, params, subs, x, sublayer_parts, hidden=None):
    """The stack's sub-layers on n streams: every stream starts as x; each sub-layer reads its branch
    input, runs its norm-branch-norm on it (sublayer_parts' g) and writes H' = residuals + beta g.
    Returns the sum of the streams (what the stack's ending reads). hidden: the stream entering each
    layer (the embedding output, then the sums) and the sum leaving the last."""
    if config["hyper"] == "attn_res":
        return run_attn_res_stack(config, params, subs, x, sublayer_parts, hidden)
    n = config["hyper_streams"]
    H = x.unsqueeze(-2).expand(x.shape[:-1] + (n, x.shape[-1]))
    per_layer = max(1, len(subs) // max(1, config["n_layers"]))
    for i, (prefix, method, branch, mask, stack) in enumerate(subs):
        if hidden is not None and i % per_layer == 0:
            hidden.append(x if i == 0 else H.sum(dim=-2))
        u, residuals, beta = width_connection(config, params, prefix, H)
        _, _, _, g = sublayer_parts(config, params, prefix, method, branch, u, mask, stack)
        H = residuals + beta.unsqueeze(-1) * g.unsqueeze(-2)   # depth connection
    out = H.sum(dim=-2)
    if hidden is not None:
        hidden.append(out)
    return out
