"""safetensors_interop.py: checks normlab's safetensors files against the official PyPI package.

  python safetensors_interop.py write OUT.safetensors
      writes known_tensors() and KNOWN_METADATA (below) with safetensors.numpy.save_file
  python safetensors_interop.py check IN.safetensors EXPECT.json
      loads IN with safetensors.safe_open(framework="numpy") and compares it with EXPECT.json:
      {"name": {"dtype": "float32", "shape": [...], "values": [flat, row-major]}, ...,
       "__metadata__": {"key": "value"}}   (no "__metadata__" = the file must have none)
      Values are compared exactly. Exits 1 with one line per mismatch.

Used by the Interop tests in test_safetensors.cpp (which skip unless NORMLAB_PYTHON is set).
"""

import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


def known_tensors():
    return {
        "a": (np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5)),
        "b": np.array([[1, -2], [3, 4]], dtype=np.int32),
        "c": np.array([1.25], dtype=np.float64),
    }


KNOWN_METADATA = {"config": '{"k": 1}'}


def write(out_path):
    save_file(known_tensors(), out_path, metadata=KNOWN_METADATA)


def check(in_path, expect_path):
    with open(expect_path, encoding="utf-8") as f:
        expect = json.load(f)
    expected_metadata = expect.pop("__metadata__", {})
    problems = []
    with safe_open(in_path, framework="numpy") as f:
        metadata = f.metadata() or {}
        if metadata != expected_metadata:
            problems.append(f"metadata is {metadata!r}, expected {expected_metadata!r}")
        names = set(f.keys())
        if names != set(expect):
            problems.append(f"tensor names are {sorted(names)}, expected {sorted(expect)}")
        for name in sorted(names & set(expect)):
            want = expect[name]
            got = f.get_tensor(name)
            if got.dtype.name != want["dtype"]:
                problems.append(
                    f"tensor '{name}' has dtype {got.dtype.name}, expected {want['dtype']}")
                continue
            if list(got.shape) != list(want["shape"]):
                problems.append(
                    f"tensor '{name}' has shape {list(got.shape)}, expected {want['shape']}")
                continue
            # tolist() gives exact Python ints and floats (float32 widens exactly to float64).
            values = got.ravel().tolist()
            if values != want["values"]:
                problems.append(f"tensor '{name}' values {values} != expected {want['values']}")
    for problem in problems:
        print(f"{in_path}: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        write(argv[2])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
