#!/usr/bin/env python3
"""selftest.py: checks of the PyTorch oracle (normlab_torch.py) on its own, without the C++ engine.

    <build>/pyenv/bin/python tests/torch/selftest.py [--quick]     (or /tmp/nlvenv/bin/python)

1. parameter names / order / presence rules (ln_f rule, rmsnorm has no .bias) vs hand-written lists,
   for every method (omega, gain, rezero) and for encdec (MODEL.md's table, count and order);
   normalize_config's defaults and refusals; checkpoint round trip;
2. the forward vs a second, independent implementation written differently (normlab_alt.py):
   torch.nn built-ins (F.multi_head_attention_forward with key_padding_mask / attn_mask / separate
   q, k, v weights for the cross-attention, F.layer_norm, F.gelu(approximate="tanh"), F.embedding, F.linear) and one
   explicit formula per method (post: N(x+F(x)), pre: x+F(N(x)), admin: N(omega*x+F(x)), ...);
   for encdec also against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (post and pre);
3. deepnorm is N(alpha*x + F(x)) with alpha = (2L)^(1/4), not N(x + alpha*F(x)); the encdec
   constants per stack; residual=false gives alpha = 0; the other methods' identities (ReZero /
   SkipInit at 0 are the identity, admin with omega 1 is post, LayerScale with gain 1 is pre, tfixup
   is none) and closed-form inits (Admin log / sqrt / one, LayerScale by depth);
4. torch.autograd.gradcheck (float64, finite differences) of the loss w.r.t. every parameter, for
   every method, per-layer lists, rmsnorm, relu, eps=0, residual=false, all archs; the cross-attention
   with source padding alone; for an encdec of odd sizes (C=36, NH=3, N=2, M=3, S=5, T=7, B=2,
   source and target padding) a central-difference directional derivative per parameter tensor;
5. masks: gpt and the encdec decoder are causal, encoders are not; padded source / target positions
   change nothing they must not change;
6. init distributions of init_params (every scheme, every arch) pass golden_checks.check_init, which
   in turn notices wrong constants; golden_checks.perturb_tensors moves every parameter to a
   non-trivial value;
   Admin's profile walk against the chain recomputed from the independent forward's streams (both
   readings of a mixed stack: only Admin sub-layers advance the ratio, or every sub-layer);
7. LR schedules (hand-computed values), AdamW param groups, grad clipping and training runs;
8. calibration (informational + headroom check): torch float32 vs float64 errors on golden.py's
   configurations (default and --extra) must stay golden_checks.HEADROOM (5x) below golden_checks.py's
   tolerances (4x for the forward values, HEADROOM_VALUE: torch's float32 differs by CPU kernels).

--quick skips the float32 calibration (8). Prints one line per check and "N passed, M failed";
exit status 1 on any failure.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selftest_common import *  # noqa: E402,F401,F403
from selftest_gradcheck import gradcheck_loss  # noqa: E402
from selftest_methods import (test_admin_profile, test_closed_form_inits, test_deepnorm,  # noqa: E402
                              test_deepnorm_encdec, test_init, test_init_methods, test_method_identities,
                              test_perturb, test_residual)

# --------------------------------------------------------------------------------------------------
# 1. parameter names, config, checkpoint
# --------------------------------------------------------------------------------------------------

def test_param_names():
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="pre"))
    want = ["wte.weight", "wpe.weight",
            "h.0.attn.ln_in.weight", "h.0.attn.ln_in.bias", "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
            "h.0.attn.proj.weight", "h.0.attn.proj.bias",
            "h.0.mlp.ln_in.weight", "h.0.mlp.ln_in.bias", "h.0.mlp.fc.weight", "h.0.mlp.fc.bias",
            "h.0.mlp.proj.weight", "h.0.mlp.proj.bias", "ln_f.weight", "ln_f.bias"]
    got = [n for n, _ in nt.param_specs(c)]
    check("param names: pre layernorm, canonical order", got == want, f"{got}")
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="sandwich", norm="rmsnorm"))
    got = [n for n, _ in nt.param_specs(c)]
    want = ["wte.weight", "wpe.weight", "h.0.attn.ln_in.weight", "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
            "h.0.attn.proj.weight", "h.0.attn.proj.bias", "h.0.attn.ln_branch.weight",
            "h.0.mlp.ln_in.weight", "h.0.mlp.fc.weight", "h.0.mlp.fc.bias", "h.0.mlp.proj.weight",
            "h.0.mlp.proj.bias", "h.0.mlp.ln_branch.weight", "ln_f.weight"]
    check("param names: sandwich rmsnorm, canonical order", got == want, f"{got}")
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="prepost"))
    got = [n for n, _ in nt.param_specs(c) if "ln" in n]
    want = ["h.0.attn.ln_in.weight", "h.0.attn.ln_in.bias", "h.0.attn.ln_out.weight", "h.0.attn.ln_out.bias",
            "h.0.mlp.ln_in.weight", "h.0.mlp.ln_in.bias", "h.0.mlp.ln_out.weight", "h.0.mlp.ln_out.bias"]
    check("param names: prepost norms", got == want, f"{got}")
    shapes = dict(nt.param_specs(nt.normalize_config(dict(d_model=32, n_heads=4, n_layers=2, d_ff=48,
                                                          seq_len=8, arch="encoder"))))
    check("param shapes", shapes["wte.weight"] == (257, 32) and shapes["wpe.weight"] == (8, 32)
          and shapes["h.1.attn.qkv.weight"] == (96, 32) and shapes["h.1.mlp.fc.weight"] == (48, 32)
          and shapes["h.1.mlp.proj.weight"] == (32, 48) and shapes["h.1.attn.proj.bias"] == (32,))
    final = {}
    for pl in (["pre", "pre"], ["post", "pre"], ["pre", "post"], ["x", "sandwich"], ["pre", "prepost"],
               ["pre", "deepnorm"], ["pre", "none"]):
        pl = [p if p != "x" else "none" for p in pl]
        final[tuple(pl)] = nt.has_final_norm(nt.normalize_config(dict(TINY, placement=pl)))
    want = {("pre", "pre"): True, ("post", "pre"): True, ("pre", "post"): False, ("none", "sandwich"): True,
            ("pre", "prepost"): False, ("pre", "deepnorm"): False, ("pre", "none"): False}
    check("ln_f exists iff the last layer is pre or sandwich", final == want, f"{final}")
    c = nt.normalize_config(dict(placement="deepnorm"))
    check("config defaults resolved", c["d_ff"] == 512 and c["vocab"] == 256 and c["init"] == "deepnet"
          and c["placement"] == ["deepnorm"] * 4
          and nt.normalize_config({"arch": "encoder"})["vocab"] == 257
          and nt.normalize_config({})["init"] == "gpt2")
    ok = all(p.grad is None for p in nt.Model(TINY).parameters())
    m = nt.Model(dict(TINY, placement="sandwich"))
    check("Model params == param_specs", list(m.params) == [n for n, _ in nt.param_specs(m.config)]
          and all(tuple(p.shape) == s for (n, s), p in zip(nt.param_specs(m.config), m.parameters())) and ok)


def test_param_names_methods():
    """Every new method's parameters, names and order (MODEL.md: per sub-layer ln_in, linear maps, proj,
    ln_branch, ln_out, then omega / gain; per layer the rezero scalar after its sub-layers)."""
    C = TINY["d_model"]

    def lin(pre, a, b):
        return [f"{pre}.{a}.weight", f"{pre}.{a}.bias", f"{pre}.{b}.weight", f"{pre}.{b}.bias"]

    want = {
        "admin": ["wte.weight", "wpe.weight",
                  *lin("h.0.attn", "qkv", "proj"), "h.0.attn.ln_out.weight", "h.0.attn.ln_out.bias", "h.0.attn.omega",
                  *lin("h.0.mlp", "fc", "proj"), "h.0.mlp.ln_out.weight", "h.0.mlp.ln_out.bias", "h.0.mlp.omega"],
        "rezero": ["wte.weight", "wpe.weight", *lin("h.0.attn", "qkv", "proj"), *lin("h.0.mlp", "fc", "proj"),
                   "h.0.rezero"],
        "skipinit": ["wte.weight", "wpe.weight", *lin("h.0.attn", "qkv", "proj"), "h.0.attn.gain",
                     *lin("h.0.mlp", "fc", "proj"), "h.0.mlp.gain"],
        "layerscale": ["wte.weight", "wpe.weight", "h.0.attn.ln_in.weight", "h.0.attn.ln_in.bias",
                       *lin("h.0.attn", "qkv", "proj"), "h.0.attn.gain", "h.0.mlp.ln_in.weight", "h.0.mlp.ln_in.bias",
                       *lin("h.0.mlp", "fc", "proj"), "h.0.mlp.gain", "ln_f.weight", "ln_f.bias"],
        "tfixup": ["wte.weight", "wpe.weight", *lin("h.0.attn", "qkv", "proj"), *lin("h.0.mlp", "fc", "proj")],
        # ResiDual: ln_out per sub-layer (the x stream) and one ln_f (the x_d stream, at the end only)
        "residual": ["wte.weight", "wpe.weight",
                     *lin("h.0.attn", "qkv", "proj"), "h.0.attn.ln_out.weight", "h.0.attn.ln_out.bias",
                     *lin("h.0.mlp", "fc", "proj"), "h.0.mlp.ln_out.weight", "h.0.mlp.ln_out.bias",
                     "ln_f.weight", "ln_f.bias"],
    }
    for method, names in want.items():
        c = nt.normalize_config(dict(TINY, n_layers=1, placement=method))
        specs = nt.param_specs(c)
        got = [n for n, _ in specs]
        d = dict(specs)
        ok = got == names
        if method == "admin":
            ok = ok and d["h.0.attn.omega"] == (C,) and d["h.0.mlp.omega"] == (C,)
        if method == "rezero":
            ok = ok and d["h.0.rezero"] == (1,)
        if method == "skipinit":
            ok = ok and d["h.0.attn.gain"] == (1,) and d["h.0.mlp.gain"] == (1,)
        if method == "layerscale":
            ok = ok and d["h.0.attn.gain"] == (C,) and d["h.0.mlp.gain"] == (C,)
        check(f"param names: {method}, canonical order and shapes", ok, f"{got}")
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="rezero", mlp=False))
    check("param names: rezero without MLP keeps the layer scalar",
          [n for n, _ in nt.param_specs(c)][-3:] == ["h.0.attn.proj.weight", "h.0.attn.proj.bias", "h.0.rezero"])
    c = nt.normalize_config(dict(TINY, n_layers=1, placement="admin", norm="rmsnorm"))
    check("param names: admin rmsnorm has ln_out.weight and omega only",
          [n for n, _ in nt.param_specs(c)][6:8] == ["h.0.attn.ln_out.weight", "h.0.attn.omega"])
    one_stream = [m for m in nt.PLACEMENTS if m != "residual"]   # residual does not mix (test_residual)
    final = {m: nt.has_final_norm(nt.normalize_config(dict(TINY, placement=["pre", m]))) for m in one_stream}
    want_final = {m: m in ("pre", "sandwich", "layerscale", "peri", "reordered", "lns", "hybridnorm", "hybridnorm_pre")
                  for m in one_stream}
    check("final norm iff the last method is pre, sandwich, layerscale, peri, reordered, lns or hybridnorm(_pre)",
          final == want_final,
          f"{final}")


def test_param_names_encdec():
    """MODEL.md's encdec table: names, shapes, presence and canonical order, written out by hand."""
    C, Fd, V, P = 4, 5, 11, 6
    base = dict(arch="encdec", d_model=C, n_heads=2, d_ff=Fd, vocab=V, seq_len=P)

    def ln(p, bias=True):
        return [(p + ".weight", (C,))] + ([(p + ".bias", (C,))] if bias else [])

    def lin(p, rows, cols):
        return [(p + ".weight", (rows, cols)), (p + ".bias", (rows,))]

    # (a) N = M = 1, pre encoder, post decoder, shared embeddings, layernorm
    want = ([("wte.weight", (V, C)), ("wpe.weight", (P, C)), ("enc.wpe.weight", (P, C))]
            + ln("enc.h.0.attn.ln_in") + lin("enc.h.0.attn.qkv", 3 * C, C) + lin("enc.h.0.attn.proj", C, C)
            + ln("enc.h.0.mlp.ln_in") + lin("enc.h.0.mlp.fc", Fd, C) + lin("enc.h.0.mlp.proj", C, Fd)
            + ln("enc.ln_f")
            + lin("h.0.attn.qkv", 3 * C, C) + lin("h.0.attn.proj", C, C) + ln("h.0.attn.ln_out")
            + lin("h.0.cross.q", C, C) + lin("h.0.cross.kv", 2 * C, C) + lin("h.0.cross.proj", C, C)
            + ln("h.0.cross.ln_out")
            + lin("h.0.mlp.fc", Fd, C) + lin("h.0.mlp.proj", C, Fd) + ln("h.0.mlp.ln_out"))
    got = nt.param_specs(nt.normalize_config(dict(base, n_layers=1, dec_layers=1, placement=["pre", "post"])))
    check("encdec param table: pre encoder + post decoder, shared", got == want,
          f"first difference at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
    # (b) unshared (src_vocab 13), rmsnorm, N = 1, M = 2: rezero | admin, layerscale
    want = ([("wte.weight", (V, C)), ("wpe.weight", (P, C)), ("enc.wte.weight", (13, C)), ("enc.wpe.weight", (P, C))]
            + lin("enc.h.0.attn.qkv", 3 * C, C) + lin("enc.h.0.attn.proj", C, C)
            + lin("enc.h.0.mlp.fc", Fd, C) + lin("enc.h.0.mlp.proj", C, Fd) + [("enc.h.0.rezero", (1,))]
            + lin("h.0.attn.qkv", 3 * C, C) + lin("h.0.attn.proj", C, C) + ln("h.0.attn.ln_out", False)
            + [("h.0.attn.omega", (C,))]
            + lin("h.0.cross.q", C, C) + lin("h.0.cross.kv", 2 * C, C) + lin("h.0.cross.proj", C, C)
            + ln("h.0.cross.ln_out", False) + [("h.0.cross.omega", (C,))]
            + lin("h.0.mlp.fc", Fd, C) + lin("h.0.mlp.proj", C, Fd) + ln("h.0.mlp.ln_out", False)
            + [("h.0.mlp.omega", (C,))]
            + ln("h.1.attn.ln_in", False) + lin("h.1.attn.qkv", 3 * C, C) + lin("h.1.attn.proj", C, C)
            + [("h.1.attn.gain", (C,))]
            + ln("h.1.cross.ln_in", False) + lin("h.1.cross.q", C, C) + lin("h.1.cross.kv", 2 * C, C)
            + lin("h.1.cross.proj", C, C) + [("h.1.cross.gain", (C,))]
            + ln("h.1.mlp.ln_in", False) + lin("h.1.mlp.fc", Fd, C) + lin("h.1.mlp.proj", C, Fd)
            + [("h.1.mlp.gain", (C,))]
            + ln("ln_f", False))
    got = nt.param_specs(nt.normalize_config(dict(base, n_layers=1, dec_layers=2, norm="rmsnorm",
                                                  shared_embeddings=False, src_vocab=13,
                                                  placement=["rezero", "admin", "layerscale"])))
    check("encdec param table: rezero | admin, layerscale, unshared, rmsnorm", got == want,
          f"first difference at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
    # (c) sandwich + skipinit: ln_branch before gain, the decoder's rezero after cross and mlp
    got = [n for n, _ in nt.param_specs(nt.normalize_config(dict(base, n_layers=1, dec_layers=1,
                                                                  placement=["sandwich", "rezero"])))]
    check("encdec param table: enc.ln_f after sandwich; decoder rezero after its mlp",
          got[got.index("enc.h.0.attn.proj.bias") + 1] == "enc.h.0.attn.ln_branch.weight"
          and got[-1] == "h.0.rezero" and got[-2] == "h.0.mlp.proj.bias" and "enc.ln_f.weight" in got
          and "ln_f.weight" not in got, f"{got}")
    # the count for the directional-derivative size (C 36, F 44, V 258, seq 8, N 2, M 3, pre, shared)
    cfg = nt.normalize_config(dict(MID_ED, placement="pre"))
    C, Fd, V, P, N, M = 36, 44, 258, 8, 2, 3
    attn = 2 * C + 3 * C * C + 3 * C + C * C + C
    mlp = 2 * C + Fd * C + Fd + C * Fd + C
    cross = 2 * C + C * C + C + 2 * C * C + 2 * C + C * C + C
    n_elems = V * C + 2 * P * C + N * (attn + mlp) + 2 * C + M * (attn + cross + mlp) + 2 * C
    n_tensors = 3 + N * 12 + 2 + M * (6 + 8 + 6) + 2
    specs = nt.param_specs(cfg)
    got_elems = sum(math.prod(s) for _, s in specs)
    check("encdec parameter count (C 36, N 2, M 3, pre) = hand formula", len(specs) == n_tensors
          and got_elems == n_elems, f"{len(specs)} tensors / {got_elems} values, formula {n_tensors} / {n_elems}")
    m = nt.Model(dict(MID_ED, placement="pre"))
    check("Model params == param_specs (encdec)", list(m.params) == [n for n, _ in specs]
          and all(tuple(p.shape) == s for (n, s), p in zip(specs, m.parameters())))


def test_config():
    c = nt.normalize_config(dict(arch="encdec", n_layers=3))
    check("encdec defaults: vocab 258, M = N, shared, src_vocab = vocab, placement N + M, admin_init log",
          c["vocab"] == 258 and c["dec_layers"] == 3 and c["shared_embeddings"] is True and c["src_vocab"] == 258
          and c["placement"] == ["pre"] * 6 and c["admin_init"] == "log" and c["init"] == "gpt2", f"{c}")
    g = nt.normalize_config({})
    check("gpt config: admin_init explicit, no encdec-only keys",
          g["admin_init"] == "log" and not any(k in g for k in nt.ENCDEC_ONLY))
    check("init auto: deepnet with any deepnorm, tfixup with any tfixup layer (deepnorm first)",
          nt.normalize_config(dict(placement="tfixup"))["init"] == "tfixup"
          and nt.normalize_config(dict(n_layers=2, placement=["tfixup", "deepnorm"]))["init"] == "deepnet"
          and nt.normalize_config(dict(arch="encdec", n_layers=1, placement=["admin", "tfixup"]))["init"] == "tfixup"
          and nt.normalize_config(dict(placement="admin"))["init"] == "gpt2")

    def refused(cfg, strict=True):
        try:
            nt.normalize_config(cfg, strict)
            return False
        except ValueError:
            return True
    bad = {
        "encdec type_vocab": dict(arch="encdec", type_vocab=2),
        "encdec embed_norm": dict(arch="encdec", embed_norm=True),
        "encdec head mlm": dict(arch="encdec", head="mlm"),
        "encdec head none": dict(arch="encdec", head="none"),
        "encdec placement list of N": dict(arch="encdec", n_layers=2, dec_layers=3, placement=["pre"] * 2),
        "gpt with dec_layers": dict(dec_layers=2),
        "gpt with shared_embeddings": dict(shared_embeddings=False),
        "src_vocab with shared embeddings": dict(arch="encdec", src_vocab=300),
        "admin_init unknown": dict(admin_init="xavier"),
        "init unknown": dict(init="fixup"),
        "placement unknown": dict(placement="rezero2"),
        "residual mixed in a gpt stack": dict(n_layers=2, placement=["residual", "pre"]),
        "residual mixed in a decoder stack": dict(arch="encdec", n_layers=1, dec_layers=2,
                                                  placement=["pre", "residual", "post"]),
        "residual without residual paths": dict(placement="residual", residual=False),
    }
    wrong = [k for k, v in bad.items() if not refused(v)]
    check("normalize_config refuses bad encdec / method configs", not wrong, f"accepted: {wrong}")
    check("checkpoint metadata of a gpt may carry encdec keys (strict=False drops them)",
          not refused(dict(dec_layers=4, shared_embeddings=True, src_vocab=256), strict=False)
          and "dec_layers" not in nt.normalize_config(dict(dec_layers=4), strict=False))
    # a normalized config is a fixed point
    for cfg in (dict(TINY_ED, placement=["admin", "rezero", "pre", "skipinit", "layerscale"]),
                dict(TINY, placement="tfixup", admin_init="sqrt")):
        c = nt.normalize_config(cfg)
        check(f"normalize_config idempotent ({c['arch']})", nt.normalize_config(c) == c)


def test_checkpoint_roundtrip():
    import tempfile
    cfg = dict(TINY_ED, placement=["admin", "rezero", "layerscale", "skipinit", "post"], shared_embeddings=False,
               src_vocab=13)
    m = perturbed_model(cfg, seed=21)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "M.safetensors"
        nt.save_checkpoint(m, path)
        m2, meta = nt.load_checkpoint(path)
    same = all(torch.equal(p.detach().float().double(), m2.params[n].detach()) for n, p in m.params.items())
    check("encdec checkpoint round trip (names, float32 values, config)", same and list(m2.params) == list(m.params)
          and nt.normalize_config(meta) == m.config)


# --------------------------------------------------------------------------------------------------
# 2. second implementation from torch.nn built-ins
# --------------------------------------------------------------------------------------------------

VARIANTS = []
for _arch in ("gpt", "encoder"):
    for _p in nt.PLACEMENTS:   # (nGPT on its sphere: norm l2 at eps = 0, its reference's justnorm)
        _need = dict(norm="l2", eps=0.0) if nt.METHODS[_p].sphere else {}
        VARIANTS.append((f"{_arch}_{_p}", dict(TINY, arch=_arch, placement=_p, **_need)))
VARIANTS += [
    ("gpt_pre_rmsnorm", dict(TINY, placement="pre", norm="rmsnorm")),
    ("gpt_pre_dyt", dict(TINY, placement="pre", norm="dyt", norm_alpha=0.7)),
    ("encoder_post_derf", dict(TINY, arch="encoder", placement="post", norm="derf")),
    ("gpt_lns3", dict(TINY, n_layers=3, placement="lns")),
    ("gpt_hybridnorm*3", dict(TINY, n_layers=3, placement="hybridnorm*", norm="rmsnorm")),   # the authors' flags per layer
    ("gpt_pre_swiglu", dict(TINY, placement="pre", norm="rmsnorm", activation="swiglu")),
    ("encoder_reordered_geglu", dict(TINY, arch="encoder", placement="reordered", activation="geglu")),
    ("gpt_post_rmsnorm", dict(TINY, placement="post", norm="rmsnorm")),
    ("encoder_sandwich_rmsnorm", dict(TINY, arch="encoder", placement="sandwich", norm="rmsnorm")),
    ("gpt_pre_relu", dict(TINY, placement="pre", activation="relu")),
    ("encoder_pre_qkvnorm_whole", dict(TINY, arch="encoder", placement="pre", qk_norm="whole", v_norm=True)),
    ("gpt_reordered_qknorm_heads_rmsnorm", dict(TINY, placement="reordered", qk_norm="heads", norm="rmsnorm")),
    ("gpt_pre_noresidual", dict(TINY, placement="pre", residual=False)),
    ("gpt_deepnorm_noresidual", dict(TINY, placement="deepnorm", residual=False)),
    ("gpt_mix3", dict(TINY, n_layers=3, placement=["pre", "post", "sandwich"])),
    ("encoder_mix3", dict(TINY, arch="encoder", n_layers=3, placement=["deepnorm", "prepost", "pre"])),
    ("gpt_mix_none_deepnorm", dict(TINY, placement=["none", "deepnorm"])),
    ("gpt_post_eps0", dict(TINY, placement="post", eps=0.0)),
    ("encoder_pre_rmsnorm_eps0", dict(TINY, arch="encoder", placement="pre", norm="rmsnorm", eps=0.0)),
    # the methods of MODEL.md "Methods"
    ("gpt_mix_admin_rezero_layerscale", dict(TINY, n_layers=3, placement=["admin", "rezero", "layerscale"])),
    ("encoder_mix_skipinit_tfixup_admin", dict(TINY, arch="encoder", n_layers=3,
                                               placement=["skipinit", "tfixup", "admin"])),
    ("gpt_admin_rmsnorm", dict(TINY, placement="admin", norm="rmsnorm")),
    ("gpt_rezero_nomlp", dict(TINY, placement="rezero", mlp=False)),
    ("gpt_layerscale_noresidual", dict(TINY, placement="layerscale", residual=False)),
    ("gpt_skipinit_gelu_exact", dict(TINY, placement="skipinit", activation="gelu_exact")),
    ("gpt_residual_rmsnorm", dict(TINY, placement="residual", norm="rmsnorm")),
    ("encoder_residual_nomlp", dict(TINY, arch="encoder", n_layers=3, placement="residual", mlp=False)),
]
# encoder-decoders: every method at least once in each stack (global layer lists of N + M = 5)
ED_VARIANTS = [
    ("encdec_pre", dict(TINY_ED, placement="pre"), ("src", "tgt")),
    ("encdec_post_unshared", dict(TINY_ED, placement="post", shared_embeddings=False, src_vocab=13), ("src", "tgt")),
    ("encdec_mix_deepnorm_sandwich|prepost_none_deepnorm",
     dict(TINY_ED, placement=["deepnorm", "sandwich", "prepost", "none", "deepnorm"]), ("src", "tgt")),
    ("encdec_mix_admin_rezero|skipinit_layerscale_tfixup",
     dict(TINY_ED, placement=["admin", "rezero", "skipinit", "layerscale", "tfixup"], norm="rmsnorm"), ("src",)),
    ("encdec_mix_layerscale_skipinit|rezero_admin_post",
     dict(TINY_ED, placement=["layerscale", "skipinit", "rezero", "admin", "post"], shared_embeddings=False,
          src_vocab=12), ("src", "tgt")),
    ("encdec_mix_tfixup_none|pre_sandwich_prepost_relu",
     dict(TINY_ED, placement=["tfixup", "none", "pre", "sandwich", "prepost"], activation="relu"), ()),
    ("encdec_pre_nomlp", dict(TINY_ED, placement="pre", mlp=False), ("src", "tgt")),
    ("encdec_post_noresidual", dict(TINY_ED, placement="post", residual=False), ("src", "tgt")),
    ("encdec_residual", dict(TINY_ED, placement="residual"), ("src", "tgt")),
    ("encdec_residual|pre_rmsnorm", dict(TINY_ED, placement=["residual"] * 2 + ["pre"] * 3, norm="rmsnorm"), ("src",)),
    ("encdec_post|residual_unshared", dict(TINY_ED, placement=["post"] * 2 + ["residual"] * 3, shared_embeddings=False,
                                           src_vocab=12), ("tgt",)),
]


def test_alt_forward():
    for name, cfg in VARIANTS:
        m = perturbed_model(cfg, seed=1)
        ids, labels = batch(cfg, seed=2)
        with torch.no_grad():
            l1, z1 = nt.forward(m, ids, labels)
            l2, z2, _ = alt_forward(m, ids, labels)
        err = max(abs(float(l1 - l2)), float((z1 - z2).abs().max()))
        check(f"forward == torch.nn built-ins: {name}", err < 1e-12, f"max err {err:.2e}")
    for name in ("gpt_pre", "encoder_post", "gpt_admin", "encoder_layerscale", "gpt_residual"):
        cfg = dict(VARIANTS)[name]
        m = perturbed_model(cfg, seed=1)
        ids, labels, kw = inputs(cfg, (3, 6), seed=3, pad=True)
        with torch.no_grad():
            l1, z1 = nt.forward(m, ids, labels, **kw)
            l2, z2, _ = alt_forward(m, ids, labels, kw)
        err = max(abs(float(l1 - l2)), float((z1 - z2).abs().max()))
        check(f"forward == torch.nn built-ins, padded: {name}", err < 1e-12, f"max err {err:.2e}")
    for name, cfg, masks in ED_VARIANTS:
        m = perturbed_model(cfg, seed=1)
        ids, labels, kw = inputs(cfg, TINY_ED_BST, seed=2, masks=masks)
        with torch.no_grad():
            o = nt.forward_outputs(m.config, m.params, ids, labels, **kw)
            l2, z2, mem2 = alt_forward(m, ids, labels, kw)
        err = max(abs(float(o["loss"] - l2)), float((o["logits"] - z2).abs().max()),
                  float((o["memory"] - mem2).abs().max()))
        check(f"forward == torch.nn built-ins: {name}", err < 1e-12, f"max err {err:.2e}")


def test_torch_transformer():
    for method in ("post", "pre"):
        for act in ("gelu", "relu"):
            cfg = dict(MID_ED, placement=method, activation=act, shared_embeddings=(act == "gelu"), src_vocab=259)
            if act == "gelu":
                cfg.pop("src_vocab")
            m = nt.Model(cfg)
            t = golden_checks.perturb_tensors({n: p.detach().numpy() for n, p in m.params.items()}, 5, m.config)
            m.load_tensors({n: torch.from_numpy(v) for n, v in t.items()})
            ids, labels, kw = inputs(cfg, MID_ED_BST, seed=6)
            with torch.no_grad():
                o = nt.forward_outputs(m.config, m.params, ids, labels, **kw)
            l2, z2, mem2 = transformer_forward(m, ids, labels, kw)
            err = max(abs(float(o["loss"] - l2)), float((o["logits"] - z2).abs().max()),
                      float((o["memory"] - mem2).abs().max()))
            check(f"encdec {method} ({act}) == torch.nn.TransformerEncoderLayer/DecoderLayer", err < 1e-11,
                  f"max err {err:.2e} (loss {float(l2):.3f})")


# --------------------------------------------------------------------------------------------------
# 4. gradcheck
# --------------------------------------------------------------------------------------------------

def test_gradcheck():
    # every variant, every parameter column by column (batched), and torch's fast mode on each
    for name, cfg in VARIANTS:
        ids, labels = batch(cfg, B=2, T=4, seed=7)
        gradcheck_loss(name, cfg, ids, labels, {}, 6)
    for name in ("gpt_admin", "encoder_rezero", "gpt_layerscale", "encoder_residual"):
        cfg = dict(VARIANTS)[name]
        ids, labels, kw = inputs(cfg, (3, 4), seed=8, pad=True)
        gradcheck_loss(name + " (padded)", cfg, ids, labels, kw, 6)
    for name, cfg, masks in ED_VARIANTS:
        ids, labels, kw = inputs(cfg, TINY_ED_BST, seed=7, masks=masks)
        gradcheck_loss(name, cfg, ids, labels, kw, 6)


def test_gradcheck_cross_attention():
    """The cross-attention op alone (queries T = 3, keys S = 4, C = 6 in 3 heads), every input, with a
    source padding mask that hides a different number of keys per row."""
    g = torch.Generator().manual_seed(30)
    B, T, S, C = 2, 3, 4, 6
    cfg = nt.normalize_config(dict(arch="encdec", d_model=C, n_heads=3, n_layers=1, vocab=11, seq_len=4))

    def r(*shape, s=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * s).requires_grad_(True)
    args = (r(B, T, C), r(B, S, C), r(C, C, s=0.6), r(C, s=0.2), r(2 * C, C, s=0.6), r(2 * C, s=0.2),
            r(C, C, s=0.6), r(C, s=0.2))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])

    def f(h, mem, wq, bq, wkv, bkv, wo, bo):
        P = {"x.q.weight": wq, "x.q.bias": bq, "x.kv.weight": wkv, "x.kv.bias": bkv, "x.proj.weight": wo,
             "x.proj.bias": bo}
        return nt.cross_attention(cfg, P, "x", h, mask, mem)
    try:
        ok = torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6, raise_exception=True)
        detail = ""
    except Exception as e:
        ok, detail = False, str(e).splitlines()[0][:300]
    check("gradcheck float64: cross-attention with source padding (every input)", ok, detail)
    with torch.no_grad():
        y = f(*args)
        mem2 = args[1].clone()
        mem2[1, 2:] += 10.0                       # padded keys / values of row 1
        y2 = f(args[0], mem2, *args[2:])
    check("cross-attention ignores padded memory positions", float((y - y2)[1].abs().max()) == 0.0
          and float((y - y2)[0].abs().max()) == 0.0)


