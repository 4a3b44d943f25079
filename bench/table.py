#!/usr/bin/env python3
"""table.py: the markdown table of a training-step benchmark results file (bench/run.sh).

Usage: python3 bench/table.py [bench/results/latest.jsonl]

Reads JSON lines as printed by build/bench/bench_step ("impl": "normlab"), bench/torch_step.py
("impl": "torch-eager" / "torch-compile"), build/bench/sgemm_peak ("impl": "sgemm_peak"), build/bench/fma_peak ("impl": "fma_peak") and
{"impl", "shape", "placement", "error"} lines that run.sh writes for a run that failed. Every line
has a "precision" (fp32 when absent: results from before bf16); a row given several times (run.sh
--repeats) is shown by its median, with the range. One table per precision: for every
(shape, placement) it compares normlab with the faster of the torch modes (by tokens/s; bf16 is
torch.autocast) against the target ratio of the machine's kind (TARGETS_AVX512 for AVX-512 machines,
TARGETS_AVX2 for AVX2-only ones, below); the bf16 table also shows normlab bf16 over normlab fp32.
normlab's GFLOP/s is also shown as a share of the measured FMA peak (fma_peak: float32 FMA for fp32,
bf16 dot products for bf16). Standard library only.
"""

import json
import sys
from pathlib import Path

# normlab tokens/s over best torch tokens/s, per kind of machine (fma_peak measured 512-bit FMAs or
# not). AVX-512 machines: fp32 1.5x PyTorch fp32 on every shape, bf16 1.3x PyTorch autocast-bf16,
# bf16 2x normlab's own fp32 on a and b, the fp32 step at 50% of the FMA peak on a and b. AVX2-only
# machines: fp32 1.3x PyTorch at its best on every shape and 65% of the FMA peak on a and b (bf16
# has no native instructions there: no target).
TARGETS_AVX512 = {"name": "AVX-512 machines",
                  "ratio": {"fp32": {"a": 1.5, "b": 1.5, "c": 1.5}, "bf16": {"a": 1.3, "b": 1.3, "c": 1.3}},
                  "self": {"a": 2.0, "b": 2.0}, "peak": {"a": 0.5, "b": 0.5}}
TARGETS_AVX2 = {"name": "AVX2-only machines",
                "ratio": {"fp32": {"a": 1.3, "b": 1.3, "c": 1.3}, "bf16": {}},
                "self": {}, "peak": {"a": 0.65, "b": 0.65}}
SHAPES = {  # name: V, d_model, n_layers, n_heads, T, B (as bench_step.cpp / torch_step.py)
    "a": (50257, 768, 12, 12, 64, 4),
    "b": (256, 256, 6, 8, 128, 16),
    "c": (256, 128, 48, 4, 64, 8),
}
PLACEMENTS = ("pre", "post", "llama")
TORCH_MODES = ("torch-eager", "torch-compile")
DASH = "—"
NOISY = 0.25   # other_cpu (cores used by other processes during a run, bench/measure.py) that spoils it


def load(path):
    recs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError as e:
            print(f"{path}:{n}: skipped, not JSON ({e})", file=sys.stderr)
    return recs


def fmt(x, digits=1):
    return DASH if x is None else f"{x:,.{digits}f}"


def ok(r):
    return r is not None and "error" not in r and r.get("tokens_per_s")


