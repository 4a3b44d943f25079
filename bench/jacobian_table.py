#!/usr/bin/env python3
"""jacobian_table.py: the markdown table of a Jacobian benchmark results file (bench/run_jacobian.sh).

Usage: python3 bench/jacobian_table.py [bench/results/jacobian.jsonl]

Reads the JSON lines of build/bench/bench_jacobian ("impl": "normlab"), bench/jacobian_peers.py
("impl": "torch" / "jax") and the "meta" and error lines run_jacobian.sh writes. Per measurement it
compares normlab with the faster peer against the target; the peers' time for "extremes" is their
full path (build_svd). Then the agreement of the singular values (5 largest, 5 smallest: normlab's
dense SVD and its Lanczos extremes against each peer's dense SVD) and of the Jacobians themselves.
Standard library only.
"""

import json
import sys
from pathlib import Path

TARGETS = {"build": 10.0, "build_svd": 2.0, "extremes": 20.0}
LABELS = {"build": "(1) full Jacobian",
          "build_svd": "(2) Jacobian + all singular values",
          "extremes": "(3) 5 largest + 5 smallest singular values"}
NOISY = 0.25
DASH = "—"


def load(path):
    recs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if line:
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                print(f"{path}:{n}: skipped, not JSON ({e})", file=sys.stderr)
    return recs


def fmt(x, digits=1):
    return DASH if x is None else f"{x:,.{digits}f}"


def ms(r):
    return r.get("ms") if r and "error" not in r else None