def test_directional_encdec():
    """Central differences of the loss along a random direction in each parameter tensor vs the
    autograd gradient, for encdec models of the brief's odd size (C 36, NH 3, N 2, M 3, S 5, T 7, B 2,
    source and target padding). O(eps^2) truncation + O(1e-16 / eps) rounding: ~1e-10 relative."""
    eps = 1e-5
    for placement, extra in ((["pre", "post", "admin", "rezero", "layerscale"], {}),
                             (["deepnorm", "sandwich", "skipinit", "tfixup", "prepost"], {"shared_embeddings": False}),
                             (["layerscale", "none", "deepnorm", "admin", "sandwich"], {"norm": "rmsnorm"})):
        cfg = dict(MID_ED, placement=placement, **extra)
        m = nt.Model(cfg)
        t = golden_checks.perturb_tensors({n: p.detach().numpy() for n, p in m.params.items()}, 17, m.config)
        m.load_tensors({n: torch.from_numpy(v) for n, v in t.items()})
        ids, labels, kw = inputs(cfg, MID_ED_BST, seed=18)
        m.zero_grad()
        loss, _ = nt.forward(m, ids, labels, **kw)
        loss.backward()
        g = torch.Generator().manual_seed(19)
        worst, worst_name, n_zero = 0.0, "", 0
        P = {n: p.detach().clone() for n, p in m.params.items()}
        for name, p in m.params.items():
            v = torch.randn(p.shape, generator=g, dtype=torch.float64)
            v /= v.norm()
            an = float((p.grad * v).sum()) if p.grad is not None else 0.0
            Q = dict(P)
            Q[name] = P[name] + eps * v
            lp = float(nt.forward_params(m.config, Q, ids, labels, **kw)[0])
            Q[name] = P[name] - eps * v
            lm = float(nt.forward_params(m.config, Q, ids, labels, **kw)[0])
            fd = (lp - lm) / (2 * eps)
            err = abs(fd - an) / max(abs(an), 1e-3 * float(p.grad.norm()) if p.grad is not None else 0, 1e-8)
            n_zero += an == 0.0
            if err > worst:
                worst, worst_name = err, name
        check(f"encdec directional derivatives, every tensor ({'/'.join(placement)})", worst < 1e-6 and n_zero == 0,
              f"{len(P)} tensors, worst rel err {worst:.1e} ({worst_name}), {n_zero} zero directional grads; "
              f"loss {float(loss):.3f}")


