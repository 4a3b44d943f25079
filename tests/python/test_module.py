"""The Python module `normlab` against the `normlab` command, bit for bit.

For a GPT-2, a BERT and a Llama (grouped-query) model made by transformers and saved with
save_pretrained: the module's forward, loss and gradients equal `normlab grads` on the same token
file; jacobian / attention / dynamics equal `normlab analyze ... --json`; `theory` equals `normlab
theory --checkpoint --json`; from_torch(model) equals load(saved directory); a hyper-connected model's
jacobian, dynamics and sinks equal the command's. Then training: the
callback receives exactly the records of metrics.jsonl, a second Python thread runs while the engine
trains (the GIL is released), Ctrl-C (SIGINT) stops the run after its step with the files of the
command's own stop (the checkpoint equals the uninterrupted command run's step checkpoint, bit for
bit; the summary says interrupted) and raises KeyboardInterrupt; compare (and compare(resume=DIR), which
keeps finished runs and runs only what a grown grid adds) and read_results give the
tables `normlab report --csv` writes; bad input raises normlab.Error with the command's message.

Run: python tests/python/test_module.py --normlab build/normlab --workdir DIR (the module importable:
build/pyenv sees build/python through scripts/setup.sh --tests).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import normlab  # (check_import_order imports numpy and torch first, in a process of its own)
import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from module_common import FAILED, analyze_json, check, first_difference, run, same_json
from module_sinks import check_sinks


# ---- the three families ---------------------------------------------------------------------------

def make_models(workdir):
    import transformers as tf
    torch.manual_seed(0)
    models = {
        "gpt2": tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=48, n_layer=3, n_head=4, vocab_size=300, n_positions=32)),
        "bert": tf.BertForMaskedLM(tf.BertConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                                                 intermediate_size=96, vocab_size=300, max_position_embeddings=32)),
        "llama": tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                                                    num_key_value_heads=2, intermediate_size=80, vocab_size=300,
                                                    max_position_embeddings=32, tie_word_embeddings=False)),
        # Gemma 2's block: the sandwich, (1+w) gains, its score scale, both soft caps, a sliding window
        "gemma2": tf.Gemma2ForCausalLM(tf.Gemma2Config(hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, head_dim=12, intermediate_size=80,
                                                      vocab_size=300, max_position_embeddings=32,
                                                      query_pre_attn_scalar=10, sliding_window=16,
                                                      attn_implementation="eager")),
    }
    dirs = {}
    for name, m in models.items():
        with torch.no_grad():  # generic norms: gains and biases away from 1 and 0
            for k, p in m.named_parameters():
                if "norm" in k.lower() and p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        m.eval()
        d = os.path.join(workdir, name)
        m.save_pretrained(d, safe_serialization=True)
        dirs[name] = d
    return models, dirs


def check_family(nl, name, model, d, workdir):
    rng = np.random.default_rng(1)
    B, T = 2, 9
    ids = rng.integers(0, 300, size=(B, T)).astype(np.int32)
    labels = ids.copy()
    if name == "bert":
        labels[:, ::2] = -100
    else:
        labels[:, :-1] = ids[:, 1:]
        labels[:, -1] = -100
    tokens = os.path.join(workdir, f"{name}_tokens.safetensors")
    save_file({"input_ids": ids, "labels": labels}, tokens)
    out = os.path.join(workdir, f"{name}_grads.safetensors")
    run([nl, "grads", "--checkpoint", d, "--tokens", tokens, "--out", out, "--force"])
    cli = load_file(out)

    m = normlab.load(d)
    fw = m.forward(ids)
    check(f"{name}: forward logits equal normlab grads bit for bit", np.array_equal(fw.logits, cli["logits"]))
    home = os.environ.get("HOME")
    os.environ["HOME"] = os.path.dirname(os.path.abspath(d))  # "~/name" as README's examples write it
    try:
        tilde = normlab.load("~/" + os.path.basename(d)).forward(ids).logits
    finally:
        if home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = home
    check(f"{name}: load('~/...') reads the model under the home directory", np.array_equal(tilde, fw.logits))
    check_sinks(nl, name, model, m, d, tokens, ids, workdir)
    check(f"{name}: every hidden state equals normlab grads bit for bit",
          len(fw.hidden) == m.config["n_layers"] + 1 and
          all(np.array_equal(h, cli[f"hidden.{i}"]) for i, h in enumerate(fw.hidden)) and
          np.array_equal(fw.final, cli["hidden.final"]))
    # a batch beyond activation_memory runs one sequence at a time, with the whole batch's outputs (to the
    # rounding a GEMM of fewer rows may do differently)
    parts = m.forward(ids, activation_memory=1)
    close = lambda a, b: a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))
    check(f"{name}: a forward in passes of one sequence gives the whole batch's logits and hidden states",
          close(parts.logits, fw.logits) and close(parts.final, fw.final) and
          all(close(a, b) for a, b in zip(parts.hidden, fw.hidden)) and len(parts.hidden) == len(fw.hidden))
    loss, grads = m.loss_and_grads(ids, labels)
    check(f"{name}: loss equals normlab grads bit for bit", np.float32(loss) == cli["loss"], f"{loss} vs {cli['loss']}")
    bad = [k for k, g in grads.items() if not np.array_equal(g, cli["grad." + k])]
    check(f"{name}: all {len(grads)} gradients equal normlab grads bit for bit", not bad and len(grads) > 10, bad[:3])

    t = from_torch_model = normlab.from_torch(model)
    check(f"{name}: from_torch has load's config", t.config == m.config,
          first_difference(t.config, m.config))
    pt, pm = t.params(), m.params()
    check(f"{name}: from_torch holds load's parameters bit for bit",
          pt.keys() == pm.keys() and all(np.array_equal(pt[k], pm[k]) for k in pm))
    ft = from_torch_model.forward(ids)
    check(f"{name}: from_torch forward equals load's bit for bit", np.array_equal(ft.logits, fw.logits))

    # params() are views into the model: a change is what the next call computes with
    w = m.params()["wte.weight"]  # the token embedding: every reading depends on it
    saved = w.copy()
    w *= 2
    changed = not np.array_equal(m.forward(ids).logits, fw.logits) and not same_json(
        m.attention(ids[0]).data, normlab.load(d).attention(ids[0]).data)
    w[...] = saved
    check(f"{name}: params() are the model's own parameters (a change reaches forward and the instruments)",
          changed and np.array_equal(m.forward(ids).logits, fw.logits))
    # and through DLPack (numpy's __dlpack__) a torch tensor on the same memory: no copy either way
    t = torch.from_dlpack(m.params()["wte.weight"])
    t.mul_(2)  # (x2 then /2 restores every bit)
    changed = not np.array_equal(m.forward(ids).logits, fw.logits)
    t.div_(2)
    check(f"{name}: torch.from_dlpack(params()[...]) shares the model's memory (a change there reaches forward)",
          changed and np.array_equal(m.forward(ids).logits, fw.logits))

    # the instruments against `normlab analyze --json` on the token file (its first row; dynamics all rows;
    # the Jacobian on the first 5 tokens: its full (T d)^2 matrix and spectra are most of this test's time)
    short = os.path.join(workdir, f"{name}_tokens5.safetensors")
    save_file({"input_ids": np.ascontiguousarray(ids[:, :5]), "labels": np.ascontiguousarray(labels[:, :5])}, short)
    for kind in ("jacobian", "attention", "dynamics"):
        want = analyze_json(nl, kind, d, short if kind == "jacobian" else tokens, workdir, name)
        got = m.jacobian(ids[0, :5]) if kind == "jacobian" else m.attention(ids[0]) if kind == "attention" else \
            m.dynamics(ids, labels)
        check(f"{name}: {kind} equals normlab analyze {kind} --json bit for bit", same_json(got.data, want),
              first_difference(got.data, want))
        df = got.to_pandas()
        check(f"{name}: {kind}.to_pandas() has one row per record", len(df) == len(got.records()) > 0, len(df))
    # precision float32 (what auto takes above a quarter of the machine's memory): the model's own float32
    # parameters, as the command's --precision float32, bit for bit; float32 is refused where it cannot be
    for kind in ("attention", "dynamics", "sinks"):
        want = analyze_json(nl, kind, d, tokens, workdir, name, "float32")
        got = m.attention(ids[0], precision="float32") if kind == "attention" else \
            m.dynamics(ids, labels, precision="float32") if kind == "dynamics" else m.sinks(ids, precision="float32")
        check(f"{name}: {kind}(precision='float32') equals normlab analyze {kind} --precision float32 bit for bit",
              got["precision"] == "float32" and same_json(got.data, want), first_difference(got.data, want))
    try:  # (Model.jacobian takes no precision; the core call behind it refuses float32 by name)
        m._core.instrument("jacobian", ids[0, :5], precision="float32")
        check(f"{name}: jacobian refuses precision float32", False)
    except normlab.Error as e:
        check(f"{name}: jacobian refuses precision float32 by name", "float64" in str(e), str(e))
    # the per-token table of one text: a token column, one row per (layer, token), and each layer's
    # stream_rms the mean of its tokens' (the stream of one text, token by token)
    one = m.dynamics(ids[0], labels[0])
    tok = one.to_pandas("tokens")
    n_layers, T = len(one["layers"]), ids.shape[1]
    means = tok.groupby("layer")["stream_rms"].mean()
    check(f"{name}: dynamics.to_pandas('tokens') has a token column, a row per layer (and after the last) and token, "
          f"and each layer's stream_rms is its tokens' mean",
          "token" in tok and len(tok) == (n_layers + 1) * T and
          all(abs(means[l["layer"]] - l["stream_rms"]) <= 1e-12 * l["stream_rms"] for l in one["layers"]) and
          abs(means[n_layers] - one["final_stream_rms"]) <= 1e-12 * one["final_stream_rms"], tok.head())
    return m


IMPORT_ORDER_SCRIPT = r"""
import ctypes, json, os, sys
import numpy as np, torch   # first, as every notebook does: they load the shared OpenBLAS (with SSE3 kernels here)
del os.environ["OPENBLAS_CORETYPE"]
import normlab
from safetensors.numpy import load_file, save_file
d, tokens, out = sys.argv[1:4]
shared = sorted({l.split()[-1] for l in open("/proc/self/maps").read().splitlines() if "libopenblas" in l})
core = ctypes.CDLL(shared[0]).openblas_get_corename
core.restype = ctypes.c_char_p
t = load_file(tokens)
m = normlab.load(d)
loss, grads = m.loss_and_grads(t["input_ids"], t["labels"])
save_file({"loss": np.array([loss], np.float32), **{"grad." + k: g for k, g in grads.items()}}, out + ".safetensors")
with open(out + ".json", "w") as f:
    json.dump({"shared_core": core().decode(), "normlab_core": normlab._core.openblas_core(),
               "jacobian": m.jacobian(t["input_ids"][0, :5]).data}, f)