def median_record(records):
    """The record of median ms among the successful ones (the lower median for an even count), else the
    last one (an error line)."""
    good = sorted((r for r in records if ok(r) and r.get("ms")), key=lambda r: r["ms"])
    return good[(len(good) - 1) // 2] if good else records[-1]


def ms_cell(key, r, repeats):
    """"543.4" or, for a row measured several times, its median and range: "543.4 (446.1-560.2)"."""
    times = repeats.get(key, [])
    if len(times) < 2:
        return fmt(r.get("ms"))
    return f"{fmt(r.get('ms'))} ({fmt(min(times))}-{fmt(max(times))})"


def make_table(recs):
    groups = {}
    sgemm = None
    fma = {}
    meta = None
    torch_version = None
    for r in recs:
        if r.get("impl") == "sgemm_peak":
            sgemm = r
            continue
        if r.get("impl") == "fma_peak":
            fma = r
            continue
        if r.get("impl") == "meta":
            meta = r
            continue
        groups.setdefault((r.get("impl"), r.get("precision", "fp32"), r.get("shape"), r.get("placement")), []).append(r)
        if r.get("torch_version"):
            torch_version = r["torch_version"]
    # a row measured several times (run.sh --repeats, in rotation with its peers): its median
    by_key = {k: median_record(v) for k, v in groups.items()}
    repeats = {k: [r["ms"] for r in v if ok(r) and r.get("ms")] for k, v in groups.items()}
    most = max((len(v) for v in repeats.values()), default=0)

    out = []
    if sgemm and "gflops" in sgemm:
        out.append(f"Machine sgemm peak (cblas_sgemm {sgemm.get('n', 2048)}^3, OpenBLAS, median of 5): "
                   f"**{sgemm['gflops']:.1f} GFLOP/s**")
    else:
        out.append("Machine sgemm peak: not measured")
    # the FMA peak of each precision's arithmetic: the wider of the float32 FMAs, the bf16 dot product
    # (run.sh --isa avx2: an AVX2 machine emulated on an AVX-512 one, so the 256-bit peak and the
    # AVX2-only machines' goals)
    avx2_only = bool(meta) and meta.get("isa") == "avx2"
    fma_peak = {"fp32": fma.get("fp32_256") if avx2_only else
                max(filter(None, [fma.get("fp32_256"), fma.get("fp32_512")]), default=None),
                "bf16": None if avx2_only else fma.get("bf16_dot")}
    goals = TARGETS_AVX2 if avx2_only or not fma.get("fp32_512") else TARGETS_AVX512
    TARGETS, SELF_TARGETS, PEAK_TARGETS = goals["ratio"], goals["self"], goals["peak"]
    if fma:
        out.append(f"Machine FMA peak (fma_peak, {fma.get('threads')} threads, registers only): float32 "
                   f"{fmt(fma.get('fp32_256'))} GFLOP/s on 256-bit and {fmt(fma.get('fp32_512'))} on 512-bit "
                   f"vectors; bf16 dot products (vdpbf16ps) {fmt(fma.get('bf16_dot'))}")
    else:
        out.append("Machine FMA peak: not measured")
    if meta and meta.get("cpu"):
        out.append(f"CPU: {meta['cpu']}")
    if avx2_only:
        kernels = sorted({r.get("kernels") for r in recs if r.get("impl") == "normlab" and r.get("kernels")})
        caps = sorted({r.get("cpu_capability") for r in recs if r.get("cpu_capability")})
        out.append("**AVX2 emulated on this AVX-512 CPU** (`bench/run.sh --isa avx2`): normlab's kernels "
                   f"{', '.join(kernels) or '?'}, OpenBLAS Haswell; PyTorch's CPU capability {', '.join(caps) or '?'}, "
                   "MKL and oneDNN capped at AVX2; % of FMA peak against the 256-bit peak")
    if meta:
        out.append(f"normlab at {meta.get('commit')}{' + uncommitted src/ changes' if meta.get('src_dirty') else ''}, "
                   f"{meta.get('date')}, {meta.get('nproc')} cores")
    if torch_version:
        out.append(f"PyTorch {torch_version} (CPU, best of eager / torch.compile)")
    if most > 1:
        out.append(f"Each row: the median of up to {most} measurements taken in rotation (normlab, eager, compile, "
                   "normlab, ...), their range in brackets; the ratio is of the medians.")
    out.append("")
    met_count = total = 0
    failures = []
    for prec in ("fp32", "bf16"):
        if not any(k[1] == prec for k in by_key):
            continue
        out.append(f"**{prec}**" + (" (PyTorch: torch.autocast('cpu', dtype=torch.bfloat16))" if prec == "bf16" else ""))
        out.append("")
        out.append("| shape | placement | normlab ms | normlab tok/s | normlab GFLOP/s | normlab peak MB "
                   "| torch ms | torch tok/s | torch peak MB | torch mode | eager / compile ms "
                   "| ratio (tok/s) | target | met | % of FMA peak | target |"
                   + (" bf16 / fp32 normlab | target |" if prec == "bf16" else ""))
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"
                   + ("---:|---:|" if prec == "bf16" else ""))
        shapes = [sh for sh in SHAPES if any(k[1] == prec and k[2] == sh for k in by_key)]
        for s in shapes:
            for p in PLACEMENTS:
                nl = by_key.get(("normlab", prec, s, p))
                torch_recs = {m: by_key.get((m, prec, s, p)) for m in TORCH_MODES}
                if nl is None and all(v is None for v in torch_recs.values()):
                    continue
                for r in [nl, *torch_recs.values()]:
                    if r is not None and "error" in r:
                        failures.append(f"failed: {r.get('impl')} {prec} {s}/{p}: {r['error']}")
                good = [r for r in torch_recs.values() if ok(r)]
                best = max(good, key=lambda r: r["tokens_per_s"]) if good else None
                modes_ms = " / ".join(fmt(r.get("ms")) if ok(r) else ("failed" if r else DASH)
                                      for r in torch_recs.values())
                target = TARGETS[prec].get(s)
                ratio = nl["tokens_per_s"] / best["tokens_per_s"] if ok(nl) and best else None
                met = DASH if ratio is None or target is None else ("yes" if ratio >= target else "no")
                if ratio is not None and target is not None:
                    total += 1
                    met_count += ratio >= target
                noisy = [r for r in [nl, best] if ok(r) and (r.get("other_cpu") or 0) >= NOISY]
                if noisy:
                    met += " (noisy)"
                    failures.append(f"{prec} {s}/{p}: measured while other processes used "
                                    + ", ".join(f"{r['other_cpu']:.2f} cores ({r['impl']})" for r in noisy))
                nlg = nl if ok(nl) else {}
                bg = best or {}
                cells = [
                    s, p,
                    ms_cell(("normlab", prec, s, p), nlg, repeats), fmt(nlg.get("tokens_per_s"), 0),
                    fmt(nlg.get("gflops")), fmt(nlg.get("peak_rss_mb"), 0),
                    ms_cell((bg.get("impl"), prec, s, p), bg, repeats), fmt(bg.get("tokens_per_s"), 0),
                    fmt(bg.get("peak_rss_mb"), 0),
                    bg.get("impl", "torch-").removeprefix("torch-") or DASH, modes_ms,
                    DASH if ratio is None else f"{ratio:.2f}x",
                    DASH if target is None else f"{target:g}x", met,
                ]
                share = nl["gflops"] / fma_peak[prec] if ok(nl) and nl.get("gflops") and fma_peak[prec] else None
                pt = PEAK_TARGETS.get(s) if prec == "fp32" else None
                cells += [DASH if share is None else f"{100 * share:.0f}%",
                          DASH if pt is None else f"{100 * pt:.0f}%" + ("" if share is None else
                                                                        (" yes" if share >= pt else " no"))]
                if share is not None and pt is not None:
                    total += 1
                    met_count += share >= pt
                if prec == "bf16":
                    fp = by_key.get(("normlab", "fp32", s, p))
                    self_ratio = nl["tokens_per_s"] / fp["tokens_per_s"] if ok(nl) and ok(fp) else None
                    st = SELF_TARGETS.get(s)
                    cells += [DASH if self_ratio is None else f"{self_ratio:.2f}x", DASH if st is None else f"{st:g}x"]
                    if self_ratio is not None and st is not None:
                        total += 1
                        met_count += self_ratio >= st
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append("")
    imp = [r["import_rss_mb"] for r in by_key.values() if ok(r) and r.get("import_rss_mb")]
    if imp:
        out.append(f"torch peak MB includes ~{max(imp):.0f} MB already resident right after `import torch` "
                   "(the PyPI wheel's libraries), before any model exists.")
    out.append(f"Targets ({goals['name']}) met: {met_count} of {total}.")
    for f in failures:
        out.append(f"- {f}")
    return "\n".join(out)


def main(argv):
    path = argv[1] if len(argv) > 1 else str(Path(__file__).resolve().parent / "results" / "latest.jsonl")
    print(make_table(load(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