# --------------------------------------------------------------------------------------------------
# 5. masks
# --------------------------------------------------------------------------------------------------

def test_causality():
    for arch in ("gpt", "encoder"):
        cfg = dict(TINY, arch=arch, placement="pre")
        m = perturbed_model(cfg, seed=8)
        ids, _ = batch(cfg, B=1, T=6, seed=9)
        ids2 = ids.clone()
        ids2[0, 4] = (ids[0, 4] + 1) % 10
        with torch.no_grad():
            z1 = nt.forward(m, ids)[1]
            z2 = nt.forward(m, ids2)[1]
        before = float((z1[0, :4] - z2[0, :4]).abs().max())
        after = float((z1[0, 4:] - z2[0, 4:]).abs().max())
        if arch == "gpt":
            check("gpt: logits before t do not see token t", before == 0.0 and after > 1e-6,
                  f"before {before:.1e} after {after:.1e}")
        else:
            check("encoder: every position sees token t", before > 1e-6, f"{before:.1e}")


def test_encdec_masks():
    cfg = dict(TINY_ED, placement=["pre", "admin", "post", "rezero", "layerscale"])
    m = perturbed_model(cfg, seed=40)
    ids, labels, kw = inputs(cfg, TINY_ED_BST, seed=41)           # row 1: source 3 of 5, target 4 of 7

    def run(src, dec_in, **over):
        k = dict(kw, decoder_input_ids=dec_in, **over)
        with torch.no_grad():
            return nt.forward_outputs(m.config, m.params, src, labels, **k)
    base = run(ids, kw["decoder_input_ids"])
    dec2 = kw["decoder_input_ids"].clone()
    dec2[0, 4] = (dec2[0, 4] + 1) % 9
    o = run(ids, dec2)
    before = float((o["logits"][0, :4] - base["logits"][0, :4]).abs().max())
    after = float((o["logits"][0, 4:] - base["logits"][0, 4:]).abs().max())
    check("encdec decoder is causal (logits before t do not see target token t)", before == 0.0 and after > 1e-6,
          f"before {before:.1e} after {after:.1e}")
    check("encdec memory does not depend on the target", float((o["memory"] - base["memory"]).abs().max()) == 0.0)
    src2 = ids.clone()
    src2[0, 4] = (src2[0, 4] + 1) % 9
    o = run(src2, kw["decoder_input_ids"])
    check("encdec: every target position sees every real source token",
          float((o["logits"][0] - base["logits"][0]).abs().max(-1).values.min()) > 1e-9
          and float((o["memory"][0, 0] - base["memory"][0, 0]).abs().max()) > 1e-6)
    src3 = ids.clone()
    src3[1, 3:] = (src3[1, 3:] + 5) % 9                            # padded source positions of row 1
    o = run(src3, kw["decoder_input_ids"])
    check("encdec: padded source tokens change no logit and no real memory row",
          float((o["logits"] - base["logits"]).abs().max()) == 0.0
          and float((o["memory"][1, :3] - base["memory"][1, :3]).abs().max()) == 0.0)
    dec3 = kw["decoder_input_ids"].clone()
    dec3[1, 4:] = (dec3[1, 4:] + 3) % 9                            # padded target positions of row 1
    o = run(ids, dec3)
    check("encdec: padded target tokens change no real position's logits, nor the loss",
          float((o["logits"][1, :4] - base["logits"][1, :4]).abs().max()) == 0.0
          and float(o["loss"]) == float(base["loss"]))
    o = run(ids, kw["decoder_input_ids"], decoder_mask=None)
    check("encdec: with right padding, decoder_attention_mask changes only padded positions (causal)",
          float((o["logits"][1, :4] - base["logits"][1, :4]).abs().max()) < 1e-14
          and float((o["logits"][1, 4:] - base["logits"][1, 4:]).abs().max()) > 1e-6)
    o = run(ids, kw["decoder_input_ids"], key_mask=None)
    check("encdec: the source mask matters (without it padded keys are attended)",
          float((o["logits"][1] - base["logits"][1]).abs().max()) > 1e-6
          and float((o["logits"][0] - base["logits"][0]).abs().max()) == 0.0)


