#!/usr/bin/env python3
"""measure.py: run one benchmark process on a quiet machine and say how quiet it stayed.

Usage: python3 bench/measure.py [--max-other F] [--retries N] [--quiet-timeout S] -- CMD...

The machine has 2 cores shared with other work, and a neighbour that runs during a measurement
can halve it. So: wait (up to --quiet-timeout s) until less than --max-other cores are busy, run
CMD, and compute `other_cpu`: the cores that processes other than CMD (and its children) kept busy
on average while it ran (from /proc/stat and the children's rusage). If CMD's last stdout line is
JSON, it gets "other_cpu" added (a value CMD reports itself, over just its timed steps, is kept
instead). If other_cpu >= --max-other the run is repeated, up to --retries more times, and the
quietest run is printed. Exit status: CMD's. Standard library only.
"""

import argparse
import json
import resource
import subprocess
import sys
import time


def cpu_ticks():
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def busy_cores(seconds=2.0):
    import os
    b0, _ = cpu_ticks()
    time.sleep(seconds)
    b1, _ = cpu_ticks()
    return (b1 - b0) / os.sysconf("SC_CLK_TCK") / seconds


def wait_quiet(max_busy, timeout, what):
    start = time.monotonic()
    while True:
        b = busy_cores()
        if b < max_busy:
            return b
        if time.monotonic() - start >= timeout:
            print(f"[measure] WARNING: still {b:.2f} cores busy after {timeout:.0f}s; running {what} anyway",
                  file=sys.stderr)
            return b
        top = subprocess.run(["ps", "-eo", "pcpu=,comm=", "--sort=-pcpu"], capture_output=True,
                             text=True).stdout.splitlines()[:2]
        print(f"[measure] {b:.2f} cores busy ({'; '.join(t.strip() for t in top)}), waiting",
              file=sys.stderr)
        time.sleep(10)


def run_once(cmd):
    import os
    hz = os.sysconf("SC_CLK_TCK")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0, _ = cpu_ticks()
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    b1, _ = cpu_ticks()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    other = max(0.0, ((b1 - b0) / hz - own) / wall) if wall > 0 else 0.0
    lines = p.stdout.splitlines()
    rec = None
    if lines:
        try:
            rec = json.loads(lines[-1])
        except json.JSONDecodeError:
            rec = None
    if isinstance(rec, dict):
        rec.setdefault("other_cpu", round(other, 2))
        lines[-1] = json.dumps(rec)
        other = rec["other_cpu"]
    return p.returncode, lines, other


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-other", type=float, default=0.25)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--quiet-timeout", type=float, default=900)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    best = None
    for attempt in range(1 + a.retries):
        if a.quiet_timeout > 0:
            wait_quiet(a.max_other, a.quiet_timeout, " ".join(cmd))
        rc, lines, other = run_once(cmd)
        if rc != 0:
            best = (rc, lines, other)
            break
        if best is None or other < best[2]:
            best = (rc, lines, other)
        if other < a.max_other:
            break
        print(f"[measure] {other:.2f} cores of other work during the run; "
              f"{'retrying' if attempt < a.retries else 'keeping the quietest'}", file=sys.stderr)
    rc, lines, _ = best
    if lines:
        print("\n".join(lines), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
