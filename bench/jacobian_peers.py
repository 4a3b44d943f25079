#!/usr/bin/env python3
"""jacobian_peers.py: the PyTorch and JAX side of the Jacobian benchmark (bench/run_jacobian.sh).

The function is layer 0 of a normlab checkpoint (docs/MODEL.md): one pre-LN GPT block
x -> x + attn(ln(x)) -> x + mlp(ln(x)), LayerNorm (eps from the checkpoint's config), GELU tanh,
causal attention, in float64, as a map R^(T d) -> R^(T d), at the point x0 = wte[ids] + wpe[:T]
with ids = (7 t + 3) % 256 (the same input as build/bench/bench_jacobian). The float32 parameters
are widened to float64 exactly as normlab does.

Measurements (median of --iters after --warmup, in one process):
  build      the full (T d) x (T d) Jacobian: torch.func.jacfwd or jacrev (--mode), or
             jax.jit(jax.jacfwd(f))
  build_svd  the Jacobian and all its singular values: torch.linalg.svdvals(jac(f)(x0)), or
             jax.jit(lambda x: jnp.linalg.svd(jax.jacfwd(f)(x), compute_uv=False))

Prints one JSON line: {"impl": "torch"|"jax", "mode", "measurement", "ms", "times_ms", "n",
"largest", "smallest" (build_svd), "jac_max_abs_diff" / "jac_max_abs" (with --compare-jacobian, the
row-major float64 J that bench_jacobian --dump-jacobian wrote), versions, threads, "other_cpu"}.

Usage: jacobian_peers.py --impl torch|jax --checkpoint M.safetensors --measurement build|build_svd
                         [--mode jacfwd|jacrev] [--iters 3] [--warmup 1] [--threads 2]
                         [--compare-jacobian J.f64]
"""

import os
import sys