# --------------------------------------------------------------------------------------------------
# 7. training pieces
# --------------------------------------------------------------------------------------------------

def test_training():
    tc = dict(steps=100, lr=1e-3, min_lr=1e-4, warmup_steps=10)
    f = lambda s, t: nt.lr_factor(dict(tc, lr_schedule=s), t)   # noqa: E731
    exp = [
        ("constant", 1, 1.0), ("constant", 50, 1.0),
        ("warmup", 1, 0.1), ("warmup", 10, 1.0), ("warmup", 11, 1.0), ("warmup", 5, 0.5),
        ("invsqrt", 1, 0.1), ("invsqrt", 10, 1.0), ("invsqrt", 40, 0.5), ("invsqrt", 90, 1 / 3),
        ("cosine", 5, 0.5), ("cosine", 10, 1.0), ("cosine", 100, 0.1), ("cosine", 55, 0.1 + 0.45),
    ]
    bad = [(s, t, f(s, t), v) for s, t, v in exp if abs(f(s, t) - v) > 1e-12]
    check("lr schedule values", not bad, f"{bad}")
    check("cosine with warmup 0 starts at 1", abs(nt.lr_factor(dict(tc, warmup_steps=0, lr_schedule="cosine"), 0)
                                                  - 1.0) < 1e-12 and
          abs(nt.lr_factor(dict(tc, warmup_steps=0, lr_schedule="cosine"), 100) - 0.1) < 1e-12)

    cfg = dict(golden_cases.SMALL, placement="pre")
    m = nt.Model(cfg)
    opt, _ = nt.make_optimizer(m, dict(golden_cases.TRAIN_CFG))
    decay_ids = {id(p) for p in opt.param_groups[0]["params"]}
    want = {id(p) for n, p in m.params.items() if n in ("wte.weight", "wpe.weight")
            or (n.endswith(".weight") and not nt.is_norm_param(n))}
    check("AdamW decay group = wte, wpe and linear weights", decay_ids == want
          and opt.param_groups[0]["weight_decay"] == 0.1 and opt.param_groups[1]["weight_decay"] == 0.0
          and len(opt.param_groups[0]["params"]) + len(opt.param_groups[1]["params"]) == len(m.params))

    ids, labels = batch(dict(cfg, vocab=256), B=3, T=7, seed=12)
    tcfg = dict(golden_cases.TRAIN_CFG, steps=6, lr_schedule="cosine", warmup_steps=2, min_lr=3e-4)
    m = nt.Model(cfg)
    recs = nt.train(m, ids, labels, tcfg)
    lrs_ok = all(abs(r["lr"] - 3e-3 * nt.lr_factor(tcfg, r["step"])) < 1e-15 for r in recs)
    check("trainer lr of step s (1-based) = lr * f(s)", lrs_ok and abs(recs[0]["lr"] - 1.5e-3) < 1e-15,
          f"{[r['lr'] for r in recs]}")

    # a manual AdamW replica for 3 steps (clipping active), from the same start
    m1, m2 = nt.Model(cfg), nt.Model(cfg)
    tcfg = dict(golden_cases.TRAIN_CFG, steps=3, grad_clip=0.5)
    recs = nt.train(m1, ids, labels, tcfg)
    b1, b2, eps, wd = 0.9, 0.95, 1e-8, 0.1
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in m2.params.items()}
    man = []
    for s in range(1, 4):
        m2.zero_grad()
        loss, _ = nt.forward(m2, ids, labels)
        loss.backward()
        gn = math.sqrt(sum(float((p.grad ** 2).sum()) for p in m2.parameters()))
        clip = min(1.0, 0.5 / (gn + 1e-6))
        lr = 3e-3 * nt.lr_factor(tcfg, s)
        with torch.no_grad():
            for n, p in m2.params.items():
                g = p.grad * clip
                mm, vv = state[n]
                mm.mul_(b1).add_((1 - b1) * g)
                vv.mul_(b2).add_((1 - b2) * g * g)
                if p.dim() == 2:
                    p.mul_(1 - lr * wd)
                mhat, vhat = mm / (1 - b1 ** s), vv / (1 - b2 ** s)
                p.sub_(lr * mhat / (vhat.sqrt() + eps))
        man.append((float(loss), gn))
    d = max(max(abs(a["loss"] - b[0]), abs(a["grad_norm"] - b[1])) for a, b in zip(recs, man))
    dp = max(float((p1 - p2).abs().max()) for p1, p2 in zip(m1.parameters(), m2.parameters()))
    check("trainer == hand-written AdamW + clipping", d < 1e-12 and dp < 1e-12, f"records {d:.1e} params {dp:.1e}")
    check("grad clipping was active in that run", all(r["grad_norm"] > 0.5 for r in recs),
          f"{[round(r['grad_norm'], 3) for r in recs]}")

    m = nt.Model(cfg)
    recs = nt.train(m, ids, labels, dict(golden_cases.TRAIN_CFG, steps=30))
    check("training on a fixed batch lowers the loss", recs[-1]["loss"] < recs[0]["loss"] - 1.0,
          f"{recs[0]['loss']:.3f} -> {recs[-1]['loss']:.3f}")