"""


INTERRUPT_SCRIPT = r"""
import os, signal, sys, threading, time
import normlab
out = sys.argv[1]
normlab.train(None, sets=["train.steps=2", "train.eval_every=0"], out_dir=out, overwrite=True)
m = normlab.load(out)
ids = m.tokenize("In the beginning God created the heaven and the earth.")
threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.time()
try:
    m.jacobian(ids, full=False)   # its end-to-end spectrum: ~6,000 J^T J products, 30 s or more
    print("RESULT no-interrupt", time.time() - t0)
except KeyboardInterrupt:
    print("RESULT interrupted", time.time() - t0)
again = m.attention(ids)          # the model and the handlers are as they were
print("AFTER", len(again["per_head"]) > 0, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print("DECODE", ascii(m.decode([0xB3, 65])))   # a byte-level model's ids need not be UTF-8
"""


def check_interrupt(workdir):
    """Ctrl-C during a long instrument call raises KeyboardInterrupt within a product, not at its end, and
    leaves the model and Python's own handler as they were."""
    p = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT, os.path.join(workdir, "interrupt_run")],
                       capture_output=True, text=True, timeout=600)
    result = [l.split() for l in p.stdout.splitlines() if l.startswith("RESULT")]
    ok = p.returncode == 0 and result and result[0][1] == "interrupted" and float(result[0][2]) < 10
    check("Ctrl-C during m.jacobian raises KeyboardInterrupt within seconds (the call takes 30 s or more)", ok,
          p.stdout[-500:] + p.stderr[-1500:])
    check("after the interrupted call the model answers and Python's SIGINT handler is back",
          "AFTER True True" in p.stdout, p.stdout[-500:])
    check("decode of bytes that are not UTF-8 (a byte-level model's sample) gives U+FFFD, not an exception",
          "DECODE '\\ufffdA'" in p.stdout, p.stdout[-500:] + p.stderr[-1500:])


