"""smollm2_check.py: the real SmolLM2-135M-Instruct GGUF file (fetched once into the cache by
scripts/fetch_model.sh) read by normlab and by transformers 4.45 (+ gguf, accelerate), which
dequantizes the same file its own way and un-permutes q and k its own way.

- Tokenizer: normlab's ids (the byte-level BPE and 'smollm' pre-tokenizer from the file's metadata)
  equal those of the `tokenizers` package on every text of tokenizer_check.TEXTS and the built-in
  sentences (add_special_tokens=False: the file says add_bos_token = false, which transformers
  4.45's GGUF tokenizer ignores; on its missing Digits split see below).
- Forward: on the built-in sentences (right-padded into one batch, padding excluded), every hidden
  state (the stream entering each of the 30 layers, the last layer's output, the final RMSNorm's)
  and the logits agree. The reference runs in float64 on the float32-dequantized weights, so the
  difference is normlab's float32 arithmetic alone. Tolerance: max |normlab - ref| <= 5e-5 * max
  |ref| per hidden state and on the logits (float32 through 30 layers whose stream reaches ~10^3;
  measured 7.2e-6 and 5.0e-6, so the margin is about 7x).
- transformers leaves lm_head untied for this file (a newly initialized matrix): the oracle ties it
  to the embedding, as the file means (it has no output.weight).
- Greedy continuations of a few prompts (normlab sample --temperature 0 --ids against
  generate(do_sample=False)) are equal token for token.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import unicodedata

import gguf
import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_check import TEXTS, tokenize_many  # noqa: E402

transformers.logging.set_verbosity_error()

# transformers parses the file's metadata anew for the config, the tokenizer and the model (a third of
# this test's time: the 49,152-token vocabulary and its merges through numpy memmaps, ~9 s each). Its
# loader imports gguf.GGUFReader when called, so the same read-only parse is handed to all three.
_gguf_reader, _gguf_readers = gguf.GGUFReader, {}


def _gguf_reader_once(path, *args, **kwargs):
    key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
    if key not in _gguf_readers:
        _gguf_readers[key] = _gguf_reader(path, *args, **kwargs)
    return _gguf_readers[key]


gguf.GGUFReader = _gguf_reader_once
HIDDEN_TOL, LOGIT_TOL = 5e-5, 5e-5
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Layer normalization is"]
MAX_NEW = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--source", required=True, help="repository root")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    path = subprocess.run(["bash", os.path.join(a.source, "scripts", "fetch_model.sh"), "SmolLM2-135M-Instruct"], check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    d, g = os.path.dirname(path), os.path.basename(path)
    failures = []

    # the config read once and given to both
    config = AutoConfig.from_pretrained(d, gguf_file=g)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=g, config=config)
    # transformers 4.45 builds the tokenizer with ByteLevel alone, dropping the Digits split that
    # tokenizer.ggml.pre = 'smollm' names (llama.cpp splits \p{N} individually; SmolLM2's own
    # tokenizer.json is Sequence[Digits(individual_digits), ByteLevel]). The oracle is therefore the
    # same vocabulary and merges with that pre-tokenizer restored, by the tokenizers package itself;
    # the unrestored one must agree wherever the text has no non-ASCII numerals (ASCII digits have no
    # merges in this vocabulary, so both split them alike).
    from tokenizers import pre_tokenizers
    backend = tok.backend_tokenizer
    plain = copy.deepcopy(backend)
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
    sentences = [s for s in open(os.path.join(a.source, "data", "sentences.txt"), encoding="utf-8").read().splitlines() if s]
    texts = [t for t in TEXTS if t] + sentences
    # every text in one call (--jsonl: one JSON string per line in, one JSON line per text out)
    outs, err = tokenize_many(a.normlab, path, texts, os.path.join(a.workdir, "texts.jsonl"), ["--no-special"])
    if err is not None:
        failures.append(f"normlab tokenize --jsonl: {err}")
        outs = [None] * len(texts)
    same = plain_same = plain_total = 0
    for t, out in zip(texts, outs):
        want = backend.encode(t, add_special_tokens=False).ids
        if out is None:
            continue
        mine = out["ids"]
        if mine != want:
            failures.append(f"tokenize {t!r}: normlab {mine[:20]}... tokenizers {want[:20]}...")
        else:
            same += 1
        # (a character Python's own Unicode tables do not know yet may be a numeral too)
        if not any(not c.isascii() and (c.isnumeric() or unicodedata.category(c) == "Cn") for c in t):
            plain_total += 1
            if mine == plain.encode(t, add_special_tokens=False).ids:
                plain_same += 1
            else:
                failures.append(f"tokenize {t!r}: differs from transformers' GGUF tokenizer")
    print(f"tokenizer: {same}/{len(texts)} texts give the ids of tokenizers' Digits + ByteLevel BPE; "
          f"{plain_same}/{plain_total} without non-ASCII numerals those of transformers' GGUF tokenizer")
    for f in failures:
        print("  ", f)

    ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=g, config=config, torch_dtype=torch.float32)
    ref.lm_head.weight = ref.model.embed_tokens.weight  # the file has no output.weight: the head is tied
    ref = ref.double().eval()

    encs = [backend.encode(s, add_special_tokens=False).ids for s in sentences[:8]]
    B, T = len(encs), max(len(e) for e in encs)
    ids = np.full((B, T), 2, np.int32)
    labels = np.full((B, T), -100, np.int32)
    for b, e in enumerate(encs):
        ids[b, :len(e)] = e
        labels[b, :len(e) - 1] = e[1:]
    tokens = os.path.join(a.workdir, "sentences.safetensors")
    save_file({"input_ids": ids, "labels": labels}, tokens)
    out = os.path.join(a.workdir, "smollm2.safetensors")
    p = subprocess.run([a.normlab, "grads", "--checkpoint", path, "--tokens", tokens, "--out", out, "--force"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"normlab grads failed: {p.stderr}")
    got = load_file(out)
    last = {}
    def keep(module, inputs, output):
        last["h"] = output[0]
    hook = ref.model.layers[-1].register_forward_hook(keep)
    with torch.no_grad():
        o = ref(input_ids=torch.from_numpy(ids.astype(np.int64)), output_hidden_states=True, use_cache=False)
    hook.remove()
    L = ref.config.num_hidden_layers
    valid = np.zeros((B, T), bool)
    for b, e in enumerate(encs):
        valid[b, :len(e)] = True
    # transformers' hidden_states: the L layer inputs, then the final norm's output (not the last
    # layer's output, which the hook gives)
    pairs = [(f"hidden.{l}", o.hidden_states[l]) for l in range(L)] + [(f"hidden.{L}", last["h"]),
                                                                         ("hidden.final", o.hidden_states[L])]
    worst, growth = 0.0, []
    for name, h in pairs:
        want = h.numpy()[valid]
        have = got[name].astype(np.float64)[valid]
        rel = np.abs(have - want).max() / np.abs(want).max()
        worst = max(worst, rel)
        growth.append(float(np.linalg.norm(want, axis=-1).mean()))
        if not rel <= HIDDEN_TOL:
            failures.append(f"{name}: max |normlab - transformers| / max |ref| = {rel:.3g} > {HIDDEN_TOL}")
    want = o.logits.numpy()[valid]
    have = got["logits"].astype(np.float64)[valid]
    lrel = np.abs(have - want).max() / np.abs(want).max()
    if not lrel <= LOGIT_TOL:
        failures.append(f"logits: relative difference {lrel:.3g} > {LOGIT_TOL}")
    print(f"forward on {B} sentences (T <= {T}): {len(pairs)} hidden states, worst relative difference {worst:.2e}; "
          f"logits {lrel:.2e}; mean token norm by layer {growth[0]:.3g} -> {max(growth[:-1]):.4g} (max) -> "
          f"{growth[-2]:.4g} before the final norm")

    for k, prompt in enumerate(PROMPTS):
        # the second prompt through the directory fetch_model.sh wrote (one GGUF file and its licence):
        # the same model and its own tokenizer
        where = path if k == 0 else os.path.dirname(path)
        p = subprocess.run([a.normlab, "sample", "--checkpoint", where, "--prompt", prompt, "--max-new", str(MAX_NEW),
                            "--temperature", "0", "--ids"], capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"normlab sample {prompt!r}: {p.stderr.strip()}")
            continue
        mine = [int(x) for x in p.stdout.split()]
        pid = torch.tensor([backend.encode(prompt, add_special_tokens=False).ids])
        with torch.no_grad():
            theirs = ref.generate(pid, attention_mask=torch.ones_like(pid), max_new_tokens=MAX_NEW, do_sample=False,
                                  pad_token_id=2)[0, pid.shape[1]:].tolist()
        if mine != theirs[:len(mine)] or len(mine) != min(MAX_NEW, len(theirs)):
            failures.append(f"greedy {prompt!r}: normlab {mine} transformers {theirs}")
        else:
            print(f"greedy {prompt!r} -> {tok.decode(mine)!r}: identical")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("SmolLM2-135M (GGUF): normlab agrees with transformers")


if __name__ == "__main__":
    main()
