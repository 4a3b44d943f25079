"""Runs the module's example headless (python/examples/instruments_by_layer.py, README "Python") and
checks that its figure was written: a PNG of the size the script asks for, two panels' worth of ink.

    python tests/python/run_example.py EXAMPLE OUT.png
"""
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402

example, out = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(out), exist_ok=True)
if os.path.exists(out):
    os.remove(out)
env = dict(os.environ, MPLBACKEND="Agg")
env.pop("DISPLAY", None)
p = subprocess.run([sys.executable, example, "--out", out], env=env, capture_output=True, text=True)
print(p.stdout, p.stderr[-2000:], sep="\n")
if p.returncode != 0:
    sys.exit(f"FAIL the example exited with {p.returncode}")
img = mpimg.imread(out)  # (H, W, 4) floats
h, w = img.shape[:2]
ink = float(np.mean(img[..., :3] < 0.9))  # the share of pixels that are not (near) white
ok = (h, w) == (440, 1210) and ink > 0.02
print(("PASS" if ok else "FAIL") + f" figure {out}: {w} x {h} pixels, {ink:.1%} ink")
sys.exit(0 if ok else 1)
