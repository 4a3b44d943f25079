"""The Python module's attention-sink and gradient-sink checks (test_module.py runs them per model
family): `analyze sinks` against a brute-force reading of transformers' hidden states and attention
probabilities, the gradient sinks against torch autograd through transformers' model and its norm
modules, and the module's `sinks` against the command's JSON."""
import json
import os

import numpy as np
import torch

from module_common import check, first_difference, run, same_json


def check_sinks(nl, name, model, m, d, tokens, ids, workdir):
    """`analyze sinks` against a brute-force reading of transformers' own hidden states and attention
    probabilities (an independent path: another implementation of the forward, then numpy), and the
    module's `sinks` against the command's JSON."""
    out = os.path.join(workdir, f"{name}_sinks.json")
    run([nl, "analyze", "sinks", "--checkpoint", d, "--tokens", tokens, "--json", out, "--force"])
    got = json.load(open(out))
    with torch.no_grad():
        extra = {} if name == "bert" else {"use_cache": False}  # (Gemma 2's cache needs a newer torch)
        o = model(torch.from_numpy(ids.astype(np.int64)), output_hidden_states=True, output_attentions=True, **extra)
    L = len(o.attentions)
    B, T = ids.shape
    bad = []
    for l in range(L):  # the stream entering layer l (transformers' last hidden state is after the final norm)
        x = o.hidden_states[l].double().numpy()
        s = got["streams"][l]
        a = np.abs(x)
        w, t, c = np.unravel_index(np.argmax(a), a.shape)
        mean = x.mean()
        norms = np.linalg.norm(x, axis=-1)
        want = {"median_abs": np.median(a), "kurtosis": ((x - mean) ** 4).mean() / ((x - mean) ** 2).mean() ** 2,
                "token_norm_max": norms.max(), "token_norm_median": np.median(norms),
                "largest_norm_share": np.mean(norms.max(-1) ** 2 / (norms ** 2).sum(-1)),
                "first_position_largest": np.mean(norms.argmax(-1) == 0)}
        for k, v in want.items():
            if not np.isclose(s[k], v, rtol=2e-4, atol=1e-6):
                bad.append(f"layer {l} {k}: {s[k]} vs {v}")
        if (s["top"][0]["window"], s["top"][0]["token"], s["top"][0]["dim"]) != (w, t, c) or \
                not np.isclose(s["top"][0]["value"], x[w, t, c], rtol=2e-4):
            bad.append(f"layer {l} largest entry {s['top'][0]} vs {x[w, t, c]} at {(w, t, c)}")
    causal = name != "bert"
    rates = []
    for l in range(L):
        A = o.attentions[l].double().numpy()  # (B, NH, T, T)
        seen = (T - np.arange(T)) if causal else np.full(T, T)
        imp = A.sum(axis=-2) / seen  # (B, NH, T): each key's mean attention from the queries that see it
        first = imp[..., 0]
        for h in range(A.shape[1]):
            g = got["heads"][l * A.shape[1] + h]
            if not np.isclose(g["first_importance"], first[:, h].mean(), rtol=2e-4, atol=1e-7):
                bad.append(f"layer {l} head {h} first importance {g['first_importance']} vs {first[:, h].mean()}")
        near = np.abs(first - 0.3) < 1e-5  # a reading on the threshold may fall either side in float32
        rates.append(None if near.any() else 100 * np.mean(first > 0.3))
    for l, r in enumerate(rates):
        if r is not None and not np.isclose(got["layer_sink_rate"][l], r):
            bad.append(f"layer {l} sink rate {got['layer_sink_rate'][l]} vs {r}")
    check(f"{name}: analyze sinks equals a brute-force reading of transformers' hidden states and attentions",
          not bad, "; ".join(bad[:4]))
    check_gradient_sinks(name, model, ids, o.hidden_states, got, causal)
    mod = m.sinks(ids).data
    check(f"{name}: the module's sinks equal the command's JSON", same_json(mod, got),
          first_difference(mod, {k: v for k, v in got.items() if k not in ("input", "model")}))


def input_norms(model, name):
    """The norm that reads the stream entering each layer, and the final norm (transformers' modules)."""
    if name == "gpt2":
        return [b.ln_1 for b in model.transformer.h] + [model.transformer.ln_f]
    return [b.input_layernorm for b in model.model.layers] + [model.model.norm]