def test_training_encdec():
    cfg = dict(golden_cases.ENCDEC, placement=["admin", "layerscale", "rezero", "skipinit", "pre"],
               shared_embeddings=False)
    m = nt.Model(cfg)
    opt, _ = nt.make_optimizer(m, dict(golden_cases.TRAIN_CFG))
    names = {id(p): n for n, p in m.params.items()}
    decay = sorted(names[id(p)] for p in opt.param_groups[0]["params"])
    want = sorted(n for n, p in m.params.items() if n in golden_checks.EMBEDDINGS
                  or (n.endswith(".weight") and not nt.is_norm_param(n)))
    check("AdamW decay group (encdec, methods): embeddings incl. enc.wte / enc.wpe and linear weights only;"
          " omega / gain / rezero not decayed", decay == want and "enc.wte.weight" in decay
          and not any(n.endswith((".omega", ".gain", ".rezero")) for n in decay), f"{set(decay) ^ set(want)}")
    ids, labels, kw = inputs(cfg, golden_cases.ENCDEC_BST, seed=60)
    recs = nt.train(m, ids, labels, dict(golden_cases.TRAIN_CFG, steps=30), **kw)
    moved = float(m.params["h.0.rezero"].detach().abs().max()) > 0 and float(m.params["enc.h.1.mlp.gain"].abs().max()) > 0
    check("encdec training on a fixed padded batch lowers the loss and moves the ReZero / SkipInit gains",
          recs[-1]["loss"] < recs[0]["loss"] - 1.0 and moved, f"{recs[0]['loss']:.3f} -> {recs[-1]['loss']:.3f}")


