#!/usr/bin/env python3
"""loss_curves.py: two training runs' validation-loss curves side by side (bench/bf16_loss.sh: fp32
and bf16), as a markdown table, and the final difference against the mixed-precision accuracy
target (bf16's final validation loss within 0.02 nats of fp32's).

Usage: python3 bench/loss_curves.py FP32_METRICS.jsonl BF16_METRICS.jsonl [--target 0.02]
Exit status 0 whether or not the target is met (this is a report, not a test); 1 on unreadable input.
Standard library only.
"""

import argparse
import json
import sys


def curve(path):
    """{step: validation loss}, and the final training record, of one metrics.jsonl."""
    val, train, done = {}, {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if r.get("type") == "val":
                val[r["step"]] = r["loss"]
            elif r.get("type") == "train":
                train[r["step"]] = r["loss"]
            elif r.get("type") == "summary":
                done = r
    if not val:
        sys.exit(f"{path}: no validation records (a run that did not reach its first evaluation?)")
    return val, train, done


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fp32")
    ap.add_argument("bf16")
    ap.add_argument("--target", type=float, default=0.02, help="allowed |final val loss difference|, nats")
    args = ap.parse_args()
    v32, t32, d32 = curve(args.fp32)
    v16, t16, d16 = curve(args.bf16)
    steps = sorted(set(v32) & set(v16))
    print("| step | fp32 val loss | bf16 val loss | bf16 - fp32 | fp32 train loss | bf16 train loss |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s in steps:
        tr = lambda t: f"{t[s]:.4f}" if s in t else "—"  # noqa: E731
        print(f"| {s} | {v32[s]:.4f} | {v16[s]:.4f} | {v16[s] - v32[s]:+.4f} | {tr(t32)} | {tr(t16)} |")
    last = steps[-1]
    diff = v16[last] - v32[last]
    complete = all(d is not None for d in (d32, d16))
    print()
    verdict = "met" if abs(diff) <= args.target else "NOT met"
    if not complete:
        verdict += " at this step only: the runs did not finish, this is NOT the final comparison"
    print(f"{'Final' if complete else 'Last common evaluation'} (step {last}): fp32 {v32[last]:.4f}, "
          f"bf16 {v16[last]:.4f}, difference {diff:+.4f} nats; target |difference| <= {args.target:g}: {verdict}")
    for name, d in (("fp32", d32), ("bf16", d16)):
        if d and d.get("tokens_per_s"):
            print(f"{name}: {d.get('steps')} steps, {d['tokens_per_s']:.0f} tokens/s (1 thread, niced, shared machine: not a timing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