def check_import_order(workdir, d, name):
    """numpy and torch imported before normlab, with the shared OpenBLAS on other kernels than normlab's:
    the module's loss, gradients and Jacobian still equal the command's bit for bit."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["OPENBLAS_CORETYPE"] = "Prescott"  # the kernels Debian's OpenBLAS 0.3.21 gives a CPU newer than its table
    out = os.path.join(workdir, "import_order")
    p = subprocess.run([sys.executable, "-c", IMPORT_ORDER_SCRIPT, d, os.path.join(workdir, f"{name}_tokens.safetensors"),
                        out], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        check("numpy and torch imported first: the module runs", False, p.stderr[-2000:])
        return
    with open(out + ".json") as f:
        got = json.load(f)
    check("numpy and torch imported first: the shared OpenBLAS runs other kernels than normlab's",
          got["shared_core"].lower() == "prescott" and got["normlab_core"].lower() != "prescott", got)
    cli, mine = load_file(os.path.join(workdir, f"{name}_grads.safetensors")), load_file(out + ".safetensors")
    bad = [k for k in mine if k != "loss" and not np.array_equal(mine[k], cli[k])]
    check(f"numpy and torch imported first: {name}'s loss and {len(mine) - 1} gradients equal normlab grads bit for bit",
          mine["loss"][0] == cli["loss"] and not bad, bad[:3])
    with open(os.path.join(workdir, f"{name}_jacobian.json")) as f:
        want = json.load(f)
    check(f"numpy and torch imported first: {name}'s jacobian equals normlab analyze jacobian --json bit for bit",
          same_json(got["jacobian"], want), first_difference(got["jacobian"], want))


def check_theory(nl, d, m, workdir):
    js = os.path.join(workdir, "theory.json")
    run([nl, "theory", "--checkpoint", d, "--seeds", "2", "--json", js, "--force"])
    with open(js) as f:
        want = json.load(f)
    before = {k: v.copy() for k, v in m.params().items()}
    got = m.theory(seeds=2)
    check("theory equals normlab theory --checkpoint --json bit for bit", same_json(got.data, want),
          first_difference(got.data, want))
    # the claims read the module's own model (no copy) and leave its parameters as they were
    after = m.params()
    check("theory leaves the model's parameters unchanged, bit for bit",
          before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before))
    check("theory.to_pandas() has one row per claim", len(got.to_pandas()) == len(want))
    # precision="float32" is the command's --precision float32, bit for bit (the same claims read the
    # same float32 parameters with their gradients)
    js32 = os.path.join(workdir, "theory32.json")
    run([nl, "theory", "--checkpoint", d, "--seeds", "2", "--precision", "float32", "--json", js32, "--force"])
    with open(js32) as f:
        want32 = json.load(f)
    got32 = m.theory(seeds=2, precision="float32")
    check("theory(precision='float32') equals normlab theory --precision float32 --json bit for bit",
          same_json(got32.data, want32), first_difference(got32.data, want32))
    check("theory(precision='float32') differs from float64 (skips the claims checked to rounding)",
          not same_json(got32.data, want))


def check_tokenize_and_sample(nl, workdir):
    # a byte-level run: tokenize is its bytes, sample equals `normlab sample`
    ckpt = os.path.join(workdir, "init.safetensors")
    run([nl, "init", "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=2",
         "--out", ckpt, "--force"])
    m = normlab.load(ckpt)
    check("tokenize of a byte-level model is its UTF-8 bytes",
          list(m.tokenize("héllo")) == list("héllo".encode("utf-8")))
    want = run([nl, "sample", "--checkpoint", ckpt, "--prompt", "In the", "--max-new", "12", "--temperature", "0.8",
                "--seed", "3", "--ids"]).stdout.split()
    got = m._core.sample(list(m.tokenize("In the", special=False)), 12, 0.8, 0, 3)
    check("sample equals normlab sample (same seed) token for token", [int(x) for x in want] == list(got),
          f"{want} vs {list(got)}")


# ---- an encoder-decoder -----------------------------------------------------------------------------

def layernorm(x, w, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def check_hyper(nl, workdir):
    """A hyper-connected model (mHC, 3 streams; its mixes trained off their start): jacobian, dynamics and
    sinks read its streams as the command does, bit for bit."""
    d = os.path.join(workdir, "hyper_run")
    run([nl, "train", "-q", "--set", "model.hyper=mhc", "--set", "model.hyper_streams=3", "--set", "model.d_model=16",
         "--set", "model.n_heads=2", "--set", "model.n_layers=2", "--set", "model.seq_len=16", "--set", "train.steps=5",
         "--set", "train.batch_size=2", "--set", "train.eval_every=0", "--set", f"train.out_dir={d}"])
    m = normlab.load(d)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 256, size=(2, 8)).astype(np.int32)
    labels = ids.copy()
    labels[:, :-1] = ids[:, 1:]
    labels[:, -1] = -100
    tokens = os.path.join(workdir, "hyper_tokens.safetensors")
    save_file({"input_ids": ids, "labels": labels}, tokens)
    for kind in ("jacobian", "dynamics", "sinks"):
        want = analyze_json(nl, kind, d, tokens, workdir, "hyper")
        got = m.jacobian(ids[0]) if kind == "jacobian" else m.dynamics(ids, labels) if kind == "dynamics" else \
            m.sinks(ids)
        check(f"hyper-connected: {kind} equals normlab analyze {kind} --json bit for bit", same_json(got.data, want),
              first_difference(got.data, want))


def check_encdec(nl, workdir):
    """A byte-level encoder-decoder (Pre-LN, random weights): the module against the command on a
    seq2seq token file (normlab grads, analyze --tokens), on text (analyze --source-text / --text,
    translate), and the hidden states against their definitions."""
    ckpt = os.path.join(workdir, "encdec.safetensors")
    run([nl, "init", "--set", "model.arch=encdec", "--set", "model.n_layers=2", "--set", "model.dec_layers=2",
         "--set", "model.d_model=32", "--set", "model.n_heads=2", "--set", "model.d_ff=64", "--set",
         "model.seq_len=48", "--out", ckpt, "--force"])
    m = normlab.load(ckpt)

    # translation_pair: source bytes + EOS, BOS + target bytes, target bytes + EOS; the command's pair
    src, ids, labels = m.translation_pair("la casa blanca", "the white house")
    eos, bos = int(src[-1]), int(ids[0])
    check("encdec: translation_pair is source + EOS, BOS + target, target + EOS",
          list(src[:-1]) == list(b"la casa blanca") and list(ids[1:]) == list(b"the white house") and
          list(labels) == list(b"the white house") + [eos] and min(eos, bos) >= 256 and eos != bos,
          (src, ids, labels))
    js = os.path.join(workdir, "encdec_attention_text.json")
    run([nl, "analyze", "attention", "--checkpoint", ckpt, "--source-text", "la casa blanca", "--text",
         "the white house", "--json", js, "--force"])
    with open(js) as f:
        want = json.load(f)
    got = m.attention(ids, source=src)
    check("encdec: attention on translation_pair equals analyze attention --source-text --text --json bit for bit",
          same_json(got.data, want), first_difference(got.data, want))

    # two rows of a seq2seq token file: forward, loss and gradients against normlab grads
    rng = np.random.default_rng(2)
    S, T = 7, 6
    src2 = np.concatenate([rng.integers(0, 256, size=(2, S - 1)), np.full((2, 1), eos)], axis=1).astype(np.int32)
    ids2 = np.concatenate([np.full((2, 1), bos), rng.integers(0, 256, size=(2, T - 1))], axis=1).astype(np.int32)
    labels2 = np.concatenate([ids2[:, 1:], np.full((2, 1), eos)], axis=1).astype(np.int32)
    tokens = os.path.join(workdir, "encdec_tokens.safetensors")
    save_file({"input_ids": src2, "decoder_input_ids": ids2, "labels": labels2}, tokens)
    out = os.path.join(workdir, "encdec_grads.safetensors")
    run([nl, "grads", "--checkpoint", ckpt, "--tokens", tokens, "--out", out, "--force"])
    cli = load_file(out)
    fw = m.forward(ids2, source=src2)
    check("encdec: forward logits and memory equal normlab grads bit for bit",
          np.array_equal(fw.logits, cli["logits"]) and np.array_equal(fw.memory, cli["memory"]))
    loss, grads = m.loss_and_grads(ids2, labels2, source=src2)
    check("encdec: loss equals normlab grads bit for bit", np.float32(loss) == cli["loss"], f"{loss} vs {cli['loss']}")
    bad = [k for k, g in grads.items() if not np.array_equal(g, cli["grad." + k])]
    check(f"encdec: all {len(grads)} gradients equal normlab grads bit for bit", not bad and len(grads) > 30, bad[:3])
    # the hidden states by their definitions: embeddings (learned positions, shared token table), the
    # decoder's last stream through its final norm is `final`, and `final` through the tied head the logits
    p, c = m.params(), m.config
    check("encdec: hidden has the decoder's L + 1 streams, encoder_hidden the encoder's L, each its shape",
          len(fw.hidden) == c["dec_layers"] + 1 and len(fw.encoder_hidden) == c["n_layers"] and
          all(h.shape == (2, T, 32) for h in fw.hidden) and all(h.shape == (2, S, 32) for h in fw.encoder_hidden))
    check("encdec: hidden[0] and encoder_hidden[0] are the embeddings",
          np.allclose(fw.hidden[0], p["wte.weight"][ids2] + p["wpe.weight"][:T], atol=1e-6) and
          np.allclose(fw.encoder_hidden[0], p["wte.weight"][src2] + p["enc.wpe.weight"][:S], atol=1e-6))
    final = layernorm(fw.hidden[-1], p["ln_f.weight"], p["ln_f.bias"], c["eps"])
    check("encdec: the last decoder stream through ln_f is final, final through the head the logits",
          np.abs(final - fw.final).max() < 1e-5 and
          np.abs(fw.final.astype(np.float64) @ p["wte.weight"].T.astype(np.float64) - fw.logits).max() < 1e-5)

    # the instruments against analyze --tokens (jacobian and attention: the first row; dynamics: both)
    for kind in ("jacobian", "attention", "dynamics"):
        want = analyze_json(nl, kind, ckpt, tokens, workdir, "encdec")
        got = m.jacobian(ids2[0], source=src2[0]) if kind == "jacobian" else \
            m.attention(ids2[0], source=src2[0]) if kind == "attention" else m.dynamics(ids2, labels2, source=src2)
        check(f"encdec: {kind} equals normlab analyze {kind} --tokens --json bit for bit", same_json(got.data, want),
              first_difference(got.data, want))
        rows = 2 if kind == "jacobian" else len(want["per_head"]) if kind == "attention" else \
            c["n_layers"] + c["dec_layers"]
        check(f"encdec: {kind}.to_pandas() has {rows} rows", len(got.to_pandas()) == rows, len(got.to_pandas()))

    # translate: normlab translate's lines (greedy and beam)
    for beam in (1, 3):
        want = subprocess.run([nl, "translate", "--checkpoint", ckpt, "--text", "la casa", "--beam", str(beam),
                               "--max-len", "12"], capture_output=True, check=True).stdout.decode("utf-8", "replace")
        got = m.translate(["la casa"], beam=beam, max_len=12)
        check(f"encdec: translate (beam {beam}) equals normlab translate", [want[:-1]] == got, f"{want!r} vs {got!r}")

    # what an encoder-decoder refuses, and what the others do
    gpt = normlab.load(os.path.join(workdir, "gpt2"))
    for what, call, words in [("forward without source", lambda: m.forward(ids), "needs its source"),
                              ("a source of other rows", lambda: m.forward(ids2, source=src), "one source row per"),
                              ("a source id out of range", lambda: m.forward(ids, source=[1, 300]), "source token id 300"),
                              ("text as ids", lambda: m.attention("la casa"), "translation_pair"),
                              ("a source for a gpt", lambda: gpt.forward([1, 2], source=[1, 2]), "encoder-decoder"),
                              ("translate on a gpt", lambda: gpt.translate("x"), "needs an encoder-decoder"),
                              ("beam 65", lambda: m.translate("x", beam=65), "beam = 65"),
                              ("a token for its Jacobian", lambda: m.jacobian(ids, token=2, source=src), "end-to-end"),
                              ("max_len over seq_len", lambda: m.translate("x", max_len=49), "max_len = 49")]:
        try:
            call()
            check(f"encdec: {what} raises normlab.Error", False, "no error")
        except normlab.Error as e:
            check(f"encdec: {what} raises normlab.Error naming it", words in str(e), str(e))


# ---- training ---------------------------------------------------------------------------------------

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.seq_len=32", "train.batch_size=4",
        "train.log_every=1", "train.eval_every=5", "train.log_every_layers=5"]


def check_train(nl, workdir):
    out = os.path.join(workdir, "run")
    seen = []
    ticks = [0]
    done = threading.Event()

    def other_thread():  # runs only while the engine does not hold the GIL
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0.001)
    th = threading.Thread(target=other_thread)
    th.start()
    t0 = time.time()
    r = normlab.train(sets=TINY + ["train.steps=30"], out_dir=out, overwrite=True, callback=seen.append)
    seconds = time.time() - t0
    done.set()
    th.join()
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    check("train: the callback got every record of metrics.jsonl, in order", seen == lines,
          f"{len(seen)} vs {len(lines)}")
    check("train: per-layer records reached the callback", any(x.get("type") == "layers" for x in seen))
    check("train: result says 30 steps done", r["steps_done"] == 30 and not r["interrupted"], r)
    # a thread sleeping 1 ms per tick gets hundreds of ticks a second when the GIL is free
    check("train releases the GIL (a second Python thread ran)", ticks[0] > 20 * seconds, f"{ticks[0]} in {seconds:.1f} s")
    df = normlab.read_results(out)
    check("read_results(run dir): one row per metrics.jsonl record", len(df) == len(lines) and "type" in df)

    # Ctrl-C: a SIGINT during step 4 stops the run after it, as in the command
    ref = os.path.join(workdir, "ref")
    run([nl, "train", *sum([["--set", s] for s in TINY + ["train.steps=12", f"train.out_dir={ref}",
                                                           "train.checkpoint_every=1", "train.keep_checkpoints=100"]],
                           []), "--force"])
    stopped = os.path.join(workdir, "stopped")
    script = textwrap.dedent(f"""
        import os, signal, sys, normlab
        def cb(record):
            if record.get("type") == "train" and record["step"] == 4:
                os.kill(os.getpid(), signal.SIGINT)
        try:
            normlab.train(sets={TINY + ["train.steps=12", "train.checkpoint_every=1", "train.keep_checkpoints=100"]!r},
                          out_dir={stopped!r}, overwrite=True, callback=cb)
        except KeyboardInterrupt as e:
            print("KeyboardInterrupt:", e)
            sys.exit(130)
        sys.exit(0)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    check("Ctrl-C in normlab.train raises KeyboardInterrupt (exit 130 here, as the command's)",
          p.returncode == 130 and "resume=" in p.stdout, p.stdout + p.stderr)
    with open(os.path.join(stopped, "metrics.jsonl")) as f:
        recs = [json.loads(x) for x in f if x.strip()]
    summary = [x for x in recs if x.get("type") == "summary"]
    steps = [x["step"] for x in recs if x.get("type") == "train"]
    check("Ctrl-C: the run stopped after the step it was in (its summary says interrupted)",
          steps and max(steps) in (4, 5) and summary and summary[-1].get("interrupted") is True, (steps, summary))
    k = max(steps)
    a = load_file(os.path.join(stopped, "checkpoint.safetensors"))
    b = load_file(os.path.join(ref, "checkpoints", f"step-{k:09}.safetensors"))
    check(f"Ctrl-C: the checkpoint equals the uninterrupted command run's step-{k} checkpoint bit for bit",
          a.keys() == b.keys() and all(np.array_equal(a[x], b[x]) for x in a))
    run([nl, "train", "--resume", stopped])
    a = load_file(os.path.join(stopped, "checkpoint.safetensors"))
    b = load_file(os.path.join(ref, "checkpoint.safetensors"))
    check("Ctrl-C: normlab train --resume of the stopped run ends bit-identical to the uninterrupted run",
          a.keys() == b.keys() and all(np.array_equal(a[x], b[x]) for x in a))


