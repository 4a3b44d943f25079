"""Results of the instruments and of runs and studies, as Python data and as pandas tables.

``Results`` holds an instrument's document (the command's ``--json``, parsed) and turns its per-layer
(per-head, per-claim) records into a DataFrame; ``read_results`` reads what ``normlab train`` and
``normlab compare`` wrote. pandas is optional: only ``to_pandas`` and ``read_results`` import it.
"""
from __future__ import annotations

import json
import os
from typing import Any


def _encdec_layers(doc) -> list:  # both stacks' layers, each record naming its stack
    return [{"stack": stack, **layer} for stack in ("encoder", "decoder") for layer in doc[stack]["layers"]]


# each instrument's default table, and every table it has: the record list the document keeps under
# that key, or a function of the document (an encoder-decoder's documents, "<kind>_encdec")
_TABLES = {
    "jacobian": ("blocks", ("blocks", "norm_sites")),
    "attention": ("per_head", ("per_head",)),
    "dynamics": ("layers", ("layers", "tokens", "param_grad_norms", "rank_collapse")),
    "sinks": ("streams", ("streams", "heads", "massive", "gradients", "attn_input_gradients", "norm_gains")),
    "theory": (None, (None,)),      # the document is the list of claims
    "jacobian_encdec": ("ends", ("ends",)),
    "dynamics_encdec": ("layers", ("layers", "param_grad_norms")),
}
_DERIVED = {
    # the decoder's end-to-end Jacobian (its input to its output) and the source's (the encoder's input to it)
    ("jacobian_encdec", "ends"): lambda doc: [{"end": end, **doc[end]} for end in ("decoder", "source")],
    ("dynamics_encdec", "layers"): _encdec_layers,
    # one row per (layer, massive dimension)
    ("sinks", "massive"): lambda doc: [{"layer": s["layer"], **d} for s in doc["streams"] for d in s["massive"]],
}


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("to_pandas and read_results need pandas (pip install pandas)") from e
    return pandas


class Results:
    """An instrument's results: ``data`` is the document the command writes with ``--json`` (the same
    numbers, bit for bit), indexable like it (``r["layers"]``); ``to_pandas()`` makes its main table a
    DataFrame (one row per layer, head, block or claim; nested records flattened with "." names)."""

    def __init__(self, kind: str, text: str):
        self.kind = kind
        self.data: Any = json.loads(text)

    def __getitem__(self, key):
        return self.data[key]

    def __contains__(self, key) -> bool:
        return key in self.data

    def keys(self):
        return self.data.keys() if isinstance(self.data, dict) else range(len(self.data))

    def __repr__(self) -> str:
        n = len(self.records())
        return f"normlab.Results({self.kind}: {n} records; .data, .to_pandas())"

    @property
    def tables(self) -> tuple:
        """The names ``to_pandas(table=...)`` takes."""
        return _TABLES[self.kind][1]

    def records(self, table: str | None = None) -> list:
        default, names = _TABLES[self.kind]
        table = default if table is None else table
        if table not in names:
            raise KeyError(f"{self.kind} results have the tables {names}, not {table!r}")
        if (self.kind, table) in _DERIVED:
            return _DERIVED[(self.kind, table)](self.data)
        return self.data if table is None else self.data.get(table, [])

    def to_pandas(self, table: str | None = None):
        """The table as a DataFrame (default: blocks / per_head / layers / the claims)."""
        return _pandas().json_normalize(self.records(table), sep=".")


def _read_jsonl(path: str) -> list:
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {n} is not JSON ({e.msg}); a run killed mid-write leaves at "
                                     f"most its last line torn") from None
    return records


def read_results(path: str | os.PathLike, what: str = "runs"):
    """A results file as a DataFrame, whatever wrote it:

    - a study directory of ``normlab compare`` (or its results.json): one row per run (``what="runs"``),
      or one row per logged point of every run's curves (``what="curves"``);
    - a training run's directory (or its metrics.jsonl): one row per record, its ``type`` a column
      (train, val, layers, summary, ...; docs/USAGE.md "Per-layer logs during training").
    """
    pd = _pandas()
    p = os.path.expanduser(os.fspath(path))
    if os.path.isdir(p):
        if os.path.exists(os.path.join(p, "results.json")):
            p = os.path.join(p, "results.json")
        elif os.path.exists(os.path.join(p, "metrics.jsonl")):
            p = os.path.join(p, "metrics.jsonl")
        else:
            raise FileNotFoundError(f"{p}: no results.json (a study of normlab compare) or metrics.jsonl (a run)")
    if os.path.exists(p) and not os.path.isfile(p):  # a FIFO or a device would block the read
        raise ValueError(f"{p} is not a regular file (read_results reads a study's results.json or a run's "
                         f"metrics.jsonl)")
    if p.endswith(".jsonl"):
        return pd.json_normalize(_read_jsonl(p), sep=".")
    try:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: not a normlab results file (corrupt, truncated or edited?): {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise ValueError(f"{p}: not a normlab results file (no runs)")
    runs = doc["runs"]
    for i, r in enumerate(runs):  # as the command checks them (src/study/resume.h read_results)
        if not isinstance(r, dict):
            raise ValueError(f"{p}: not a normlab results file (corrupt, truncated or edited?): runs[{i}] is "
                             f"{type(r).__name__}, not an object")
        for key in ("name", "status"):
            if not isinstance(r.get(key), str):
                raise ValueError(f"{p}: not a normlab results file (corrupt, truncated or edited?): runs[{i}].{key} "
                                 f"is {type(r.get(key)).__name__ if key in r else 'missing'}, not a string")
    if what == "runs":  # the columns of runs.csv (normlab report --csv)
        keys = []
        for r in runs:
            for k in (r.get("grid") or {}):
                if k not in keys:
                    keys.append(k)
        finals = ("steps", "train_loss", "val_loss", "diverged", "diverged_step", "seconds", "tokens_per_s")
        rows = []
        for r in runs:
            grid, summary = r.get("grid") or {}, r.get("summary") or {}
            rows.append({"name": r.get("name"), "label": r.get("label"), "status": r.get("status"),
                         **{k: grid.get(k) for k in keys}, **{k: summary.get(k) for k in finals},
                         "steps_to_target": r.get("steps_to_target")})
        return pd.DataFrame(rows)
    if what == "curves":  # the columns of curves.csv
        rows = []
        for r in runs:
            for split in ("train", "val"):
                curve = r.get(split) or {}
                steps = curve.get("step") or []
                for i, step in enumerate(steps):
                    rows.append({"run": r.get("name"), "split": split, "step": step,
                                 **{k: (curve.get(k) or [None] * len(steps))[i] if i < len(curve.get(k) or []) else None
                                    for k in ("loss", "lr", "grad_norm")}})
        return pd.DataFrame(rows, columns=["run", "split", "step", "loss", "lr", "grad_norm"])
    raise ValueError(f"read_results: what is 'runs' or 'curves', not {what!r}")