# --------------------------------------------------------------------------------------------------
# 8. float32 calibration of golden.py's tolerances
# --------------------------------------------------------------------------------------------------

def test_calibration():
    worst_v = worst_g = 0.0
    worst_v_name = worst_g_name = ""
    for c in golden_cases.build_cases():
        if c.kind != "grads":
            continue
        cfg = nt.normalize_config(c.intended_model())
        # the parameters golden.py's "perturbed" step uses (init + golden_checks.perturb_tensors)
        t = golden_checks.perturb_tensors({n: p.numpy() for n, p in nt.init_params(cfg).items()}, 13, cfg)
        t = {n: torch.from_numpy(v) for n, v in t.items()}
        m64, m32 = nt.Model(cfg, torch.float64), nt.Model(cfg, torch.float32)
        m64.load_tensors(t)
        m32.load_tensors(t)
        ids, labels, kw = golden_inputs.forward_inputs(golden_inputs.make_batch(c, cfg, 14))
        res = {}
        for m in (m64, m32):
            o = nt.forward_outputs(m.config, m.params, ids, labels, **kw)
            o["loss"].backward()
            res[m.dtype] = (o["loss"].detach().double(), o["logits"].detach().double(),
                            None if o.get("memory") is None else o["memory"].detach().double(),
                            {n: (p.grad if p.grad is not None else torch.zeros_like(p)).double()
                             for n, p in m.params.items()})
        (l64, z64, mem64, g64), (l32, z32, mem32, g32) = res[torch.float64], res[torch.float32]
        v = max(abs(float(l32 - l64)) / abs(float(l64)), float((z32 - z64).abs().max() / z64.abs().max()))
        if mem64 is not None:
            v = max(v, float((mem32 - mem64).abs().max() / mem64.abs().max()))
        gmax = max(float(g.abs().max()) for g in g64.values())
        # error relative to what golden allows for that tensor
        per = {n: float((g32[n] - g64[n]).abs().max()) /
               (golden_checks.ATOL_GRAD_GLOBAL * gmax + golden_checks.ATOL_FLOOR
                + golden_checks.grad_rtol(tuple(g64[n].shape)) * float(g64[n].abs().max()))
               for n in g64}
        gname = max(per, key=per.get)
        g = per[gname]
        if v > worst_v:
            worst_v, worst_v_name = v, c.name
        if g > worst_g:
            worst_g, worst_g_name = g, f"{c.name} {gname}"
        print(f"  calib {c.name:50s} float32 rel err: loss/logits{'/memory' if mem64 is not None else ''} {v:.1e}"
              f"  grads {g:.3f} of tolerance ({gname})")
    check("float32 loss/logits/memory error <= RTOL_VALUE / HEADROOM_VALUE",
          worst_v <= golden_checks.RTOL_VALUE / golden_checks.HEADROOM_VALUE, f"{worst_v:.1e} ({worst_v_name})")
    check("float32 grad error <= tolerance / HEADROOM", worst_g <= 1 / golden_checks.HEADROOM,
          f"{worst_g:.3f} of tolerance ({worst_g_name})")

    worst_t = 0.0
    for c in golden_cases.build_cases():
        if c.kind != "train":
            continue
        cfg = nt.normalize_config(c.intended_model())
        m64 = nt.Model(cfg, torch.float64)
        m64.load_tensors({n: p.detach().float() for n, p in m64.params.items()})
        m32 = nt.Model(cfg, torch.float32)
        m32.load_tensors({n: p.detach() for n, p in m64.params.items()})
        ids, labels, kw = golden_inputs.forward_inputs(golden_inputs.make_batch(c, cfg, 15))
        r64 = nt.train(m64, ids, labels, c.train, **kw)
        r32 = nt.train(m32, ids, labels, c.train, **kw)
        rel = [abs(a["loss"] - b["loss"]) / b["loss"] /
               (golden_checks.RTOL_TRAIN_LOSS * (1 + golden_checks.RTOL_TRAIN_LOSS_GROWTH * (b["step"] - 1)))
               for a, b in zip(r32, r64)]
        gn = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(r32, r64))
        worst_t = max(worst_t, max(rel), gn / golden_checks.RTOL_TRAIN_GRAD_NORM)
        print(f"  calib train {c.name:38s} float32 loss err {max(rel):.3f} of tolerance, grad_norm rel {gn:.1e};"
              f" loss {r64[0]['loss']:.3f} -> {r64[-1]['loss']:.3f}")
    check("float32 training error <= tolerance / HEADROOM", worst_t <= 1 / golden_checks.HEADROOM,
          f"{worst_t:.3f} of tolerance")


def main():
    quick = "--quick" in sys.argv[1:]
    tests = [test_param_names, test_param_names_methods, test_param_names_encdec, test_config,
             test_checkpoint_roundtrip, test_alt_forward, test_torch_transformer, test_deepnorm,
             test_deepnorm_encdec, test_method_identities, test_residual, test_closed_form_inits, test_causality,
             test_encdec_masks, test_init, test_init_methods, test_perturb, test_admin_profile, test_training,
             test_training_encdec, test_gradcheck_cross_attention, test_directional_encdec, test_gradcheck]
    if not quick:
        tests.append(test_calibration)
    import time
    for t in tests:
        t0 = time.time()
        try:
            t()
            print(f"  ({t.__name__}: {time.time() - t0:.1f} s)")
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(t.__name__, False, f"raised {type(e).__name__}: {e}")
    n_fail = RESULTS.count(False)
    print(f"{len(RESULTS) - n_fail} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
