#!/usr/bin/env python3
"""torch_step.py: the PyTorch side of the training-step benchmark (bench/run.sh).

Times one training step (zero_grad + forward + backward + AdamW step) of the normlab model
(docs/MODEL.md: GPT arch, tied embedding, learned positions, LayerNorm, GELU tanh, placement
pre or post) on one benchmark shape on the CPU, in float32 or (--precision bf16) under
torch.autocast("cpu", dtype=torch.bfloat16) (bf16 matmuls on oneDNN, float32 master weights and
optimizer), and prints one JSON line:

  {"impl": "torch-eager"|"torch-compile", "shape", "placement", "precision", "ms", "tokens_per_s",
   "peak_rss_mb", "torch_version", "adamw", "threads", "params", "import_rss_mb",
   "other_cpu"}

other_cpu is the cores other processes kept busy on average during the timed steps (a noisy
neighbour on this 2-core machine shows here). import_rss_mb is the peak RSS right after `import torch` (before the model exists): the part of
peak_rss_mb that is the torch libraries themselves.

Run one (shape, placement, mode) per process: peak_rss_mb is the process's peak RSS.

This is a fast version of tests/torch/normlab_torch.py (the readable oracle): nn.Linear /
nn.LayerNorm modules, F.scaled_dot_product_attention(is_causal=True), AdamW with a multi-tensor
(foreach) or fused kernel, optionally torch.compile(model).

Usage: torch_step.py --shape a|b|c --placement pre|post [--mode eager|compile] [--precision fp32|bf16]
                     [--adamw fused|foreach|forloop] [--iters N] [--warmup N] [--threads N] [--verbose]
"""

import os
import sys

# Thread-pool environment must be in place before torch (and its OpenMP / OpenBLAS) is loaded:
# re-exec ourselves once with it set.
_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}
if any(os.environ.get(k) != v for k, v in _ENV.items()):
    os.environ.update(_ENV)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# name: V, d_model, n_layers, n_heads, T, B  (the same as bench/bench_step.cpp)
SHAPES = {
    "a": (50257, 768, 12, 12, 64, 4),
    "b": (256, 256, 6, 8, 128, 16),
    "c": (256, 128, 48, 4, 64, 8),
}
EPS = 1e-5


class Attention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.qkv = nn.Linear(C, 3 * C)     # columns [q | k | v]
        self.proj = nn.Linear(C, C)

    def forward(self, h):
        B, T, C = h.shape
        NH = self.NH
        # (B, T, 3, NH, HS) -> (3, B, NH, T, HS): head n uses cols n*HS..(n+1)*HS of q, k and v
        qkv = self.qkv(h).view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C, Fd):
        super().__init__()
        self.fc = nn.Linear(C, Fd)
        self.proj = nn.Linear(Fd, C)

    def forward(self, h):
        return self.proj(F.gelu(self.fc(h), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, placement):
        super().__init__()
        self.pre = placement == "pre"
        self.attn = Attention(C, NH)
        self.mlp = MLP(C, 4 * C)
        self.ln_attn = nn.LayerNorm(C, eps=EPS)   # ln_in (pre) or ln_out (post)
        self.ln_mlp = nn.LayerNorm(C, eps=EPS)

    def forward(self, x):
        if self.pre:                               # x + F(LN(x))
            x = x + self.attn(self.ln_attn(x))
            return x + self.mlp(self.ln_mlp(x))
        x = self.ln_attn(x + self.attn(x))         # LN(x + F(x))
        return self.ln_mlp(x + self.mlp(x))


class LlamaAttention(nn.Module):
    """Grouped-query attention with rotary positions (rotate-half, as transformers' Llama), no biases."""
    def __init__(self, C, NH, KVH, T, base=10000.0):
        super().__init__()
        self.NH, self.KVH, HS = NH, KVH, C // NH
        self.qkv = nn.Linear(C, C + 2 * KVH * HS, bias=False)   # [q | k | v]
        self.proj = nn.Linear(C, C, bias=False)
        inv = base ** (-torch.arange(0, HS, 2).float() / HS)
        ang = torch.arange(T).float()[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1), persistent=False)

    def rope(self, x):
        T, h = x.shape[2], x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * self.cos[:T] + rot * self.sin[:T]

    def forward(self, h):
        B, T, C = h.shape
        NH, KVH, HS = self.NH, self.KVH, C // self.NH
        q, k, v = self.qkv(h).split([C, KVH * HS, KVH * HS], dim=-1)
        q = self.rope(q.view(B, T, NH, HS).transpose(1, 2))
        k = self.rope(k.view(B, T, KVH, HS).transpose(1, 2))
        v = v.view(B, T, KVH, HS).transpose(1, 2)
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, C, Fd):
        super().__init__()
        self.fc = nn.Linear(C, 2 * Fd, bias=False)   # [gate | up]
        self.proj = nn.Linear(Fd, C, bias=False)

    def forward(self, h):
        g, u = self.fc(h).chunk(2, dim=-1)
        return self.proj(F.silu(g) * u)


