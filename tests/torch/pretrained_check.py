"""pretrained_check.py: the real pretrained all-MiniLM-L6-v2 (a 6-layer BERT, fetched once into the
cache by scripts/fetch_model.sh) read by normlab and by transformers: on the built-in sentences
(data/sentences.txt, tokenized by the `tokenizers` package from the model's own tokenizer.json and
padded into one batch), every hidden state must agree. If normlab's `tokenize` command exists, its
ids for every sentence must equal the reference tokenizer's.

Tolerance: max |normlab - transformers| <= 1e-4 * max |reference| per hidden state (float32 engine
against a float64 reference, through a real network whose hidden states reach magnitudes of ~10).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer
from transformers import BertModel
import transformers

transformers.logging.set_verbosity_error()
TOL = 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--source", required=True, help="repository root")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    model_dir = subprocess.run(["bash", os.path.join(a.source, "scripts", "fetch_model.sh"), "all-MiniLM-L6-v2"], check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
    sentences = [s for s in open(os.path.join(a.source, "data", "sentences.txt"), encoding="utf-8").read().splitlines() if s]
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    encs = [tok.encode(s) for s in sentences]
    T = max(len(e.ids) for e in encs)
    B = len(encs)
    ids = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.int32)
    types = np.zeros((B, T), np.int32)
    for b, e in enumerate(encs):
        ids[b, :len(e.ids)] = e.ids
        mask[b, :len(e.ids)] = 1
    labels = np.full((B, T), -100, np.int32)
    tokens = os.path.join(a.workdir, "sentences.safetensors")
    save_file({"input_ids": ids, "labels": labels, "attention_mask": mask, "token_type_ids": types}, tokens)
    out = os.path.join(a.workdir, "minilm.safetensors")
    p = subprocess.run([a.normlab, "grads", "--checkpoint", model_dir, "--tokens", tokens, "--out", out, "--force"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"normlab grads failed: {p.stderr}")
    got = load_file(out)
    ref = BertModel.from_pretrained(model_dir).double().eval()
    with torch.no_grad():
        o = ref(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)),
                token_type_ids=torch.from_numpy(types.astype(np.int64)), output_hidden_states=True)
    failures = []
    worst = 0.0
    for l, h in enumerate(o.hidden_states):
        want = h.numpy()
        have = got[f"hidden.{l}"].astype(np.float64)
        rel = np.abs(have - want).max() / np.abs(want).max()
        worst = max(worst, rel)
        if not rel <= TOL:
            failures.append(f"hidden.{l}: max |normlab - transformers| / max|ref| = {rel:.3g} > {TOL}")
    print(f"MiniLM-L6 on {B} sentences (T = {T}, padded): {len(o.hidden_states)} hidden states, "
          f"worst relative difference {worst:.2e}")
    # normlab's own WordPiece tokenizer, when the command exists
    help_text = subprocess.run([a.normlab, "--help"], capture_output=True, text=True).stdout
    if " tokenize" in help_text:
        mismatched = 0
        for s, e in zip(sentences, encs):
            p = subprocess.run([a.normlab, "tokenize", "--tokenizer", model_dir, "--text", s, "--json"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                failures.append(f"normlab tokenize failed on {s!r}: {p.stderr.strip()}")
                continue
            got_ids = json.loads(p.stdout)["ids"]
            if got_ids != e.ids:
                mismatched += 1
                failures.append(f"tokenize {s!r}: {got_ids} vs tokenizers {e.ids}")
        print(f"normlab tokenize with the model's tokenizer.json: {len(sentences) - mismatched}/{len(sentences)} sentences identical")
    else:
        print("note: this normlab has no tokenize command; ids came from the tokenizers package only")
    # normlab theory --checkpoint on the real model: its own WordPiece tokenizer on the corpus, and every
    # claim one Post-LN encoder can answer measured (skips only for what it cannot give: a Pre-LN
    # placement, a loss, a family of depths or widths, or fresh models)
    js = os.path.join(a.workdir, "theory.json")
    p = subprocess.run([a.normlab, "theory", "--checkpoint", model_dir, "--seeds", "2", "--json", js, "--force"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"normlab theory --checkpoint failed: {p.stderr.strip()}")
    else:
        claims = json.load(open(js))
        measured = {c["source"] for c in claims if c["verdict"] != "skipped"}
        # (and the claims about LayerNorm itself, attention and rank collapse, whatever the placement:
        # Dong et al. measured BERT)
        want = {"000 Thm 2.2", "000 Thm 3.2", "000 Thm 6.3", "000 Thm 3.6", "000 Lemma 2.1", "000 Remark 1.2",
                "003 Post-LN input growth", "002 ||A|| rises with depth", "002 spectral bounds", "002 bound in M",
                "002 rank collapse", "002 skips prevent collapse", "004 fake depth: angular distance"}
        if not want <= measured:
            failures.append(f"theory --checkpoint MiniLM skipped {sorted(want - measured)}")
        if not all("WordPiece" in c["input"] for c in claims):
            failures.append("theory --checkpoint MiniLM did not read the corpus through the model's WordPiece tokenizer")
        reasons = {c["measured"] for c in claims if c["verdict"] == "skipped"}
        bad = [r for r in reasons if "decoder-only" in r]
        if bad:
            failures.append(f"theory --checkpoint MiniLM skipped claims for being an encoder: {bad}")
        print(f"normlab theory --checkpoint MiniLM: {len(measured)} of {len(claims)} claims measured through its "
              f"WordPiece tokenizer; skipped because: {sorted(reasons)}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("pretrained MiniLM: normlab agrees with transformers")


if __name__ == "__main__":
    main()