# torch's thread pools read their environment when loaded: re-exec once with it set (as torch_step.py)
_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}
if "torch" in sys.argv and any(os.environ.get(k) != v for k, v in _ENV.items()):
    os.environ.update(_ENV)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def load_checkpoint(path):
    """safetensors without the package: {name: float64 ndarray}, and the model config."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        assert h["dtype"] == "F32", (name, h["dtype"])
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(h["shape"]).astype(np.float64)
    return out, json.loads(meta["config"])


def machine_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def self_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, warmup, iters):
    """(median ms, all ms, other_cpu) of fn(), which must block until its result is ready."""
    result = None
    for _ in range(warmup):
        result = fn()
    busy0, self0, w0 = machine_busy_s(), self_cpu_s(), time.perf_counter()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    wall = time.perf_counter() - w0
    other = max(0.0, (machine_busy_s() - busy0 - (self_cpu_s() - self0)) / wall)
    s = sorted(times)
    med = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
    return med, times, other, result


def setup(args):
    P, cfg = load_checkpoint(args.checkpoint)
    T, C, NH = cfg["seq_len"], cfg["d_model"], cfg["n_heads"]
    placement = cfg["placement"]
    placement = placement[0] if isinstance(placement, list) else placement
    assert cfg["n_layers"] == 1 and placement == "pre" and cfg["norm"] == "layernorm" \
        and cfg["activation"] == "gelu" and cfg["arch"] == "gpt", cfg
    ids = np.array([(7 * t + 3) % 256 for t in range(T)])
    x0 = P["wte.weight"][ids] + P["wpe.weight"][:T]
    blk = {k[len("h.0."):]: v for k, v in P.items() if k.startswith("h.0.")}
    return blk, x0.reshape(-1), (T, C, NH, float(cfg["eps"]))


def run_torch(args, blk, x0, dims):
    import torch
    import torch.nn.functional as F

    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(args.threads)
    T, C, NH, eps = dims
    HS = C // NH
    p = {k: torch.from_numpy(v.copy()) for k, v in blk.items()}
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def block(xflat):
        x = xflat.view(T, C)
        h = F.layer_norm(x, (C,), p["attn.ln_in.weight"], p["attn.ln_in.bias"], eps)
        qkv = F.linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"])
        q, k, v = qkv.view(T, 3, NH, HS).permute(1, 2, 0, 3)       # each (NH, T, HS)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(0, 1).reshape(T, C)
        x = x + F.linear(y, p["attn.proj.weight"], p["attn.proj.bias"])
        h = F.layer_norm(x, (C,), p["mlp.ln_in.weight"], p["mlp.ln_in.bias"], eps)
        u = F.gelu(F.linear(h, p["mlp.fc.weight"], p["mlp.fc.bias"]), approximate="tanh")
        x = x + F.linear(u, p["mlp.proj.weight"], p["mlp.proj.bias"])
        return x.reshape(-1)

    jac = {"jacfwd": torch.func.jacfwd, "jacrev": torch.func.jacrev}[args.mode](block)
    x = torch.from_numpy(x0.copy())
    if args.measurement == "build":
        fn = lambda: jac(x)  # noqa: E731
    else:
        fn = lambda: torch.linalg.svdvals(jac(x))  # noqa: E731
    with torch.no_grad():
        med, times, other, res = timed(fn, args.warmup, args.iters)
    rec = {"impl": "torch", "mode": args.mode, "torch_version": torch.__version__,
           "threads": torch.get_num_threads()}
    if args.measurement == "build":
        rec["contiguous"] = bool(res.is_contiguous())
        J = res.numpy()
    else:
        sv = res.numpy()
        J = None
    return rec, med, times, other, (J if args.measurement == "build" else None), \
        (None if args.measurement == "build" else sv)


def run_jax(args, blk, x0, dims):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    T, C, NH, eps = dims
    HS = C // NH
    p = {k: jnp.asarray(v) for k, v in blk.items()}
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + eps) * w + b

    def block(xflat):
        x = xflat.reshape(T, C)
        h = ln(x, p["attn.ln_in.weight"], p["attn.ln_in.bias"])
        qkv = h @ p["attn.qkv.weight"].T + p["attn.qkv.bias"]
        q, k, v = qkv.reshape(T, 3, NH, HS).transpose(1, 2, 0, 3)
        s = (q @ k.transpose(0, 2, 1)) / math.sqrt(HS)
        a = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
        y = (a @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p["attn.proj.weight"].T + p["attn.proj.bias"]
        h = ln(x, p["mlp.ln_in.weight"], p["mlp.ln_in.bias"])
        u = jax.nn.gelu(h @ p["mlp.fc.weight"].T + p["mlp.fc.bias"], approximate=True)
        x = x + u @ p["mlp.proj.weight"].T + p["mlp.proj.bias"]
        return x.reshape(-1)

    if args.mode != "jacfwd":
        sys.exit("jax: only --mode jacfwd")
    jac = jax.jacfwd(block)
    if args.measurement == "build":
        f = jax.jit(jac)
    else:
        f = jax.jit(lambda x: jnp.linalg.svd(jac(x), compute_uv=False))
    x = jnp.asarray(x0)
    med, times, other, res = timed(lambda: f(x).block_until_ready(), args.warmup, args.iters)
    rec = {"impl": "jax", "mode": "jacfwd", "jax_version": jax.__version__,
           "devices": str(jax.devices())}
    out = np.asarray(res)
    return rec, med, times, other, (out if args.measurement == "build" else None), \
        (None if args.measurement == "build" else out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("torch", "jax"), required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--measurement", choices=("build", "build_svd"), required=True)
    ap.add_argument("--mode", choices=("jacfwd", "jacrev"), default="jacfwd")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--compare-jacobian", help="row-major float64 J from bench_jacobian --dump-jacobian")
    args = ap.parse_args()

    blk, x0, dims = setup(args)
    run = run_torch if args.impl == "torch" else run_jax
    rec, med, times, other, J, sv = run(args, blk, x0, dims)
    n = x0.size
    rec.update({"measurement": args.measurement, "n": n, "ms": round(med, 3),
                "times_ms": [round(t, 3) for t in times], "iters": args.iters, "warmup": args.warmup})
    if sv is not None:
        rec["largest"] = [float(s) for s in sv[:5]]
        rec["smallest"] = [float(s) for s in sv[::-1][:5]]
    if J is not None and args.compare_jacobian:
        ref = np.fromfile(args.compare_jacobian, dtype="<f8").reshape(n, n)
        rec["jac_max_abs_diff"] = float(np.max(np.abs(np.asarray(J) - ref)))
        rec["jac_max_abs"] = float(np.max(np.abs(ref)))
    rec["other_cpu"] = round(other, 2)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