def check_compare(nl, workdir):
    import pandas as pd
    study = os.path.join(workdir, "two.toml")
    with open(study, "w") as f:
        f.write(textwrap.dedent("""
            [study]
            name = "two"
            title = "two runs"
            instruments = false
            theory = false
            [base.model]
            d_model = 32
            n_heads = 2
            n_layers = 2
            seq_len = 32
            [base.train]
            steps = 20
            batch_size = 4
            eval_every = 10
            checkpoint_every = 0
            [[grid]]
            model.placement = ["post", "pre"]
        """))
    out = os.path.join(workdir, "study")
    runs = normlab.compare(study, out_dir=out, force=True)
    run([nl, "report", out, "--csv"])
    want = pd.read_csv(os.path.join(out, "runs.csv"))
    check("compare returns the runs of runs.csv (normlab report --csv)",
          list(runs.columns) == list(want.columns) and len(runs) == len(want) == 2 and
          list(runs["name"]) == list(want["name"]) and np.allclose(runs["val_loss"].astype(float), want["val_loss"]),
          f"{list(runs.columns)} vs {list(want.columns)}")
    curves = normlab.read_results(out, "curves")
    want = pd.read_csv(os.path.join(out, "curves.csv"))
    check("read_results(curves) has curves.csv's rows", len(curves) == len(want) and
          list(curves.columns) == list(want.columns))
    # a truncated results.json, and one whose run holds a number for its status: one message naming the file
    with open(os.path.join(out, "results.json"), "rb") as f:
        whole = f.read()
    bad_dir = os.path.join(workdir, "bad_results")
    os.makedirs(bad_dir, exist_ok=True)
    doc = json.loads(whole)
    doc["runs"][1]["status"] = 3
    for name, text, needle in [("truncated", whole[:300], "corrupt, truncated or edited?"),
                               ("a number for a status", json.dumps(doc).encode(), "runs[1].status is int")]:
        with open(os.path.join(bad_dir, "results.json"), "wb") as f:
            f.write(text)
        try:
            normlab.read_results(bad_dir)
            check(f"read_results refuses a results.json that is {name}", False, "accepted")
        except ValueError as e:
            check(f"read_results refuses a results.json that is {name}, naming the file",
                  needle in str(e) and "bad_results" in str(e), str(e))

    # resume: the same study again keeps both runs; a study whose grid adds a placement runs only that one
    with open(os.path.join(out, "results.json")) as f:
        before = {r["name"]: r for r in json.load(f)["runs"]}
    again = normlab.compare(resume=out)
    check("compare(resume=DIR) of a finished study keeps its runs",
          list(again["name"]) == list(runs["name"]) and
          np.array_equal(again["val_loss"].astype(float), runs["val_loss"].astype(float)))
    three = os.path.join(workdir, "three.toml")
    with open(study) as f, open(three, "w") as g:
        g.write(f.read().replace('["post", "pre"]', '["post", "pre", "sandwich"]'))
    grown = normlab.compare(three, resume=out)
    with open(os.path.join(out, "results.json")) as f:
        after = {r["name"]: r for r in json.load(f)["runs"]}
    check("compare(study, resume=DIR) with one more grid value runs only the new run, the others kept as they were",
          len(grown) == 3 and set(before) < set(after) and all(after[n] == before[n] for n in before),
          f"{list(grown['name'])}")
    run([nl, "compare", "--resume", out, "--config", three])  # the command agrees: nothing left to run
    with open(os.path.join(out, "results.json")) as f:
        check("normlab compare --resume of the study the module extended keeps all three runs",
              json.load(f)["runs"] == list(after.values()))
    for what, kwargs, words in [
            ("a directory without a study", dict(resume=os.path.join(workdir, "nope")), "no study.json"),
            ("another study", dict(study=study, sets=["train.steps=21"], resume=out), "differs from the one it holds"),
            ("force with resume", dict(resume=out, force=True), "give one of them"),
            ("another out_dir", dict(resume=out, out_dir=os.path.join(workdir, "elsewhere")), "leave out out_dir")]:
        try:
            normlab.compare(**kwargs)
            check(f"compare(resume=...) refuses {what}", False, "accepted")
        except normlab.Error as e:
            check(f"compare(resume=...) refuses {what} by name", words in str(e), str(e))
    # no study named: the command's default study (a set it does not know is refused naming it)
    try:
        normlab.compare(out_dir=os.path.join(workdir, "default"), sets=["train.bogus=1"])
        check("compare() without a study runs the built-in default study", False, "accepted")
    except normlab.Error as e:
        check("compare() without a study runs the built-in default study", "built-in study 'default'" in str(e), str(e))


