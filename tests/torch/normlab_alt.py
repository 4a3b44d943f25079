"""normlab_alt: second and third formulations of the normlab forward (docs/MODEL.md), written
differently from normlab_torch.py so that selftest.py can check the oracle against them:

    alt_forward(model, ids, labels, kw, trace)       torch's functional building blocks
        (F.multi_head_attention_forward with key_padding_mask / attn_mask and, for the
        cross-attention, separate q / k / v projection weights; F.layer_norm; F.gelu; F.embedding;
        F.linear) and one written-out formula per method (post: N(x + F(x)), admin: N(omega x + F(x)),
        rezero: x + alpha F(x), ..., ResiDual's two streams as the paper writes them), with the
        DeepNorm constants typed in again from MODEL.md;
    transformer_forward(model, ids, labels, kw)      a post-LN or pre-LN encdec as a stack of
        torch.nn.TransformerEncoderLayer / TransformerDecoderLayer with the weights copied in.

Both take a normlab_torch.Model (config + params) and the batch of normlab_torch.forward_params.
"""

import math

import torch
import torch.nn.functional as F


def alt_forward(model, ids, labels, kw=None, trace=None):
    """Independent forward: library building blocks, one written-out formula per method.

    kw: key_mask (gpt / encoder padding; the encdec source mask), decoder_input_ids, decoder_mask.
    trace (a list) receives (stack name, prefix, method, x, f) per sub-layer: the stream entering it
    and its branch output, for the Admin profile check. Returns (loss, logits, memory or None)."""
    kw = kw or {}
    c, P = model.config, model.params
    C, NH = c["d_model"], c["n_heads"]
    one = 1.0 if c["residual"] else 0.0
    encdec = c["arch"] == "encdec"

    def N(prefix, z):   # over the last dimension (C, or a head's HS for QK-norm)
        if c["norm"] == "l2":      # nGPT's sphere: torch's F.normalize (max(|z|, eps) = |z| here; eps = 0 configs)
            assert c["eps"] == 0.0
            return F.normalize(z, p=2.0, dim=-1)
        if c["norm"] == "layernorm":
            return F.layer_norm(z, (z.shape[-1],), P[prefix + ".weight"], P[prefix + ".bias"], c["eps"])
        if c["norm"] == "dyt":     # Zhu et al. 2025: torch.nn.Tanh on alpha z, then the affine
            return torch.addcmul(P[prefix + ".bias"], P[prefix + ".weight"], torch.nn.Tanh()(P[prefix + ".alpha"] * z))
        if c["norm"] == "derf":    # Chen et al. 2025: erf via torch.special on alpha z + s
            u = torch.special.erf(P[prefix + ".alpha"] * z + P[prefix + ".shift"])
            return torch.addcmul(P[prefix + ".bias"], P[prefix + ".weight"], u)
        return P[prefix + ".weight"] * z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + c["eps"])

    def pad_mask(mask):   # torch's key_padding_mask: True = ignore that key
        return None if mask is None else (mask == 0)

    def self_attn_normed(prefix, h, causal, mask):
        # QK(V)-norm: the attention written out (torch's fused attention has no place for the norms):
        # per head, q_h = N(q_h), k_h = N(k_h) (and v_h), softmax(q_h k_h^T / sqrt(HS) + masks) v_h
        B, T, HS = h.shape[0], h.shape[1], C // NH
        q, k, v = F.linear(h, P[prefix + ".qkv.weight"], P.get(prefix + ".qkv.bias")).split(C, dim=-1)
        whole = c["qk_norm"] == "whole"
        heads = [t.reshape(B, T, NH, HS).permute(0, 2, 1, 3) for t in (q, k, v)]
        for i, part in enumerate(("q_norm", "k_norm", "v_norm")):
            if prefix + "." + part + ".weight" in P:
                t = (q, k, v)[i]
                heads[i] = (N(f"{prefix}.{part}", t).reshape(B, T, NH, HS).permute(0, 2, 1, 3) if whole
                            else N(f"{prefix}.{part}", heads[i]))
        scores = heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(HS)
        if causal:
            scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill((mask == 0)[:, None, None, :], float("-inf"))
        y = (torch.softmax(scores, -1) @ heads[2]).permute(0, 2, 1, 3).reshape(B, T, C)
        return F.linear(y, P[prefix + ".proj.weight"], P.get(prefix + ".proj.bias"))

    def self_attn_sphere(prefix, h, causal, mask):
        # nGPT (the reference model.py, without RoPE here): q_h = sqk_h sqrt(C) q_h / |q_h| (k alike, the
        # same sqk), softmax(q_h k_h^T sqrt(HS) + masks) v_h
        B, T, HS = h.shape[0], h.shape[1], C // NH
        q, k, v = F.linear(h, P[prefix + ".qkv.weight"], P.get(prefix + ".qkv.bias")).split(C, dim=-1)
        s = (P[prefix + ".sqk"] * C ** 0.5).view(1, 1, NH, HS)
        q, k = (s * F.normalize(t.view(B, T, NH, HS), p=2.0, dim=-1) for t in (q, k))
        q, k, v = (t.reshape(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * HS ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill((mask == 0)[:, None, None, :], float("-inf"))
        y = torch.einsum("bhij,bhjd->bhid", torch.softmax(scores, -1), v).transpose(1, 2).reshape(B, T, C)
        return F.linear(y, P[prefix + ".proj.weight"], P.get(prefix + ".proj.bias"))

    def self_attn(prefix, h, causal, mask):
        if prefix + ".sqk" in P:
            return self_attn_sphere(prefix, h, causal, mask)
        if prefix + ".q_norm.weight" in P:
            return self_attn_normed(prefix, h, causal, mask)
        # torch's own multi-head attention (the functional core of nn.MultiheadAttention): its fused
        # in_proj is [q | k | v] rows, heads split as n*HS..(n+1)*HS, scale 1/sqrt(HS)
        T = h.shape[1]
        am = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
        y, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), h.transpose(0, 1), h.transpose(0, 1), C, NH,
            P[prefix + ".qkv.weight"], P.get(prefix + ".qkv.bias"), None, None, False, 0.0,
            P[prefix + ".proj.weight"], P.get(prefix + ".proj.bias"), training=False,
            key_padding_mask=pad_mask(mask), need_weights=False, attn_mask=am)
        return y.transpose(0, 1)

    def cross_attn(prefix, h, mem, mem_mask):
        # separate q / k / v weights: q from the decoder, k = rows 0..C and v = rows C..2C of kv
        wkv = P[prefix + ".kv.weight"]
        y, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), mem.transpose(0, 1), mem.transpose(0, 1), C, NH,
            None, torch.cat([P[prefix + ".q.bias"], P[prefix + ".kv.bias"]]) if prefix + ".q.bias" in P else None,
            None, None, False, 0.0, P[prefix + ".proj.weight"], P.get(prefix + ".proj.bias"), training=False,
            key_padding_mask=pad_mask(mem_mask), need_weights=False, use_separate_proj_weight=True,
            q_proj_weight=P[prefix + ".q.weight"], k_proj_weight=wkv[:C], v_proj_weight=wkv[C:])
        return y.transpose(0, 1)

    def mlp(prefix, h):
        u = F.linear(h, P[prefix + ".fc.weight"], P.get(prefix + ".fc.bias"))
        if prefix + ".suv" in P:   # nGPT: suv sqrt(C) on every fc output
            u = u * P[prefix + ".suv"] * C ** 0.5
        act = c["activation"]
        if act in ("swiglu", "geglu"):   # torch's own GLU pieces: chunk, F.silu / F.gelu(tanh)
            gate, up = u.chunk(2, dim=-1)
            a = (F.silu(gate) if act == "swiglu" else F.gelu(gate, approximate="tanh")) * up
        else:
            a = F.gelu(u, approximate="tanh") if act == "gelu" else F.gelu(u) if act == "gelu_exact" else F.relu(u)
        return F.linear(a, P[prefix + ".proj.weight"], P.get(prefix + ".proj.bias"))

    def sub(stack, pre, lp, method, x, fn, alpha):
        fx = None

        def branch(h):
            nonlocal fx
            fx = fn(h)
            return fx
        if method == "post":
            y = N(pre + ".ln_out", one * x + branch(x))
        elif method == "pre":
            y = one * x + branch(N(pre + ".ln_in", x))
        elif method == "sandwich":
            y = one * x + N(pre + ".ln_branch", branch(N(pre + ".ln_in", x)))
        elif method == "prepost":
            y = N(pre + ".ln_out", one * x + branch(N(pre + ".ln_in", x)))
        elif method == "deepnorm":
            y = N(pre + ".ln_out", one * alpha * x + branch(x))
        elif method in ("none", "tfixup"):
            y = one * x + branch(x)
        elif method == "admin":
            y = N(pre + ".ln_out", (P[pre + ".omega"] * x if one else 0.0) + branch(x))
        elif method == "rezero":
            y = one * x + P[lp + ".rezero"] * branch(x)
        elif method == "skipinit":
            y = one * x + P[pre + ".gain"] * branch(x)
        elif method == "layerscale":
            y = one * x + P[pre + ".gain"] * branch(N(pre + ".ln_in", x))
        elif method == "peri":        # Kim et al. 2025 (its embedding norm: below)
            y = one * x + N(pre + ".ln_branch", branch(N(pre + ".ln_in", x)))
        elif method == "reordered":   # OLMo 2
            y = one * x + N(pre + ".ln_branch", branch(x))
        elif method == "lns":         # Sun et al. 2025: LN(x) / sqrt(l), l the 1-based layer of the stack
            depth = int(lp.rsplit(".", 1)[1]) + 1
            y = one * x + branch(N(pre + ".ln_in", x) / math.sqrt(depth))
        elif method in ("hybridnorm", "hybridnorm_pre"):
            # Zhuo et al. 2025, transcribed from the authors' OLMoSequentialBlock.forward
            # (BryceZhuo/HybridNorm, dense_model/olmo/model.py) with its four per-layer flags: HybridNorm
            # is attn_norm False, ffn_norm True, ffn_residual True (the paper's config); HybridNorm*'s
            # first layer is attn_norm True, ffn_residual False. attn_residual is False in both. The
            # authors' ff_norm is normlab's attn.ln_out in a hybridnorm layer (the same N(h)) and
            # mlp.ln_in in hybridnorm_pre; their attn_norm is attn.ln_in.
            flags = dict(attn_norm=method == "hybridnorm_pre", attn_residual=False, ffn_norm=True,
                         ffn_residual=method == "hybridnorm")
            ff_norm = lp + (".attn.ln_out" if method == "hybridnorm" else ".mlp.ln_in")
            if not pre.endswith(".mlp"):   # the attention half: x = x + att(h)
                if flags["attn_norm"]:
                    if flags["attn_residual"]:   # never set by HybridNorm; kept as their code reads
                        raise AssertionError("attn_residual")
                    else:
                        h = N(pre + ".ln_in", x)
                else:
                    h = x
                y = one * x + branch(h)
            else:                          # the feed-forward half: x = og_x + ffn(x)
                z = x   # their x, renamed: the trace below records the sub-layer's input
                if flags["ffn_norm"]:
                    if not flags["ffn_residual"]:
                        og_x = z
                    z = N(ff_norm, z)
                    if flags["ffn_residual"]:
                        og_x = z
                else:
                    og_x = z
                y = one * og_x + branch(z)
        elif method == "ngpt":        # Loshchilov et al. 2025: h <- N(A + |alpha| (N(F(h)) - A)), A = N(h)
            A = F.normalize(x, p=2.0, dim=-1)
            lr = (P[pre + ".eigen_lr"] * (0.05 * C ** 0.5)).abs()
            y = F.normalize(torch.lerp(A, F.normalize(branch(x), p=2.0, dim=-1), lr), p=2.0, dim=-1)
        else:
            raise AssertionError(method)
        if trace is not None:
            shortcut = one * alpha if method == "deepnorm" else (P[pre + ".omega"] if one else 0.0) if method == "admin" else one
            trace.append((stack, pre, method, x, fx, shortcut))
        return y

    def run_residual(prefix, methods, x0, causal, mask, mem, mem_mask, final):
        # ResiDual (Xie et al. 2023), as the paper writes it: the Post-LN stream x_a^k =
        # LN(x_a^{k-1} + f_k(x_a^{k-1})) and the dual stream x_d = x_0 + sum_k f_k, normalized once:
        # y = x_a^K + LN(x_d). The branch outputs are collected and summed at the end.
        assert set(methods) == {"residual"}
        xa, outputs = x0, []
        for l in range(len(methods)):
            lp = f"{prefix}.{l}"
            kinds = [("attn", lambda h: self_attn(lp + ".attn", h, causal, mask))]
            if mem is not None:
                kinds.append(("cross", lambda h: cross_attn(lp + ".cross", h, mem, mem_mask)))
            if c["mlp"]:
                kinds.append(("mlp", lambda h: mlp(lp + ".mlp", h)))
            for kind, fn in kinds:
                fk = fn(xa)
                outputs.append(fk)
                xa = N(f"{lp}.{kind}.ln_out", xa + fk)
        return xa + N(final, x0 + torch.stack(outputs).sum(0))

    def run(stack, prefix, methods, x, alpha, causal, mask, mem=None, mem_mask=None, final=None):
        if "residual" in methods:
            return run_residual(prefix, methods, x, causal, mask, mem, mem_mask, final)
        for l, method in enumerate(methods):
            lp = f"{prefix}.{l}"
            x = sub(stack, lp + ".attn", lp, method, x, lambda h: self_attn(lp + ".attn", h, causal, mask), alpha)
            if mem is not None:
                x = sub(stack, lp + ".cross", lp, method, x, lambda h: cross_attn(lp + ".cross", h, mem, mem_mask),
                        alpha)
            if c["mlp"]:
                x = sub(stack, lp + ".mlp", lp, method, x, lambda h: mlp(lp + ".mlp", h), alpha)
        return N(final, x) if methods[-1] in ("pre", "sandwich", "layerscale", "peri", "reordered", "lns", "hybridnorm",
                                              "hybridnorm_pre") else x

    memory = None
    if encdec:
        Nl, Ml = c["n_layers"], c["dec_layers"]
        src, src_mask = ids, kw.get("key_mask")
        src_table = P["wte.weight"] if c["shared_embeddings"] else P["enc.wte.weight"]
        e = F.embedding(src, src_table) + P["enc.wpe.weight"][:src.shape[1]].unsqueeze(0)
        memory = run("enc", "enc.h", c["placement"][:Nl], e, 0.81 * (Nl ** 4 * Ml) ** (1 / 16), False, src_mask,
                     final="enc.ln_f")
        tgt = kw["decoder_input_ids"]
        x = F.embedding(tgt, P["wte.weight"]) + P["wpe.weight"][:tgt.shape[1]].unsqueeze(0)
        x = run("dec", "h", c["placement"][Nl:], x, (3 * Ml) ** 0.25, True, kw.get("decoder_mask"), memory, src_mask,
                final="ln_f")
    else:
        L = c["n_layers"]
        x = F.embedding(ids, P["wte.weight"]) + P["wpe.weight"][:ids.shape[1]].unsqueeze(0)
        if c["placement"][0] == "peri":   # Peri-LN normalizes the embedding output too
            x = N("ln_emb", x)
        x = run("main", "h", c["placement"], x, (2 * L) ** 0.25, c["arch"] == "gpt", kw.get("key_mask"), final="ln_f")
    logits = F.linear(x, P["wte.weight"])
    if "sz" in P:   # nGPT's logit scale
        logits = logits * P["sz"] * C ** 0.5
    logp = torch.log_softmax(logits, -1)
    sel = labels != -100
    loss = -logp[sel].gather(-1, labels[sel].unsqueeze(-1)).mean()
    return loss, logits, memory



