"""golden_checks: how golden.py judges the normlab CLI's output: the tolerances (with their
calibration), compare() of one tensor, the checks of a fresh checkpoint (its metadata config and its
init distributions), and the perturbed checkpoint that moves every parameter off its init.
"""

import json
import math

import numpy as np

import normlab_torch as nt


# ==================================================================================================
# Tolerances (reference: torch float64; tested: normlab float32).
#
# Each tensor is compared as   max|a - b| <= atol + rtol * max|b|   (b = reference): relative to
# the tensor's largest element, because entries that are mathematically ~0 (e.g. the gradient of the
# attention key bias, exactly 0 by softmax shift invariance) carry absolute float32 noise of the
# size of their neighbours, so an element-wise relative error would be meaningless.
#
# Calibration (selftest.py, "calib" lines: torch float32 vs float64 on exactly golden.py's configs
# and perturbed parameters, padded batches included): loss/logits/memory <= 3.6e-6 relative;
# gradients <= 13.4% of the bound below (i.e. <= ~1.3e-5 relative; x_gpt_bert_pieces_pad's wte);
# 10-step training loss <= 2e-7 relative, grad_norm <= 9.2e-6 relative.
# A C++ engine summing in a different order changes the constant, not the order of magnitude; the
# bounds keep >= 5x headroom (checked by selftest.py) while catching subtle bugs: GELU's erf form
# instead of the tanh form moves logits by 2-3e-4 and gradients by 2-9e-4 relative (>= 2x the
# bounds), weight decay wrongly applied to gains/biases moves the step-6 training loss by 1.5e-4.
RTOL_VALUE = 2e-5        # loss, logits and (encdec) memory (forward only)
RTOL_GRAD = 1e-4         # every grad.<name> ...
RTOL_GRAD_SCALAR = 4e-4  # ... except a one-element parameter (ReZero's scalar, SkipInit's gain): its gradient
                         # sums B*T*C products per sub-layer (x3 for a decoder layer's shared ReZero) with
                         # cancellation; torch float32 reaches 0.16 of the 1e-4 bound on encdec cases (e.g.
                         # h.0.rezero: 1.7e-5 relative), under the 5x headroom. A missing or unshared gain
                         # changes it by O(1).
ATOL_GRAD_GLOBAL = 1e-6  # atol of a gradient tensor = this * (largest |grad| over ALL tensors):
                         # a tensor whose gradients are tiny (deep post-norm layers, residual=false)
                         # inherits float32 noise from the large upstream gradients.
ATOL_FLOOR = 1e-12       # so that an all-zero reference tensor needs an (almost) all-zero result
# Training (10 AdamW steps on one fixed batch, from the init checkpoint): step 1's loss is a forward
# pass; afterwards float32 gradient noise enters the parameters through Adam's m/(sqrt(v)+eps) and
# compounds mildly step by step (the largest relative perturbation is on parameters whose gradient
# is ~0, e.g. the key bias, which provably does not affect the loss). Hence a bound growing 10% per
# step: 5e-5 at step 1, 9.5e-5 at step 10 -- 250x the measured float32 drift, yet below the effect
# of a wrong weight-decay grouping. (Brief suggested ~2e-4; that would miss the grouping bug.)
RTOL_TRAIN_LOSS = 5e-5
RTOL_TRAIN_LOSS_GROWTH = 0.1   # tol(step) = RTOL_TRAIN_LOSS * (1 + GROWTH * (step - 1))
RTOL_TRAIN_LR = 1e-6           # a closed formula; only float32 storage / printing (~6e-8) separates them
RTOL_TRAIN_GRAD_NORM = 2e-4    # the pre-clip global norm (measured float32 drift <= 9.2e-6)
HEADROOM = 5.0                 # selftest.py requires float32 torch errors <= bound / HEADROOM
# ... and for the forward values (loss, logits, memory) RTOL_VALUE / HEADROOM_VALUE: torch 1.13's own
# float32 logits depend on the OpenBLAS kernels it runs, and on an AMD Zen 4 (2026-12-02) its AVX-512
# kernels gave encoder_mix_pre_post_sandwich 4.7e-6 (its AVX2 kernels, OPENBLAS_CORETYPE=Haswell,
# 1.8e-6; every other case 3.6e-6 or less): RTOL_VALUE stays over 4x any float32 noise measured.
HEADROOM_VALUE = 4.0
# Init distributions: a sample std of n normal draws has relative std-error 1/sqrt(2n); allow 6 of
# those (a few hundred cases x tensors => a false alarm probability < 1e-6).
INIT_SIGMAS = 6.0
# Config values read back from checkpoint metadata: floats may have been stored as float32.
RTOL_CONFIG_FLOAT = 1e-6