def check_resources(workdir):
    """normlab's own files (the built-in corpus, ...) come from one directory: the clone for a module
    built in it, normlab/resources/ for an installed wheel (set at import). Pointed elsewhere, the
    built-in corpus is read from there, and a directory without it is named in the error."""
    clone = normlab._core.resource_dir()
    check("resources: a module built in the clone reads the clone's files",
          os.path.isfile(os.path.join(clone, "data", "kjv.txt")) and os.path.isdir(os.path.join(clone, "studies")), clone)
    other = os.path.join(workdir, "resources")
    os.makedirs(os.path.join(other, "data"), exist_ok=True)
    with open(os.path.join(clone, "data", "kjv.txt"), encoding="utf-8") as f:
        head = "".join(f.readlines()[:2000])
    with open(os.path.join(other, "data", "kjv.txt"), "w", encoding="utf-8") as f:
        f.write(head)
    try:
        normlab._core.set_resource_dir(other)
        r = normlab.train(sets=TINY + ["train.steps=2"], out_dir=os.path.join(workdir, "res"), overwrite=True)
        with open(os.path.join(workdir, "res", "metrics.jsonl")) as f:
            summary = [json.loads(x) for x in f if '"summary"' in x][-1]
        words = summary.get("input", "").split()  # "...: N training and M validation bytes"
        read = int(words[-6]) + int(words[-3]) if len(words) > 6 else -1
        check("resources: set_resource_dir moves the built-in corpus (the run read the other kjv.txt)",
              r["steps_done"] == 2 and read == len(head.encode("utf-8")), f"{summary.get('input')} vs {len(head)}")
        normlab._core.set_resource_dir(os.path.join(workdir, "nowhere"))
        try:
            normlab.train(sets=TINY + ["train.steps=2"], out_dir=os.path.join(workdir, "res2"), overwrite=True)
            check("resources: a directory without the corpus is an error naming it", False, "no error")
        except normlab.Error as e:
            check("resources: a directory without the corpus is an error naming it",
                  os.path.join(workdir, "nowhere", "data", "kjv.txt") in str(e), str(e))
    finally:
        normlab._core.set_resource_dir(clone)


