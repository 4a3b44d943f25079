"""Shared by the Python module's tests (test_module.py, module_sinks.py): one PASS / FAIL line per
check, the failures gathered in FAILED, a command run that raises with its output, and JSON compared
exactly with the first difference named; the JSON an `analyze` command writes."""
import json
import os
import subprocess

FAILED = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        FAILED.append(name)


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def analyze_json(nl, kind, checkpoint, tokens, workdir, label, precision="auto"):
    """`normlab analyze KIND --checkpoint CHECKPOINT --tokens TOKENS --json`, read back (dynamics without its
    update steps, which the module's readings do not take)."""
    js = os.path.join(workdir, f"{label}_{kind}{'' if precision == 'auto' else '_' + precision}.json")
    extra = ["--update-steps", "0"] if kind == "dynamics" else []
    if kind != "jacobian":
        extra += ["--precision", precision]
    run([nl, "analyze", kind, "--checkpoint", checkpoint, "--tokens", tokens, "--json", js, "--force", *extra])
    with open(js) as f:
        return json.load(f)


def same_json(a, b, drop=("input", "model")):
    """Equal as parsed JSON (floats compared exactly; NaN equals NaN, as the command writes it null)."""
    if isinstance(a, dict):
        a = {k: v for k, v in a.items() if k not in drop}
        b = {k: v for k, v in b.items() if k not in drop}
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k in ("input", "model") and path == "$":
                continue
            if k not in a or k not in b:
                return f"{path}.{k}: only in one"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
    elif a != b:
        return f"{path}: {a!r} vs {b!r}"
    return None