def check_gradient_sinks(name, model, ids, hidden, got, causal):
    """The gradient sinks against torch's autograd through transformers' model: d(next-token loss)/d(each
    hidden state), and the norm's Jacobian (torch.autograd of transformers' norm module, in double) at the
    tokens of the largest and the median norm."""
    if not causal:
        check(f"{name}: an encoder has no gradient-sink readings, and says why",
              got["gradients"] == [] and "encoder" in (got["no_gradients"] or ""), str(got["no_gradients"]))
        return
    import copy
    extra = {"use_cache": False}
    normed = []  # each layer's input norm's output: the attention's normalized input h, read by it alone

    def keep(module, args, out):
        out.retain_grad()
        normed.append(out)
    hooks = [n.register_forward_hook(keep) for n in input_norms(model, name)[:-1]]
    o = model(torch.from_numpy(ids.astype(np.int64)), output_hidden_states=True, **extra)
    for h in hooks:
        h.remove()
    for h in o.hidden_states:
        h.retain_grad()
    labels = np.full(ids.shape, -100, dtype=np.int64)
    labels[:, :-1] = ids[:, 1:]
    logits = o.logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(labels).reshape(-1),
                                             ignore_index=-100)
    model.zero_grad()
    loss.backward()
    L = len(o.hidden_states) - 1
    bad = []
    for l in range(L):  # (transformers' last hidden state is after the final norm: not a stream point)
        g = np.linalg.norm(o.hidden_states[l].grad.double().numpy(), axis=-1)  # (B, T)
        r = got["gradients"][l]
        by_pos = g.mean(0)
        want = {"first": g[:, 0].mean(), "median": np.median(g), "top": by_pos.max()}
        for k, v in want.items():
            if not np.isclose(r[k], v, rtol=1e-3, atol=1e-12):
                bad.append(f"layer {l} gradient {k}: {r[k]} vs {v}")
        if r["top_token"] != int(by_pos.argmax()):
            bad.append(f"layer {l} gradient top position {r['top_token']} vs {by_pos.argmax()}")
    if len(got["attn_input_gradients"]) != L or len(normed) != L:
        bad.append(f"{len(got['attn_input_gradients'])} attention-input gradient rows, {len(normed)} norms hooked, {L} layers")
    for l, (r, h) in enumerate(zip(got["attn_input_gradients"], normed)):  # before the norm's Jacobian
        g = np.linalg.norm(h.grad.double().numpy(), axis=-1)
        want = {"first": g[:, 0].mean(), "median": np.median(g), "top": g.mean(0).max()}
        for k, v in want.items():
            if r["layer"] != l or not np.isclose(r[k], v, rtol=1e-3, atol=1e-12):
                bad.append(f"layer {l} attention-input gradient {k}: {r[k]} vs {v} (row of layer {r['layer']})")
    norms = input_norms(model, name)
    gains = {g["layer"]: g for g in got["norm_gains"]}
    for l in range(L):  # the stream entering layer l, read by that layer's input norm
        x = hidden[l].double().numpy()
        n = np.linalg.norm(x, axis=-1).reshape(-1)
        order = sorted(range(n.size), key=lambda k: (n[k], k))
        top, mid = order[-1], order[(n.size - 1) // 2]
        mod = copy.deepcopy(norms[l]).double()
        T, C = x.shape[1], x.shape[2]

        def gain(k):
            row = torch.from_numpy(x.reshape(-1, C)[k].copy())
            J = torch.autograd.functional.jacobian(lambda v: mod(v.view(1, 1, C)).view(C), row)
            return torch.linalg.svdvals(J).max().item()
        r = gains.get(l)
        if r is None:
            bad.append(f"layer {l}: no norm gain")
            continue
        if (r["max_window"] * T + r["max_token"], r["median_window"] * T + r["median_token"]) != (top, mid):
            bad.append(f"layer {l} tokens {(r['max_window'], r['max_token'], r['median_window'], r['median_token'])}"
                       f" vs {(top // T, top % T, mid // T, mid % T)}")
            continue
        for k, v in {"gain_max": gain(top), "gain_median": gain(mid), "norm_max": n[top], "norm_median": n[mid]}.items():
            if not np.isclose(r[k], v, rtol=2e-4):
                bad.append(f"layer {l} {k}: {r[k]} vs {v}")
    check(f"{name}: gradient sinks equal torch autograd through transformers' model and its norm modules",
          not bad, "; ".join(bad[:4]))