def check_bad_input(workdir):
    for what, call in [("a missing path", lambda: normlab.load(os.path.join(workdir, "nope"))),
                       ("an unknown config key", lambda: normlab.train(sets=["train.stepz=3"],
                                                                       out_dir=os.path.join(workdir, "bad"))),
                       ("an id out of range", lambda: normlab.load(os.path.join(workdir, "gpt2")).forward([5, 300])),
                       # what an int32 cast would change: wrapped to id 3, and labels truncated to 2, 3
                       ("an int64 id of 2**32 + 3", lambda: normlab.load(os.path.join(workdir, "gpt2")).forward(
                           np.array([5, 2**32 + 3], dtype=np.int64))),
                       ("theory with seq_len 0", lambda: normlab.load(os.path.join(workdir, "gpt2")).theory(
                           seeds=1, seq_len=0)),
                       ("theory with precision 'half'", lambda: normlab.load(os.path.join(workdir, "gpt2")).theory(
                           seeds=1, precision="half")),
                       ("activation_memory 0", lambda: normlab.load(os.path.join(workdir, "gpt2")).forward(
                           [5, 6], activation_memory=0)),
                       ("NaN written into the embeddings", lambda: nan_then(normlab.load(os.path.join(workdir, "gpt2")))),
                       ("float labels", lambda: normlab.load(os.path.join(workdir, "gpt2")).loss_and_grads(
                           [5, 6], np.array([2.7, 3.2]))),
                       ("int64 labels below int32", lambda: normlab.load(os.path.join(workdir, "gpt2")).dynamics(
                           [[5, 6]], labels=np.array([[-2**40, 3]], dtype=np.int64)))]:
        try:
            call()
            check(f"bad input ({what}) raises normlab.Error", False, "no error")
        except normlab.Error as e:
            check(f"bad input ({what}) raises normlab.Error", isinstance(e, ValueError) and str(e), str(e))


