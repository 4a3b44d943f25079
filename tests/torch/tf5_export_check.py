"""tf5_export_check.py: normlab's Qwen3, SmolLM3, Gemma 3 and OLMo 3 exports loaded by transformers itself
(opt-in, not in ctest).

These models need a transformers newer than the test environment's torch 1.13 allows, so ctest's
hf_parity checks their exports against the committed directories transformers wrote (tensor for tensor,
config setting for setting). This script closes the loop with a current transformers: `normlab export
--hf` of tests/data/qwen3-tiny, smollm3-tiny, gemma3-tiny, gemma3-swa6-tiny and olmo3-tiny (its YaRN dropped:
export writes no per-frequency scaling), and of a fresh normlab
Llama-family model with per-head QK-norm, are loaded by `from_pretrained` as the class each original is,
and their logits, in float64 on a padded batch, must equal those of normlab's `grads` on the same model
(within 1e-5 of the largest logit: normlab computes in float32), and, for the committed directories,
transformers' own logits from the original directory must equal the export's bit for bit (Gemma 3's gains
come back within 2^-24 of w, and its norm computes 1 + w in float32, where the two are the same number).
Run with the benchmark venv (bench/.venv: current torch and transformers from PyPI):
  bench/.venv/bin/python tests/torch/tf5_export_check.py --normlab build/normlab --workdir /tmp/tf5x
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
# the committed directories normlab writes back, and the class transformers must load each as
EXPORTED = [("qwen3-tiny", "Qwen3ForCausalLM"), ("smollm3-tiny", "SmolLM3ForCausalLM"),
            ("gemma3-tiny", "Gemma3ForCausalLM"), ("gemma3-swa6-tiny", "Gemma3ForCausalLM")]


def run(normlab, *args):
    p = subprocess.run([normlab, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"normlab {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def batch(vocab, B, T, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(B, T)).astype(np.int32)
    mask = np.ones((B, T), dtype=np.int32)
    mask[1, T - 3:] = 0  # right padding on one row: its padded positions are not compared
    labels = np.where(mask == 1, np.roll(ids, -1, axis=1), -100).astype(np.int32)
    return ids, mask, labels


def hf_logits(d, ids, mask, arch="Qwen3ForCausalLM"):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
    if type(model).__name__ != arch:
        sys.exit(f"{d}: transformers loaded a {type(model).__name__}, not {arch}")
    with torch.no_grad():
        return model(torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long()).logits.numpy()


def normlab_logits(normlab, work, d, ids, mask, labels):
    tokens, out = os.path.join(work, "tokens.safetensors"), os.path.join(work, "grads.safetensors")
    save_file({"input_ids": ids, "attention_mask": mask, "labels": labels}, tokens)
    run(normlab, "grads", "--checkpoint", d, "--tokens", tokens, "--out", out, "--force")
    return load_file(out)["logits"].astype(np.float64)


def compare(label, ours, theirs, mask, tol):
    valid = mask == 1
    scale = np.abs(theirs[valid]).max()
    err = np.abs(ours[valid] - theirs[valid]).max() / scale
    ok = err <= tol
    print(f"{label}: largest logit difference {err:.2e} of the largest logit ({'ok' if ok else 'FAILS'}; "
          f"tolerance {tol:g})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    os.makedirs(args.workdir, exist_ok=True)
    ok = True

    # 1. the directories transformers wrote, imported and exported by normlab (OLMo 3's without its YaRN)
    plain = os.path.join(args.workdir, "olmo3-plain-tiny")
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(os.path.join(DATA, "olmo3-tiny"), plain)
    with open(os.path.join(plain, "config.json")) as f:
        config = json.load(f)
    config["rope_parameters"]["full_attention"] = {"rope_type": "default",
                                                   "rope_theta": config["rope_parameters"]["full_attention"]["rope_theta"]}
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump(config, f)
    for name, arch in EXPORTED + [(plain, "Olmo3ForCausalLM")]:
        tiny = os.path.join(DATA, name)
        exported = os.path.join(args.workdir, f"{name}-export")
        shutil.rmtree(exported, ignore_errors=True)
        run(args.normlab, "export", "--checkpoint", tiny, "--hf", exported)
        vocab = load_file(os.path.join(tiny, "model.safetensors"))["model.embed_tokens.weight"].shape[0]
        ids, mask, labels = batch(vocab, 3, 11, 1)
        original, again = hf_logits(tiny, ids, mask, arch), hf_logits(exported, ids, mask, arch)
        same = np.array_equal(original[mask == 1], again[mask == 1])
        print(f"{name}: transformers' logits from the original and from normlab's export "
              f"{'are equal bit for bit' if same else 'DIFFER'}")
        ok &= same
        ok &= compare(f"{name}: normlab grads against transformers",
                      normlab_logits(args.normlab, args.workdir, tiny, ids, mask, labels), original, mask, 1e-5)

    # 2. a model normlab made (init), in the shape Qwen3 takes: pre-RMSNorm, RoPE, SwiGLU, GQA, wider
    #    heads, per-head QK-norm, no biases, untied head; exported and loaded by transformers
    ckpt = os.path.join(args.workdir, "fresh.safetensors")
    sets = ["model.arch=gpt", "model.placement=pre", "model.norm=rmsnorm", "model.activation=swiglu", "model.positions=rope",
            "model.d_model=30", "model.n_heads=3", "model.n_kv_heads=1", "model.head_dim=14", "model.d_ff=44",
            "model.n_layers=3", "model.seq_len=16", "model.qk_norm=heads", "model.bias=none", "model.norm_bias=false", "model.head=untied",
            "model.init=normal", "model.seed=5", "data.tokenizer=bytes"]
    init = [args.normlab, "init", "--out", ckpt, "--force"]
    for s in sets:
        init += ["--set", s]
    p = subprocess.run(init, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"normlab init failed: {p.stderr}")
    fresh = os.path.join(args.workdir, "fresh-export")
    shutil.rmtree(fresh, ignore_errors=True)
    run(args.normlab, "export", "--checkpoint", ckpt, "--hf", fresh)
    ids, mask, labels = batch(256, 2, 16, 2)
    ok &= compare("normlab's own Qwen3-shaped model: export -> from_pretrained against normlab grads",
                  normlab_logits(args.normlab, args.workdir, ckpt, ids, mask, labels), hf_logits(fresh, ids, mask),
                  mask, 1e-5)
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