def grad_rtol(shape):
    """RTOL of one grad.<name> tensor (see RTOL_GRAD_SCALAR)."""
    return RTOL_GRAD_SCALAR if math.prod(shape) == 1 else RTOL_GRAD


def compare(name, got, ref, rtol, atol, out):
    """max|got-ref| <= atol + rtol*max|ref|. Returns (ok, rel) and appends a report line."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        out.append(f"    {name:42s} SHAPE normlab {got.shape} vs torch {ref.shape}")
        return False, math.inf
    if not np.all(np.isfinite(got)):
        out.append(f"    {name:42s} non-finite values in normlab output")
        return False, math.inf
    diff = np.abs(got - ref)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(diff)) if diff.size else 0.0
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()
    tol = atol + rtol * scale
    ok = err <= tol
    rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    at = f"normlab {got[idx]:.9g} torch {ref[idx]:.9g}" if diff.size else ""
    out.append(f"    {name:42s} max|err| {err:.3e}  rel {rel:.2e}  tol {tol:.2e}  worst {idx} ({at})"
               + ("" if ok else "   <-- MISMATCH"))
    return ok, rel


# ==================================================================================================
# Checks
# ==================================================================================================

def metadata_key_optional(config, key):
    """Keys that may be absent from checkpoint metadata because they cannot affect that model:
    admin_init without an admin layer, src_vocab with shared embeddings. (MODEL.md says "every key
    explicit"; the engine writes these two only where they matter -- a reading we accept. When
    present they must still equal the normalized value.)"""
    if key == "admin_init":
        return "admin" not in config["placement"]
    if key == "src_vocab":
        return config.get("shared_embeddings", True)
    return False


def check_metadata_config(meta_cfg, intended):
    """The metadata must hold every key explicitly, equal to the normalized intended config."""
    want = nt.normalize_config(intended)
    problems = []
    for k, v in want.items():
        if k not in meta_cfg:
            if not metadata_key_optional(want, k):
                problems.append(f"metadata config lacks key {k!r}")
            continue
        m = meta_cfg[k]
        if isinstance(v, float) and not isinstance(m, bool) and isinstance(m, (int, float)):
            if not math.isclose(float(m), v, rel_tol=RTOL_CONFIG_FLOAT, abs_tol=0.0):
                problems.append(f"metadata {k} = {m!r}, expected {v!r}")
        elif m != v:
            problems.append(f"metadata {k} = {m!r}, expected {v!r}")
    return problems


def _init_stack_constants(config, name):
    """MODEL.md's per-stack constants for a parameter name, derived here independently of
    normlab_torch: depth (LayerScale, T-Fixup), S (Admin), beta (DeepNet), tfixup (T-Fixup matrices)."""
    arch, n = config["arch"], config["n_layers"]
    if arch == "encdec":
        N, M = n, config["dec_layers"]
        if name.startswith("enc."):
            return dict(depth=N, S=2 * N, beta=0.87 * (N ** 4 * M) ** (-1 / 16), tfixup=0.67 * N ** -0.25)
        return dict(depth=M, S=3 * M, beta=(12 * M) ** -0.25, tfixup=(9 * M) ** -0.25)
    tf = 0.67 * n ** -0.25 if arch == "encoder" else (9 * n) ** -0.25
    return dict(depth=n, S=2 * n, beta=(8 * n) ** -0.25, tfixup=tf)


def _layer_method(config, name):
    """The method of the layer a parameter belongs to ("h.3.attn.qkv.weight" -> placement[N + 3] in an
    encdec, placement[3] otherwise), or None outside the layers."""
    parts = name.split(".")
    if parts[0] == "enc" and len(parts) > 2 and parts[1] == "h":
        return config["placement"][int(parts[2])]
    if parts[0] == "h":
        off = config["n_layers"] if config["arch"] == "encdec" else 0
        return config["placement"][off + int(parts[1])]
    return None


def check_init(config, tensors):
    """Statistical check of MODEL.md's init schemes on a freshly initialized checkpoint; the constant
    inits (norms, biases, Admin omega, SkipInit / LayerScale gains, ReZero) exactly (to float32)."""
    C, std0 = config["d_model"], config["init_std"]
    scheme = config["init"]
    total_layers = config["n_layers"] + (config["dec_layers"] if config["arch"] == "encdec" else 0)
    problems = []

    def std_ok(name, w, want_std):
        w = np.asarray(w, dtype=np.float64).ravel()
        n = w.size
        s = float(np.sqrt(np.mean(w ** 2)))          # the mean is 0 by construction
        m = float(np.mean(w))
        if abs(s / want_std - 1) > INIT_SIGMAS / math.sqrt(2 * n):
            problems.append(f"{name}: init std {s:.5g}, expected {want_std:.5g} (n={n})")
        if abs(m) > INIT_SIGMAS * want_std / math.sqrt(n):
            problems.append(f"{name}: init mean {m:.3g}, expected 0 (std {want_std:.3g}, n={n})")

    def const_ok(name, w, want, what):
        if not np.allclose(w, want, rtol=1e-6, atol=0.0):
            problems.append(f"{name}: {what} init must be all {want:.7g}, got {np.unique(w)[:4]}")

    placements = config["placement"] if isinstance(config["placement"], list) else [config["placement"]]
    sphere = any(nt.METHODS[q].sphere for q in placements)
    for name, _ in nt.param_specs(config):
        w = tensors[name].numpy().astype(np.float64)
        k = _init_stack_constants(config, name)
        method = _layer_method(config, name)
        if ".hc." in name:   # hyper-connections: the constants exactly, mHC's projection by its std
            if name.endswith(".hc.phi"):
                std_ok(name, w, 1.0 / math.sqrt(w.shape[1]))
            else:
                want = nt.hyper_init(config, name, w.shape, None).numpy()
                if not np.allclose(w, want, rtol=1e-6, atol=0.0):
                    problems.append(f"{name}: init must be {want.ravel()[:6]}..., got {w.ravel()[:6]}...")
        elif nt.is_norm_param(name) and name.endswith(".alpha"):   # DyT / Derf: model.norm_alpha (float32)
            const_ok(name, w, nt.norm_alpha_init(config, name), f"{config['norm']} alpha")
        elif nt.is_norm_param(name):
            want = 1.0 if name.endswith(".weight") else 0.0     # gain 1; bias and Derf's shift 0
            if not np.all(w == want):
                problems.append(f"{name}: init must be all {want}")
        elif name.endswith(".bias"):
            if not np.all(w == 0):
                problems.append(f"{name}: init must be all 0")
        elif name.endswith(".omega"):          # Admin: log (also without data for profile), sqrt, one
            S = k["S"]
            want = {"log": math.sqrt((S + 1) / math.log(S + 1) - 1), "profile": math.sqrt((S + 1) / math.log(S + 1) - 1),
                    "sqrt": math.sqrt(S), "one": 1.0}[config["admin_init"]]
            const_ok(name, w, want, f"admin ({config['admin_init']}, S={S}) omega")
        elif name.endswith(".rezero"):
            const_ok(name, w, 0.0, "ReZero")
        elif name.endswith(".attn.sinks"):     # learned sink logits start at 0
            const_ok(name, w, 0.0, "sink logit")
        elif name == "embed_scale":
            const_ok(name, w, config["embed_scale"], "learned embedding scale")
        elif name == "sz" or name.endswith((".eigen_lr", ".sqk", ".suv")):   # nGPT's stored values
            const_ok(name, w, nt.sphere_init(config, name), "nGPT scale")
        elif name.endswith(".gain"):
            if method == "skipinit":
                const_ok(name, w, 0.0, "SkipInit gain")
            else:
                d = k["depth"]
                const_ok(name, w, 0.1 if d <= 18 else 1e-5 if d <= 24 else 1e-6, f"LayerScale (depth {d}) gain")
        elif sphere and w.ndim == 2:   # nGPT: rows (wte, lm_head, qkv, fc) or columns (proj) of length 1
            lengths = np.sqrt((w * w).sum(axis=0 if name.endswith(".proj.weight") else 1))
            if not np.allclose(lengths, 1.0, rtol=0, atol=1e-6):
                problems.append(f"{name}: nGPT's init is on the unit sphere, lengths {lengths.min():.7g}..{lengths.max():.7g}")
        elif name in ("wte.weight", "enc.wte.weight"):
            if scheme == "tfixup":
                # wte: the decoder stack (gpt / encoder-only: L); enc.wte: the encoder's N; a table shared
                # by encoder and decoder: the encoder's N (the official code's order: the encoder scales it)
                shared = config["arch"] == "encdec" and config.get("shared_embeddings", True)
                d = config["n_layers"] if shared else k["depth"]
                std_ok(name, w, C ** -0.5 * (9 * d) ** -0.25)
            else:
                std_ok(name, w, std0)
        elif name in ("wpe.weight", "enc.wpe.weight", "wtt.weight"):
            std_ok(name, w, std0)
        else:
            if name.endswith("attn.qkv.weight"):
                HS = config.get("head_dim") or C // config["n_heads"]   # (head_dim: heads of another width)
                A, W = config["n_heads"] * HS, config["n_kv_heads"] * HS   # grouped-query: narrower k and v
                blocks = [("q", 0, A), ("k", A, A + W), ("v", A + W, A + 2 * W)]
            elif name.endswith("cross.kv.weight"):
                blocks = [("k", 0, C), ("v", C, 2 * C)]
            elif name.endswith("cross.q.weight"):
                blocks = [("q", 0, C)]
            elif name.endswith("mlp.fc.weight") and config["activation"] in nt.GATED:
                blocks = [("gate", 0, w.shape[0] // 2), ("up", w.shape[0] // 2, w.shape[0])]
            else:
                blocks = [("", 0, w.shape[0])]
            in_layers = method is not None       # head.dense is outside the stacks: no beta, no T-Fixup scale
            # muP: a block's matrix (both dimensions grow with the width; not a head-wise gate's) starts at
            # the constant-std schemes' std / sqrt(d_model / base); Xavier's already falls as 1/sqrt(fan)
            mup = 1.0
            if config.get("mup_base_width", 0) > 0 and in_layers and not (
                    name.endswith(".attn.gate.weight") and config.get("attn_gate") == "headwise"):
                mup = math.sqrt(config["mup_base_width"] / C)
            for tag, r0, r1 in blocks:
                bn = f"{name}[{tag}]" if len(blocks) > 1 else name
                blk = w[r0:r1]
                fan_out, fan_in = r1 - r0, w.shape[1]
                if scheme == "normal":
                    std_ok(bn, blk, std0 * mup)
                elif scheme == "gpt2":
                    std_ok(bn, blk, (std0 / math.sqrt(2 * total_layers) if name.endswith(".proj.weight") else std0) * mup)
                elif scheme in ("xavier", "tfixup"):
                    scale = k["tfixup"] if scheme == "tfixup" and in_layers and tag not in ("q", "k") else 1.0
                    if scheme == "tfixup" and in_layers and tag in ("q", "k"):
                        scale = 2 ** -0.5     # fairseq's Xavier gain for q and k (official T-Fixup code)
                    a = math.sqrt(6.0 / (fan_in + fan_out)) * scale
                    if np.max(np.abs(blk)) > a * (1 + 1e-6):
                        problems.append(f"{bn}: {scheme} init exceeds bound {a:.5g}")
                    std_ok(bn, blk, a / math.sqrt(3.0))
                elif scheme == "deepnet":
                    gain = 1.0 if tag in ("q", "k") or not in_layers else k["beta"]
                    std_ok(bn, blk, gain * math.sqrt(2.0 / (fan_in + fan_out)))
    return problems


# ==================================================================================================
# Perturbed checkpoints
# ==================================================================================================

PERTURB_EMB_STD = 0.3       # wte/wpe: logits of std ~1-2, so the softmax is far from uniform
PERTURB_LINEAR_GAIN = 1.5   # linear weights ~ N(0, gain^2 / fan_in): pre-activations of order 1-2, so
                            # attention is peaked and GELU's tanh form differs measurably from erf's
PERTURB_OMEGA = (1.0, 2.0)  # Admin omega: U(1, 2) per channel (a shortcut that is not 1 nor constant)
PERTURB_GAIN = (0.3, 1.0)   # ReZero / SkipInit / LayerScale: magnitude U(0.3, 1), random sign (init 0 or
                            # tiny would hide the whole branch, and every gradient inside it)
EMBEDDINGS = ("wte.weight", "wpe.weight", "wtt.weight", "enc.wte.weight", "enc.wpe.weight")


def perturb_tensors(tensors, seed, config=None):
    """Move every parameter off its init into a regime with activations of order 1.

    Gains 1 -> 1 + 0.2 N, biases 0 -> 0.1 N, embeddings + N(0, 0.3^2), linear weights + N(0, 1.5^2/fan_in);
    Admin omegas := U(1, 2); ReZero / SkipInit / LayerScale gains := +-U(0.3, 1) (element-wise); sink logits
    0 -> N(0, 1).
    With the (normalized) config: the output projections (`proj`) of a layer without any norm (none,
    rezero, skipinit, tfixup), init + perturbation, are multiplied by 1 / (2 sqrt(S)) (S residual
    sub-layers of its stack; T-Fixup's Xavier init is itself of gain ~0.5): each
    such sub-layer then adds ~1/S to the variance of the stream, which grows by ~e over the stack
    instead of ~3x per sub-layer (an encdec decoder of 3 layers without norms would otherwise reach
    logits of ~1e3, where softmax and loss saturate and the comparison loses its power).
    With init values (gains 1, biases 0, std 0.02 weights, branch gains 0), a forgotten gain or bias, a
    swapped norm or a wrong activation form would be invisible; here they are not.
    tensors: name -> numpy array; returns name -> float32 numpy array.
    """
    rng = np.random.RandomState(seed)
    out = {}
    for name in sorted(tensors):
        w = np.asarray(tensors[name], dtype=np.float64)
        if ".hc." in name:   # hyper-connections: the input-dependent maps (0 at init) and their scales off 0
            if name.endswith((".hc.alpha_scale", ".hc.beta_scale", ".hc.scale")):
                w = rng.uniform(0.05, 0.2, size=w.shape)   # (larger ones grow the streams past float32's reach)
            elif name.endswith((".hc.alpha_fn", ".hc.beta_fn", ".hc.phi")):
                w = w + 0.5 / math.sqrt(w.shape[-1]) * rng.randn(*w.shape)
            else:   # the static weights, the norm's gain, mHC's biases
                w = w + 0.2 * rng.randn(*w.shape)
        elif nt.is_norm_param(name) and name.endswith(".weight"):
            w = w + 0.2 * rng.randn(*w.shape)
        elif name.endswith(".bias"):
            w = w + 0.1 * rng.randn(*w.shape)
        elif nt.is_norm_param(name) and name.endswith(".alpha"):    # DyT / Derf: a positive scale
            w = w * rng.uniform(0.6, 1.6, size=w.shape)
        elif nt.is_norm_param(name) and name.endswith(".shift"):    # Derf: off zero either way
            w = w + 0.3 * rng.randn(*w.shape)
        elif name.endswith(".omega"):
            w = rng.uniform(*PERTURB_OMEGA, size=w.shape)
        elif name == "embed_scale" or name == "sz" or name.endswith((".eigen_lr", ".sqk", ".suv")):
            w = w * rng.uniform(0.6, 1.6, size=w.shape)
        elif name.endswith(".attn.sinks"):       # sink logits: of the scores' order, so a sink takes a real share
            w = w + rng.randn(*w.shape)
        elif name.endswith((".gain", ".rezero")):
            w = rng.uniform(*PERTURB_GAIN, size=w.shape) * rng.choice([-1.0, 1.0], size=w.shape)
        elif name in EMBEDDINGS:
            w = w + PERTURB_EMB_STD * rng.randn(*w.shape)
        else:
            damp = 1.0
            method = _layer_method(config, name) if config is not None else None
            if method is not None and name.endswith(".proj.weight") and not (
                    nt.METHODS[method].in_norm or nt.METHODS[method].out_norm):
                damp = 1.0 / (2.0 * math.sqrt(_init_stack_constants(config, name)["S"]))
            w = damp * (w + PERTURB_LINEAR_GAIN / math.sqrt(w.shape[1]) * rng.randn(*w.shape))
        out[name] = np.ascontiguousarray(w.astype(np.float32))
    return out


def perturb_checkpoint(src, dst, seed):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    with safe_open(str(src), framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    config = nt.normalize_config(json.loads(meta["config"]), strict=False)
    save_file(perturb_tensors(tensors, seed, config), str(dst), metadata=meta)