def nan_then(m):
    """Writes NaN into a parameter through params() and samples: the command refuses such a model."""
    next(iter(m.params().values()))[0] = np.nan
    return m.sample([5, 6], max_new=3)


class NotAModel:
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    nl = os.path.abspath(a.normlab)
    check("import normlab: version", bool(normlab.__version__))
    models, dirs = make_models(a.workdir)
    kept = {}
    for name in ("gpt2", "bert", "llama", "gemma2"):
        kept[name] = check_family(nl, name, models[name], dirs[name], a.workdir)
    check_theory(nl, dirs["gpt2"], kept["gpt2"], a.workdir)
    check_import_order(a.workdir, dirs["llama"], "llama")
    check_interrupt(a.workdir)
    try:
        normlab.from_torch(NotAModel())
        check("from_torch refuses another object by name", False, "accepted")
    except normlab.Error as e:
        check("from_torch refuses another object by name", "NotAModel" in str(e), str(e))
    check_tokenize_and_sample(nl, a.workdir)
    check_encdec(nl, a.workdir)
    check_hyper(nl, a.workdir)
    check_train(nl, a.workdir)
    check_compare(nl, a.workdir)
    check_bad_input(a.workdir)
    check_resources(a.workdir)
    print(f"{len(FAILED)} failed" if FAILED else "all passed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