class LlamaBlock(nn.Module):
    """The Llama-family block of bench_step --placement llama: x + F(RMSNorm(x)) with the pieces above,
    d_ff = 8d/3 rounded up to a multiple of 8, H/4 key-value heads."""
    def __init__(self, C, NH, T):
        super().__init__()
        self.attn = LlamaAttention(C, NH, NH // 4 if NH >= 4 else 1, T)
        self.mlp = SwiGLU(C, (8 * C // 3 + 7) // 8 * 8)
        self.ln_attn = nn.RMSNorm(C, eps=EPS)
        self.ln_mlp = nn.RMSNorm(C, eps=EPS)

    def forward(self, x):
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class GPT(nn.Module):
    def __init__(self, V, C, L, NH, T, placement, std=0.02):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.llama = placement == "llama"
        self.wpe = None if self.llama else nn.Embedding(T, C)
        self.h = nn.ModuleList((LlamaBlock(C, NH, T) if self.llama else Block(C, NH, placement)) for _ in range(L))
        self.ln_f = (nn.RMSNorm(C, eps=EPS) if self.llama else nn.LayerNorm(C, eps=EPS)) if placement != "post" else None
        # init "gpt2" (MODEL.md): N(0, std), residual projections N(0, std / sqrt(2L)), biases 0
        for name, p in self.named_parameters():
            if name.endswith(".bias") or ".ln_" in "." + name:
                continue  # LayerNorm (1, 0) and Linear biases (zeroed below) keep their init
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * L) if name.endswith("proj.weight") else std)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids, labels):
        T = ids.shape[1]
        x = self.wte(ids) if self.llama else self.wte(ids) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)     # tied output embedding
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def _machine_busy_s():
    """CPU seconds all cores have been busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_adamw(model, variant, lr=1e-4):
    """AdamW as normlab's default (betas 0.9/0.95, eps 1e-8, decay 0.1 on 2-D tensors only)."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {"fused": {"fused": True}, "foreach": {"foreach": True},
          "forloop": {"foreach": False, "fused": False}}[variant]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="b")
    ap.add_argument("--placement", choices=("pre", "post", "llama"), default="pre")
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: the step's forward and backward under torch.autocast('cpu', bfloat16)")
    ap.add_argument("--adamw", choices=("fused", "foreach", "forloop"), default="fused")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--verbose", action="store_true", help="print every timed step to stderr")
    args = ap.parse_args()

    import_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    V, C, L, NH, T, B = SHAPES[args.shape]
    model = GPT(V, C, L, NH, T, args.placement)
    nparams = sum(p.numel() for p in model.parameters())
    opt = make_adamw(model, args.adamw)
    step_model = torch.compile(model) if args.mode == "compile" else model
    ids = torch.randint(0, V, (B, T))
    labels = torch.randint(0, V, (B, T))

    times = []
    for it in range(args.warmup + args.iters):
        if it == args.warmup:
            busy0, self0, wall0 = _machine_busy_s(), _self_cpu_s(), time.perf_counter()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = step_model(ids, labels)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if it >= args.warmup:
            times.append(dt)
        if not math.isfinite(loss.item()):
            sys.exit(f"non-finite loss at step {it + 1}")
    other_cpu = max(0.0, (_machine_busy_s() - busy0 - (_self_cpu_s() - self0))
                    / (time.perf_counter() - wall0))
    if args.verbose:
        print("step ms:", " ".join(f"{t * 1e3:.1f}" for t in times), file=sys.stderr)
    times.sort()
    median = times[len(times) // 2]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({
        "impl": "torch-" + args.mode, "shape": args.shape, "placement": args.placement,
        "precision": args.precision, "ms": round(median * 1e3, 3), "tokens_per_s": round(B * T / median, 1),
        "peak_rss_mb": round(peak_mb, 1), "torch_version": torch.__version__,
        "adamw": args.adamw, "threads": torch.get_num_threads(), "params": nparams,
        "import_rss_mb": round(import_rss_mb, 1), "other_cpu": round(other_cpu, 2),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }), flush=True)


if __name__ == "__main__":
    main()