def transformer_forward(model, ids, labels, kw):
    """A third formulation of a post-LN or pre-LN encdec with layernorm: torch.nn.TransformerEncoderLayer
    and TransformerDecoderLayer (self_attn / multihead_attn / linear1-2 / norm1-3), weights copied in."""
    c, P = model.config, model.params
    C, NH, Fd = c["d_model"], c["n_heads"], c["d_ff"]
    method = c["placement"][0]
    assert set(c["placement"]) == {method} and method in ("post", "pre") and c["norm"] == "layernorm"
    act = {"gelu": lambda u: F.gelu(u, approximate="tanh"), "gelu_exact": F.gelu, "relu": F.relu}[c["activation"]]
    opts = dict(dim_feedforward=Fd, dropout=0.0, activation=act, layer_norm_eps=c["eps"], batch_first=True,
                norm_first=(method == "pre"), dtype=torch.float64)
    norm_in = "ln_in" if method == "pre" else "ln_out"

    def copy(dst, src):
        with torch.no_grad():
            dst.copy_(src)

    def load_common(layer, pre):
        copy(layer.self_attn.in_proj_weight, P[pre + ".attn.qkv.weight"])
        copy(layer.self_attn.in_proj_bias, P[pre + ".attn.qkv.bias"])
        copy(layer.self_attn.out_proj.weight, P[pre + ".attn.proj.weight"])
        copy(layer.self_attn.out_proj.bias, P[pre + ".attn.proj.bias"])
        copy(layer.linear1.weight, P[pre + ".mlp.fc.weight"])
        copy(layer.linear1.bias, P[pre + ".mlp.fc.bias"])
        copy(layer.linear2.weight, P[pre + ".mlp.proj.weight"])
        copy(layer.linear2.bias, P[pre + ".mlp.proj.bias"])
        copy(layer.norm1.weight, P[f"{pre}.attn.{norm_in}.weight"])
        copy(layer.norm1.bias, P[f"{pre}.attn.{norm_in}.bias"])

    with torch.no_grad():
        src, src_mask = ids, kw.get("key_mask")
        kpm = None if src_mask is None else src_mask == 0
        table = P["wte.weight"] if c["shared_embeddings"] else P["enc.wte.weight"]
        x = table[src] + P["enc.wpe.weight"][:src.shape[1]]
        for l in range(c["n_layers"]):
            layer = torch.nn.TransformerEncoderLayer(C, NH, **opts).eval()
            load_common(layer, f"enc.h.{l}")
            copy(layer.norm2.weight, P[f"enc.h.{l}.mlp.{norm_in}.weight"])
            copy(layer.norm2.bias, P[f"enc.h.{l}.mlp.{norm_in}.bias"])
            x = layer(x, src_key_padding_mask=kpm)
        if method == "pre":
            x = F.layer_norm(x, (C,), P["enc.ln_f.weight"], P["enc.ln_f.bias"], c["eps"])
        memory = x
        tgt = kw["decoder_input_ids"]
        T = tgt.shape[1]
        y = P["wte.weight"][tgt] + P["wpe.weight"][:T]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        tmask = kw.get("decoder_mask")
        for l in range(c["dec_layers"]):
            layer = torch.nn.TransformerDecoderLayer(C, NH, **opts).eval()
            load_common(layer, f"h.{l}")
            copy(layer.multihead_attn.in_proj_weight, torch.cat([P[f"h.{l}.cross.q.weight"], P[f"h.{l}.cross.kv.weight"]]))
            copy(layer.multihead_attn.in_proj_bias, torch.cat([P[f"h.{l}.cross.q.bias"], P[f"h.{l}.cross.kv.bias"]]))
            copy(layer.multihead_attn.out_proj.weight, P[f"h.{l}.cross.proj.weight"])
            copy(layer.multihead_attn.out_proj.bias, P[f"h.{l}.cross.proj.bias"])
            copy(layer.norm2.weight, P[f"h.{l}.cross.{norm_in}.weight"])
            copy(layer.norm2.bias, P[f"h.{l}.cross.{norm_in}.bias"])
            copy(layer.norm3.weight, P[f"h.{l}.mlp.{norm_in}.weight"])
            copy(layer.norm3.bias, P[f"h.{l}.mlp.{norm_in}.bias"])
            y = layer(y, memory, tgt_mask=causal, tgt_key_padding_mask=None if tmask is None else tmask == 0,
                      memory_key_padding_mask=kpm)
        if method == "pre":
            y = F.layer_norm(y, (C,), P["ln_f.weight"], P["ln_f.bias"], c["eps"])
        logits = y @ P["wte.weight"].t()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    return loss, logits, memory