def max_rel(a, b):
    if not a or not b or len(a) != len(b):
        return None
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def make_table(recs):
    meta, by = None, {}
    for r in recs:
        if r.get("impl") == "meta":
            meta = r
        else:
            by[(r.get("impl"), r.get("mode", "-"), r.get("measurement"))] = r   # a later line wins

    def get(impl, what, mode=None):
        if mode:
            return by.get((impl, mode, what))
        c = [r for (i, m, w), r in by.items() if i == impl and w == what]
        c = [r for r in c if ms(r) is not None] or c
        return min(c, key=lambda r: ms(r) or float("inf")) if c else None

    out = []
    nl_any = get("normlab", "build") or {}
    tv = next((r["torch_version"] for r in by.values() if r.get("torch_version")), None)
    jv = next((r["jax_version"] for r in by.values() if r.get("jax_version")), None)
    if meta:
        out.append(f"normlab at {meta.get('commit')}{' + uncommitted src/ changes' if meta.get('src_dirty') else ''}, "
                   f"{meta.get('date')}, {meta.get('nproc')} cores; median of {meta.get('iters')} after "
                   f"{meta.get('warmup')} warm-up, one process per measurement")
    out.append(f"One pre-LN GPT block, d={nl_any.get('d', 128)}, T={nl_any.get('T', 32)}, "
               f"{nl_any.get('heads', 4)} heads, d_ff={nl_any.get('d_ff', 512)}, float64: "
               f"J is {nl_any.get('n', 4096)} x {nl_any.get('n', 4096)}. "
               f"Peers: PyTorch {tv or 'n/a'} (torch.func, 2 threads), JAX {jv or 'not run'} (jit).")
    out.append("")
    out.append("| measurement | normlab ms | torch ms | torch jacfwd / jacrev ms | jax ms | speedup vs faster peer "
               "| target | met |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---|")
    met_count = 0
    noisy = []
    for what in ("build", "build_svd", "extremes"):
        nl = get("normlab", what)
        peer_what = "build_svd" if what == "extremes" else what
        t = get("torch", peer_what)
        j = get("jax", peer_what)
        fwd = ms(by.get(("torch", "jacfwd", "build"))) if what == "build" else None
        rev = ms(by.get(("torch", "jacrev", "build"))) if what == "build" else None
        split = f"{fmt(fwd)} / {fmt(rev)}" if what == "build" else \
            (f"({t.get('mode')})" if t and "mode" in t else DASH)
        peers = [x for x in (ms(t), ms(j)) if x is not None]
        best = min(peers) if peers else None
        speed = best / ms(nl) if best is not None and ms(nl) else None
        met = speed is not None and speed >= TARGETS[what]
        incomplete = what == "extremes" and nl and (not nl.get("converged") or not nl.get("smallest"))
        met = met and not incomplete
        met_count += met
        label = LABELS[what] + (" (peers: full path = (2))" if what == "extremes" else "")
        out.append(f"| {label} | {fmt(ms(nl))} | {fmt(ms(t))} | {split} | {fmt(ms(j))} "
                   f"| {fmt(speed, 2) + 'x' if speed else DASH} | {TARGETS[what]:g}x | "
                   f"{'yes' if met else ('no' if speed else DASH)}"
                   f"{' (Lanczos did not converge' + ('; no smallest values' if not nl.get('smallest') else '') + ')' if incomplete else ''} |")
        for r in (nl, t, j):
            if r and r.get("other_cpu", 0) >= NOISY:
                noisy.append(f"{r['impl']} {r.get('mode', '')} {r.get('measurement')}: other_cpu {r['other_cpu']}")
            if r and "error" in r:
                noisy.append(f"{r['impl']} {r.get('measurement')} FAILED: {r['error']}")
    out.append("")
    out.append(f"Targets met: {met_count} of 3.")
    nlb = get("normlab", "build")
    if nlb and "transpose_ms" in nlb:
        out.append(f"normlab's build yields J column-major (tangent outputs); a row-major copy adds "
                   f"{nlb['transpose_ms']:.0f} ms. torch's jacfwd result is "
                   f"{'a contiguous tensor' if (by.get(('torch', 'jacfwd', 'build')) or {}).get('contiguous') else 'a non-contiguous (transposed) view'}.")
    ex = get("normlab", "extremes")
    if ex and "error" not in ex:
        out.append(f"normlab Lanczos: converged = {ex.get('converged')}, {ex.get('products')} J^T J products "
                   f"(one jvp + one vjp each) per run.")
    if noisy:
        out.append("Noisy or failed runs (other_cpu = cores other processes used meanwhile): " + "; ".join(noisy) + ".")

    # agreement
    out.append("")
    out.append("Singular value agreement (max relative difference over the 5 largest / the 5 smallest; "
               "reference: the peer's dense SVD):")
    out.append("")
    out.append("| normlab | peer | sigma_max rel diff | 5 largest | sigma_min rel diff | 5 smallest |")
    out.append("|---|---|---:|---:|---:|---:|")
    nsv = get("normlab", "build_svd")
    for nl_name, nl in (("dense SVD", nsv), ("Lanczos extremes", ex)):
        for peer in ("torch", "jax"):
            p = get(peer, "build_svd")
            if not nl or not p or "largest" not in nl or "largest" not in p:
                continue
            e = lambda a, b: DASH if max_rel(a, b) is None else f"{max_rel(a, b):.1e}"  # noqa: E731
            out.append(f"| {nl_name} | {peer} dense | {e(nl['largest'][:1], p['largest'][:1])} "
                       f"| {e(nl['largest'], p['largest'])} | {e(nl['smallest'][:1], p['smallest'][:1])} "
                       f"| {e(nl['smallest'], p['smallest'])} |")
    if nsv and "largest" in nsv:
        out.append("")
        out.append(f"normlab dense: sigma_max = {nsv['largest'][0]:.10g}, sigma_min = {nsv['smallest'][0]:.10g}"
                   + (f"; Lanczos: sigma_max = {ex['largest'][0]:.10g}, sigma_min = {ex['smallest'][0]:.10g}"
                      if ex and ex.get("largest") and ex.get("smallest") else ""))
    jl = [r for r in by.values() if "jac_max_abs_diff" in r]
    if jl:
        out.append("Jacobians entrywise: " + "; ".join(
            f"{r['impl']} {r['mode']}: max |J_peer - J_normlab| = {r['jac_max_abs_diff']:.1e} "
            f"(max |J| = {r['jac_max_abs']:.3g})" for r in jl) + ".")
    return "\n".join(out)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/jacobian.jsonl"
    print(make_table(load(path)))


if __name__ == "__main__":
    main()
