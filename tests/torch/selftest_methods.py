"""selftest_methods.py: the oracle's self-checks of the methods (sections 3 and 6 of selftest.py):
the DeepNorm formula and constants, the methods' identities, ResiDual, the closed-form inits, the
init distributions of every scheme, perturbation and Admin's profile walk."""
from selftest_common import *  # noqa: F401,F403
# --------------------------------------------------------------------------------------------------
# 3. deepnorm formula, the methods' identities and closed-form inits
# --------------------------------------------------------------------------------------------------

def test_deepnorm():
    for L in (1, 2, 3, 6):
        a = nt.residual_alpha(nt.normalize_config(dict(TINY, n_layers=L, placement="deepnorm")), "deepnorm")
        check(f"deepnorm alpha = (2L)^(1/4), L={L}", abs(a - (2 * L) ** 0.25) < 1e-15, f"{a}")
    c = nt.normalize_config(dict(TINY, placement=["pre", "deepnorm"]))
    check("alpha = 1 for non-deepnorm layers of a mixed list", nt.residual_alpha(c, "pre") == 1.0
          and abs(nt.residual_alpha(c, "deepnorm") - 2 ** 0.5) < 1e-15)
    check("alpha = 0 without residual (deepnorm too)",
          nt.residual_alpha(nt.normalize_config(dict(TINY, residual=False)), "deepnorm") == 0.0)
    for norm in ("layernorm", "rmsnorm"):
        cfg = dict(TINY, placement="deepnorm", norm=norm)           # L = 2 -> alpha = sqrt(2)
        m = perturbed_model(cfg, seed=3)
        P = m.params
        cvec = torch.randn(TINY["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(4))
        with torch.no_grad():                                        # make F_attn(x) = cvec exactly
            P["h.0.attn.proj.weight"].zero_()
            P["h.0.attn.proj.bias"].copy_(cvec)
        x = torch.randn(2, 5, TINY["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            y = nt.sublayer(m.config, P, "h.0.attn", "deepnorm", nt.attention, x)
            alpha = 2 ** 0.5
            g = P["h.0.attn.ln_out.weight"]

            def hand_norm(z):
                if norm == "layernorm":
                    mu = z.mean(-1, keepdim=True)
                    return (z - mu) / ((z - mu).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * g \
                        + P["h.0.attn.ln_out.bias"]
                return z / (z.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * g
            right = hand_norm(alpha * x + cvec)
            wrong = hand_norm(x + alpha * cvec)
        e_right = float((y - right).abs().max())
        e_wrong = float((y - wrong).abs().max())
        check(f"deepnorm sublayer is N(alpha*x + F(x)) [{norm}]", e_right < 1e-12 and e_wrong > 1e-3,
              f"|y - N(a x + F)| = {e_right:.1e}, |y - N(x + a F)| = {e_wrong:.1e}")
        m2 = copy.deepcopy(m)
        m2.config = dict(m.config, residual=False)
        with torch.no_grad():
            y0 = nt.sublayer(m2.config, P, "h.0.attn", "deepnorm", nt.attention, x)
        e0 = float((y0 - hand_norm(cvec.expand_as(x))).abs().max())
        check(f"deepnorm with residual=false is N(F(x)) [{norm}]", e0 < 1e-12, f"{e0:.1e}")


def test_deepnorm_encdec():
    """DeepNet's encoder-decoder constants (MODEL.md table) and that each stack's deepnorm layers use them."""
    for N, M in ((1, 1), (2, 3), (6, 6), (12, 4)):
        enc, dec = nt.stacks(nt.normalize_config(dict(TINY_ED, n_layers=N, dec_layers=M, placement="deepnorm")))
        want = (0.81 * (N ** 4 * M) ** (1 / 16), 0.87 * (N ** 4 * M) ** (-1 / 16), (3 * M) ** 0.25, (12 * M) ** -0.25)
        got = (enc.alpha, enc.beta, dec.alpha, dec.beta)
        check(f"DeepNorm encdec constants N={N} M={M}", all(abs(a - b) < 1e-14 for a, b in zip(got, want)),
              f"{got} vs {want}")
    cfg = dict(TINY_ED, placement="deepnorm")        # N = 2, M = 3
    m = perturbed_model(cfg, seed=3)
    P = m.params
    C = TINY_ED["d_model"]
    ids, labels, kw = inputs(cfg, TINY_ED_BST, seed=4)
    mem = torch.randn(2, 5, C, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    x = torch.randn(2, 7, C, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    for prefix, alpha, branch in (("enc.h.1.mlp", 0.81 * (2 ** 4 * 3) ** (1 / 16), nt.mlp),
                                  ("h.2.cross", 9 ** 0.25, lambda c_, p_, pre, h, k=None: nt.cross_attention(
                                      c_, p_, pre, h, kw["key_mask"], mem))):
        with torch.no_grad():
            y = nt.sublayer(m.config, P, prefix, "deepnorm", branch, x)
            f = branch(m.config, P, prefix, x)
            right = nt.norm(m.config, P, prefix + ".ln_out", alpha * x + f)
            wrong = nt.norm(m.config, P, prefix + ".ln_out", (2 * 5) ** 0.25 * x + f)     # the gpt rule, L = N + M
        e1, e2 = float((y - right).abs().max()), float((y - wrong).abs().max())
        check(f"encdec deepnorm sub-layer {prefix} uses its stack's alpha", e1 < 1e-12 and e2 > 1e-4,
              f"{e1:.1e} vs gpt-rule {e2:.1e}")


def test_method_identities():
    """Each new method against an existing one with the same parameters (exact identities)."""
    def logits(cfg, params, seed=2, kwargs=False):
        ids, labels, kw = inputs(cfg, (2, 5) if nt.normalize_config(cfg)["arch"] != "encdec" else TINY_ED_BST,
                                 seed=seed)
        with torch.no_grad():
            return nt.forward_outputs(nt.normalize_config(cfg), params, ids, labels, **kw)["logits"]

    for arch_cfg in (dict(TINY), dict(TINY, arch="encoder"), dict(TINY_ED)):
        arch = nt.normalize_config(arch_cfg)["arch"]
        # admin with omega = 1 is post (admin_init = one: "plain Post-LN, a parameter")
        ma = perturbed_model(dict(arch_cfg, placement="admin", admin_init="one"), seed=7)
        with torch.no_grad():
            for n, p in ma.params.items():
                if n.endswith(".omega"):
                    p.fill_(1.0)
        post_params = {n: p for n, p in ma.params.items() if not n.endswith(".omega")}
        e = float((logits(dict(arch_cfg, placement="admin"), ma.params)
                   - logits(dict(arch_cfg, placement="post"), post_params)).abs().max())
        check(f"{arch}: admin with omega 1 == post", e < 1e-13, f"{e:.1e}")
        # admin with a per-channel omega != post
        with torch.no_grad():
            for n, p in ma.params.items():
                if n.endswith(".omega"):
                    p.copy_(torch.linspace(0.5, 2.0, p.numel(), dtype=p.dtype))
        e = float((logits(dict(arch_cfg, placement="admin"), ma.params)
                   - logits(dict(arch_cfg, placement="post"), post_params)).abs().max())
        check(f"{arch}: admin with omega != 1 differs from post", e > 1e-3, f"{e:.1e}")
        # layerscale with gain 1 is pre
        ml = perturbed_model(dict(arch_cfg, placement="layerscale"), seed=8)
        with torch.no_grad():
            for n, p in ml.params.items():
                if n.endswith(".gain"):
                    p.fill_(1.0)
        pre_params = {n: p for n, p in ml.params.items() if not n.endswith(".gain")}
        e = float((logits(dict(arch_cfg, placement="layerscale"), ml.params)
                   - logits(dict(arch_cfg, placement="pre"), pre_params)).abs().max())
        check(f"{arch}: layerscale with gain 1 == pre", e < 1e-13, f"{e:.1e}")
        # tfixup is none (initialization only); rezero / skipinit with gain 1 are none
        mt = perturbed_model(dict(arch_cfg, placement="tfixup"), seed=9)
        e = float((logits(dict(arch_cfg, placement="tfixup"), mt.params)
                   - logits(dict(arch_cfg, placement="none"), mt.params)).abs().max())
        check(f"{arch}: tfixup forward == none forward", e < 1e-13, f"{e:.1e}")
        for method in ("rezero", "skipinit"):
            mr = perturbed_model(dict(arch_cfg, placement=method), seed=10)
            with torch.no_grad():
                for n, p in mr.params.items():
                    if n.endswith((".gain", ".rezero")):
                        p.fill_(1.0)
            base = {n: p for n, p in mr.params.items() if not n.endswith((".gain", ".rezero"))}
            e = float((logits(dict(arch_cfg, placement=method), mr.params)
                       - logits(dict(arch_cfg, placement="none"), base)).abs().max())
            check(f"{arch}: {method} with gain 1 == none", e < 1e-13, f"{e:.1e}")
            # at init (gain 0) every sub-layer is the identity: logits = (embedding) @ wte^T
            m0 = perturbed_model(dict(arch_cfg, placement=method), seed=11)
            with torch.no_grad():
                for n, p in m0.params.items():
                    if n.endswith((".gain", ".rezero")):
                        p.zero_()
            ids, labels, kw = inputs(arch_cfg, (2, 5) if arch != "encdec" else TINY_ED_BST, seed=2)
            P = m0.params
            tgt = kw.get("decoder_input_ids", ids)
            want = (P["wte.weight"][tgt] + P["wpe.weight"][:tgt.shape[1]]) @ P["wte.weight"].t()
            e = float((logits(dict(arch_cfg, placement=method), P) - want).abs().max())
            check(f"{arch}: {method} at gain 0 is the identity (logits of the embeddings)", e < 1e-13, f"{e:.1e}")
    # ReZero's scalar is shared by the layer's sub-layers: its gradient is the sum over them
    cfg = dict(TINY_ED, placement="rezero")
    m = perturbed_model(cfg, seed=12)
    ids, labels, kw = inputs(cfg, TINY_ED_BST, seed=13)
    params = dict(m.params)
    split = {}
    for l in range(3):                  # one independent scalar per decoder sub-layer of layer l
        for sub in ("attn", "cross", "mlp"):
            split[f"h.{l}.{sub}"] = params[f"h.{l}.rezero"].detach().clone().requires_grad_(True)
    orig = nt.branch_scale
    nt.patch("branch_scale", lambda P_, prefix, method: split[prefix] if prefix in split else orig(P_, prefix, method))
    try:
        loss, _ = nt.forward_params(m.config, params, ids, labels, **kw)
        loss.backward()
    finally:
        nt.patch("branch_scale", orig)
    m.zero_grad()
    loss2, _ = nt.forward(m, ids, labels, **kw)
    loss2.backward()
    e = max(abs(float(m.params[f"h.{l}.rezero"].grad) - sum(float(split[f"h.{l}.{s}"].grad)
                                                          for s in ("attn", "cross", "mlp"))) for l in range(3))
    check("ReZero: one scalar per layer, shared by attn, cross and mlp", e < 1e-12 and abs(float(loss - loss2)) == 0,
          f"{e:.1e}")
    # residual = false: the shortcut is 0 for every method; Admin's omega then gets no gradient
    cfg = dict(TINY, placement="admin", residual=False)
    m = perturbed_model(cfg, seed=14)
    ids, labels = batch(cfg, seed=15)
    loss, _ = nt.forward(m, ids, labels)
    loss.backward()
    check("admin with residual = false: omega unused (no gradient)", all(
        p.grad is None or float(p.grad.abs().max()) == 0 for n, p in m.params.items() if n.endswith(".omega")))


def test_residual():
    """ResiDual by hand from the paper's equations on explicit tensors (two streams, LN_final once), and
    the x-transformers#145 variant (x <- x + LN_f(x_d) after every layer) differing from it."""
    cfg = dict(TINY, n_layers=3, placement="residual", vocab=11)
    m = perturbed_model(cfg, seed=4)
    c, P = m.config, m.params
    ids, labels = batch(cfg, B=2, T=5, seed=5)

    def ln(prefix, z):
        return torch.nn.functional.layer_norm(z, (c["d_model"],), P[prefix + ".weight"], P[prefix + ".bias"], c["eps"])

    def branch(l, kind, h):
        return nt.attention(c, P, f"h.{l}.attn", h) if kind == "attn" else nt.mlp(c, P, f"h.{l}.mlp", h)

    with torch.no_grad():
        x0 = P["wte.weight"][ids] + P["wpe.weight"][:ids.shape[1]]
        xa, xd = x0.clone(), x0.clone()
        xb, xdb = x0.clone(), x0.clone()   # the #145 variant
        for l in range(3):
            for kind in ("attn", "mlp"):
                h = branch(l, kind, xa)
                xa, xd = ln(f"h.{l}.{kind}.ln_out", xa + h), xd + h
                hb = branch(l, kind, xb)
                xb, xdb = ln(f"h.{l}.{kind}.ln_out", xb + hb), xdb + hb
            xb = xb + ln("ln_f", xdb)
        want = xa + ln("ln_f", xd)
        got = nt.forward_outputs(c, P, ids, labels)["final"]
        err = float((got - want).abs().max())
        gap = float((got - xb).abs().max())
    check("residual: y = x_a + LN_f(x_0 + sum F), x_a <- LN(x_a + F(x_a))", err < 1e-12, f"max err {err:.2e}")
    check("residual: the x-transformers#145 per-layer LN_f variant differs (> 0.1)", gap > 0.1, f"max gap {gap:.3f}")
    # with a single sub-layer both readings coincide: the check above is about where LN_f sits
    one = dict(TINY, n_layers=1, placement="residual", vocab=11, mlp=False)
    m1 = perturbed_model(one, seed=4)
    with torch.no_grad():
        x0 = m1.params["wte.weight"][ids] + m1.params["wpe.weight"][:ids.shape[1]]
        h = nt.attention(m1.config, m1.params, "h.0.attn", x0)
        P1 = m1.params
        y = (torch.nn.functional.layer_norm(x0 + h, (8,), P1["h.0.attn.ln_out.weight"], P1["h.0.attn.ln_out.bias"],
                                            m1.config["eps"])
             + torch.nn.functional.layer_norm(x0 + h, (8,), P1["ln_f.weight"], P1["ln_f.bias"], m1.config["eps"]))
        err1 = float((nt.forward_outputs(m1.config, P1, ids, labels)["final"] - y).abs().max())
    check("residual, one sub-layer: y = LN(x + F) + LN_f(x + F)", err1 < 1e-12, f"max err {err1:.2e}")


def test_closed_form_inits():
    # Admin: S = 2L (gpt / encoder), 2N (encoder stack), 3M (decoder stack)
    hand = {2: 1.3155674364624994, 4: 1.4514388284726503, 6: 1.6116104977904107, 9: 1.8283721773841664}
    ok = []
    for S, v in hand.items():
        st = nt.stacks(nt.normalize_config(dict(TINY, n_layers=S // 2)))[0] if S % 2 == 0 else None
        if st is not None:
            ok.append(abs(nt.admin_init_value(nt.normalize_config(dict(TINY, n_layers=S // 2)), st) - v) < 1e-14)
    c = nt.normalize_config(dict(TINY_ED, placement="admin"))              # N = 2, M = 3: S = 4 and 9
    enc, dec = nt.stacks(c)
    ok += [abs(nt.admin_init_value(c, enc) - hand[4]) < 1e-14, abs(nt.admin_init_value(c, dec) - hand[9]) < 1e-14,
           nt.admin_init_value(c, enc, "sqrt") == 2.0, nt.admin_init_value(c, dec, "sqrt") == 3.0,
           nt.admin_init_value(c, dec, "one") == 1.0, enc.n_residual == 4 and dec.n_residual == 9]
    check("Admin closed forms: log sqrt((S+1)/ln(S+1)-1), sqrt sqrt(S), one 1; S = 2L, 2N, 3M", all(ok), f"{ok}")
    t = nt.init_params(c)
    check("Admin omega init per stack (encdec log)", float(t["enc.h.1.mlp.omega"][0]) == nt.admin_init_value(c, enc)
          and float(t["h.2.cross.omega"][3]) == nt.admin_init_value(c, dec)
          and bool((t["h.0.attn.omega"] == t["h.0.attn.omega"][0]).all()))
    vals = {d: nt.layerscale_init(d) for d in (1, 18, 19, 24, 25, 100)}
    check("LayerScale init by stack depth: 0.1 (<= 18), 1e-5 (<= 24), 1e-6",
          vals == {1: 0.1, 18: 0.1, 19: 1e-5, 24: 1e-5, 25: 1e-6, 100: 1e-6}, f"{vals}")
    c = nt.normalize_config(dict(TINY_ED, n_layers=2, dec_layers=19, placement="layerscale"))
    t = nt.init_params(c)
    check("LayerScale init per stack: encoder of 2 -> 0.1, decoder of 19 -> 1e-5",
          float(t["enc.h.1.attn.gain"][0]) == 0.1 and float(t["h.18.cross.gain"][2]) == 1e-5)
    c = nt.normalize_config(dict(TINY_ED, placement=["skipinit", "rezero", "skipinit", "rezero", "skipinit"]))
    t = nt.init_params(c)
    check("SkipInit gains and ReZero scalars init 0",
          all(float(v.abs().max()) == 0 for n, v in t.items() if n.endswith((".gain", ".rezero")))
          and t["enc.h.0.attn.gain"].shape == (1,) and t["enc.h.1.rezero"].shape == (1,))

# --------------------------------------------------------------------------------------------------
# 6. init, perturbation, Admin's profile
# --------------------------------------------------------------------------------------------------

def _f32(cfg):
    return {k: v.to(torch.float32) for k, v in nt.init_params(cfg).items()}


def test_init():
    for scheme in ("normal", "gpt2", "xavier", "deepnet", "auto"):
        for pl in ("pre", "deepnorm"):
            cfg = nt.normalize_config(dict(golden_cases.SMALL, placement=pl, init=scheme, seed=11))
            probs = golden_checks.check_init(cfg, _f32(cfg))
            check(f"init {scheme} ({pl}) passes golden_checks.check_init", not probs, "; ".join(probs[:3]))
    # ... and check_init notices a wrong scheme (deepnet vs gpt2 std, fused-qkv fans for xavier)
    cfg = nt.normalize_config(dict(golden_cases.SMALL, placement="pre", init="gpt2"))
    t = _f32(cfg)
    check("check_init rejects a gpt2 init read as deepnet", golden_checks.check_init(dict(cfg, init="deepnet"), t))
    cfg = nt.normalize_config(dict(golden_cases.SMALL, placement="deepnorm", init="deepnet"))
    t = _f32(cfg)
    C = cfg["d_model"]
    bad = dict(t)
    w = t["h.0.attn.qkv.weight"].clone()
    w[2 * C:] *= 1 / 0.5      # value rows with gain 1 instead of beta = (8L)^(-1/4) = 0.5
    bad["h.0.attn.qkv.weight"] = w
    check("check_init rejects deepnet value rows without beta", golden_checks.check_init(cfg, bad))
    bad = dict(t)
    bad["h.1.attn.proj.bias"] = t["h.1.attn.proj.bias"] + 1e-3
    check("check_init rejects a non-zero bias", golden_checks.check_init(cfg, bad))
    # T-Fixup as the official code: q and k rows at Xavier gain 1/sqrt(2); a table shared by encoder and
    # decoder scaled by the encoder's (9N)^(-1/4). The former rule (gain 1, the decoder's M) is refused.
    cfg = nt.normalize_config(dict(golden_cases.ENCDEC, placement="tfixup", seed=5))
    t = _f32(cfg)
    probs = golden_checks.check_init(cfg, t)
    check("init tfixup (encdec, shared table) passes golden_checks.check_init", not probs, "; ".join(probs[:3]))
    bad = dict(t)
    w = t["h.0.attn.qkv.weight"].clone()
    w[:C] *= 2 ** 0.5
    bad["h.0.attn.qkv.weight"] = w
    check("check_init rejects T-Fixup query rows at gain 1", golden_checks.check_init(cfg, bad))
    N, M = cfg["n_layers"], cfg["dec_layers"]
    bad = dict(t, **{"wte.weight": t["wte.weight"] * ((9 * M) / (9 * N)) ** -0.25})
    check("check_init rejects a shared T-Fixup table scaled by the decoder's depth",
          golden_checks.check_init(cfg, bad))


def test_init_methods():
    """Every scheme on every arch and method passes check_init; check_init catches the wrong constants."""
    configs = []
    for arch in ("gpt", "encoder"):
        for method in ("admin", "rezero", "skipinit", "layerscale", "tfixup"):
            configs.append(dict(golden_cases.SMALL, arch=arch, placement=method))
    for scheme in ("auto", "normal", "gpt2", "xavier", "deepnet", "tfixup"):
        configs.append(dict(golden_cases.ENCDEC, placement=["admin", "rezero", "skipinit", "layerscale", "tfixup"],
                            init=scheme, shared_embeddings=False, src_vocab=300))
        configs.append(dict(golden_cases.ENCDEC, placement=["deepnorm", "pre", "sandwich", "post", "prepost"],
                            init=scheme))
    configs += [dict(golden_cases.ENCDEC, placement="admin", admin_init=a) for a in ("sqrt", "one", "profile")]
    configs += [dict(golden_cases.DEEP, n_layers=19, placement="layerscale"), dict(golden_cases.DEEP, n_layers=25,
                placement="layerscale"), dict(golden_cases.DEEP, arch="encdec", n_layers=2, dec_layers=19,
                placement="layerscale"), dict(golden_cases.ENCDEC, placement="tfixup"),
                dict(golden_cases.ENCDEC_EXTRA, placement="tfixup", shared_embeddings=False)]
    for cfg in configs:
        c = nt.normalize_config(dict(cfg, seed=23))
        probs = golden_checks.check_init(c, _f32(c))
        tag = f"{c['arch']} {c['placement'] if len(set(c['placement'])) > 1 else c['placement'][0]} init {c['init']}"
        if c["admin_init"] != "log":
            tag += f" admin_init {c['admin_init']}"
        check(f"init passes golden_checks.check_init: {tag} (L={len(c['placement'])})", not probs, "; ".join(probs[:3]))

    def rejects(what, cfg, edit, cfg_for_check=None):
        c = nt.normalize_config(dict(cfg, seed=24))
        t = _f32(c)
        edit(t, c)
        probs = golden_checks.check_init(nt.normalize_config(cfg_for_check) if cfg_for_check else c, t)
        check(f"check_init rejects {what}", probs, "; ".join(probs[:1]))

    ed = dict(golden_cases.ENCDEC, placement="deepnorm", init="deepnet")   # N = 2, M = 3
    C = golden_cases.ENCDEC["d_model"]
    N, M = 2, 3

    def scale_rows(name, r0, r1, f):
        def edit(t, c):
            w = t[name].clone()
            w[r0:r1] *= f
            t[name] = w
        return edit
    rejects("a decoder value row with the encoder's beta", ed,
            scale_rows("h.1.attn.qkv.weight", 2 * C, 3 * C, (0.87 * (N ** 4 * M) ** (-1 / 16)) / (12 * M) ** -0.25))
    rejects("cross.kv v rows without beta", ed, scale_rows("h.0.cross.kv.weight", C, 2 * C, 1 / (12 * M) ** -0.25))
    rejects("cross.q with beta", ed, scale_rows("h.2.cross.q.weight", 0, C, (12 * M) ** -0.25))
    rejects("encdec gpt2 proj scaled by 2N instead of 2(N+M)", dict(golden_cases.ENCDEC, placement="pre"),
            scale_rows("h.0.cross.proj.weight", 0, C, math.sqrt(10 / 4)))
    rejects("LayerScale 0.1 at decoder depth 19",
            dict(golden_cases.DEEP, arch="encdec", n_layers=2, dec_layers=19, placement="layerscale"),
            lambda t, c: t.__setitem__("h.3.mlp.gain", torch.full((8,), 0.1)))
    rejects("Admin omega sqrt where log was asked", dict(golden_cases.ENCDEC, placement="admin"),
            lambda t, c: t.__setitem__("h.0.cross.omega", torch.full((C,), 3.0)))
    rejects("Admin omega with the encoder's S in the decoder", dict(golden_cases.ENCDEC, placement="admin"),
            lambda t, c: t.__setitem__("h.0.mlp.omega", t["enc.h.0.mlp.omega"].clone()))
    rejects("a non-zero SkipInit gain", dict(golden_cases.SMALL, placement="skipinit"),
            lambda t, c: t.__setitem__("h.1.mlp.gain", torch.full((1,), 1e-3)))
    tf = dict(golden_cases.ENCDEC, placement="tfixup", shared_embeddings=False)
    rejects("T-Fixup wte without (9M)^(-1/4)", tf,
            lambda t, c: t.__setitem__("wte.weight", t["wte.weight"] / (9 * M) ** -0.25))
    rejects("T-Fixup enc.wte with the decoder's factor", tf,
            lambda t, c: t.__setitem__("enc.wte.weight", t["enc.wte.weight"] * ((9 * M) / (9 * N)) ** 0.25))
    rejects("T-Fixup encoder mlp.fc with (9N)^(-1/4) instead of 0.67 N^(-1/4)", tf,
            scale_rows("enc.h.1.mlp.fc.weight", 0, golden_cases.ENCDEC["d_ff"], (9 * N) ** -0.25 / (0.67 * N ** -0.25)))
    rejects("T-Fixup decoder cross.proj unscaled", tf, scale_rows("h.1.cross.proj.weight", 0, C, 1 / (9 * M) ** -0.25))
    rejects("T-Fixup q rows scaled", tf, scale_rows("h.1.attn.qkv.weight", 0, C, (9 * M) ** -0.25))
    rejects("a tfixup init read as xavier", tf, lambda t, c: None, dict(tf, init="xavier"))


def test_perturb():
    cfg = nt.normalize_config(dict(golden_cases.ENCDEC, shared_embeddings=False,
                                   placement=["admin", "rezero", "skipinit", "layerscale", "tfixup"]))
    init = {n: p.numpy() for n, p in nt.init_params(cfg).items()}
    t = golden_checks.perturb_tensors(init, 3, cfg)
    bad = []
    for n, w in t.items():
        w = w.astype(np.float64)
        if n.endswith(".omega") and not (w.min() >= 1.0 and w.max() <= 2.0 and w.std() > 0.1):
            bad.append(n)
        if n.endswith((".gain", ".rezero")) and not (np.abs(w).min() >= 0.3 - 1e-6 and np.abs(w).max() <= 1.0):
            bad.append(n)
        if n.endswith(".gain") and w.size > 1 and not (w.min() < 0 < w.max()):
            bad.append(n + " (signs)")
        if np.array_equal(w, init[n].astype(np.float32).astype(np.float64)):
            bad.append(n + " (unchanged)")
    check("perturb_tensors: omega in [1, 2], gains / rezero +-[0.3, 1], nothing left at its init", not bad, f"{bad}")


def test_admin_profile():
    """The profile walk (MODEL.md "Admin omega"): after nt.admin_profile, the chain recomputed from the
    independent alt_forward's streams must hold: in each stack the first Admin sub-layer's omega is 1
    and the next Admin sub-layer's omega is sqrt(Var(omega_i x_i) + Var(f_i)) (population variances
    over the whole batch), every channel equal. chain "admin": only Admin sub-layers advance the ratio;
    chain "all": every sub-layer does, with its own shortcut scale (the two readings of MODEL.md)."""
    cases = [("gpt admin", dict(TINY, n_layers=3, placement="admin"), (3, 5)),
             ("encoder admin, padded", dict(TINY, arch="encoder", placement="admin"), (3, 5)),
             ("gpt mix admin / pre / admin", dict(TINY, n_layers=3, placement=["admin", "pre", "admin"]), (2, 5)),
             ("encdec admin", dict(TINY_ED, placement="admin"), TINY_ED_BST),
             ("encdec mix", dict(TINY_ED, placement=["post", "admin", "admin", "deepnorm", "admin"]), TINY_ED_BST)]

    def var(z):
        z = z.double()
        return float(((z - z.mean()) ** 2).mean())
    for chain in ("admin", "all"):
        for name, cfg, bt in cases:
            m = perturbed_model(dict(cfg, admin_init="profile"), seed=50)
            ids, labels, kw = inputs(cfg, bt, seed=51, pad="padded" in name)
            before = {n: p.detach().clone() for n, p in m.params.items()}
            values = nt.admin_profile(m.config, m.params, ids, chain=chain, **kw)
            changed = [n for n, p in m.params.items() if not torch.equal(p.detach(), before[n])]
            trace = []
            with torch.no_grad():
                alt_forward(m, ids, labels, kw, trace)
            worst, firsts_ok = 0.0, True
            ratio, stack, seen_admin = 1.0, None, False
            for st, prefix, method, x, f, shortcut in trace:
                if st != stack:            # a new chain
                    ratio, stack, seen_admin = 1.0, st, False
                if method == "admin":
                    w = m.params[prefix + ".omega"]
                    worst = max(worst, float((w - ratio).abs().max()) / ratio)
                    if not seen_admin:
                        firsts_ok = firsts_ok and (chain == "all" or float((w - 1.0).abs().max()) == 0)
                    seen_admin = True
                if chain == "all" or method == "admin":
                    ratio = math.sqrt(var(shortcut * x) + var(f))
            n_admin = sum(1 for t_ in trace if t_[2] == "admin")
            check(f"admin profile (chain {chain}): {name}", worst < 1e-12 and firsts_ok and len(values) == n_admin
                  and sorted(changed) == sorted(v[0] for v in values),
                  f"{n_admin} omegas, worst rel err {worst:.1e}, values {[round(v, 3) for _, v in values]}")
    cfg = dict(TINY, n_layers=3, placement=["admin", "pre", "admin"], admin_init="profile")
    ids, labels, kw = inputs(cfg, (2, 5), seed=51)
    va = nt.admin_profile(cfg, perturbed_model(cfg, seed=50).params, ids, chain="admin", **kw)
    vb = nt.admin_profile(cfg, perturbed_model(cfg, seed=50).params, ids, chain="all", **kw)
    check("admin profile: the two chain readings differ on a mixed stack (so the golden case decides)",
          abs(va[2][1] - vb[2][1]) > 1e-3 and va[:2] == vb[:2], f"{[round(v, 4) for _, v in va]} vs "
          f"{[round(v, 4) for _, v in vb]}")
