"""hf_parity.py: normlab against Hugging Face transformers (the reference implementation of GPT-2 and
BERT), on models that transformers itself creates and saves.

For each case: transformers builds a random model (small, odd sizes, every parameter perturbed so
that no LayerNorm gain is 1 and no bias 0), saves it with save_pretrained (model.safetensors, or
sharded), and normlab reads that directory through `normlab grads`. Compared, on a padded batch:
every hidden state, the logits, the loss and every parameter gradient (the reference runs in float64;
normlab in float32). Then the other direction: normlab models written with `normlab export --hf`
are loaded with from_pretrained and must give the same logits. Then bad input: each broken directory
must give one clear message and a non-zero exit, and nothing may be overwritten.

The tolerances and the shared helpers are in hf_common.py; the models only transformers 5 implements
(Qwen3, Gemma 3, SmolLM3), from goldens it wrote, in hf_parity_tf5.py.
"""
import argparse
import json
import math
import os
import shutil

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

import transformers
from transformers import (BertConfig, BertForMaskedLM, BertModel, Gemma2Config, Gemma2ForCausalLM, GemmaConfig,
                          GemmaForCausalLM, GPT2Config,
                          GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)


from hf_common import (FWD_TOL, GRAD_TOL, LOSS_TOL, check, config_refusals, failures, finish, llama_grad, padded_batch,
                       logits_with, perturb, run)
from hf_parity_tf5 import (gemma3_golden, olmo3_golden, phi4mini_golden, qwen3_golden, qwen3_yarn_golden,
                           smollm3_golden)

transformers.logging.set_verbosity_error()

# ---------------------------------------------------------------------------------------------
# GPT-2

def gpt2_grad_name(hf):  # HF parameter -> (normlab name, transpose?)
    n = hf[len("transformer."):] if hf.startswith("transformer.") else hf
    if n in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"):
        return n, False
    parts = n.split(".")
    l, rest = parts[1], ".".join(parts[2:])
    table = {"ln_1.weight": ("attn.ln_in.weight", False), "ln_1.bias": ("attn.ln_in.bias", False),
             "ln_2.weight": ("mlp.ln_in.weight", False), "ln_2.bias": ("mlp.ln_in.bias", False),
             "attn.c_attn.weight": ("attn.qkv.weight", True), "attn.c_attn.bias": ("attn.qkv.bias", False),
             "attn.c_proj.weight": ("attn.proj.weight", True), "attn.c_proj.bias": ("attn.proj.bias", False),
             "mlp.c_fc.weight": ("mlp.fc.weight", True), "mlp.c_fc.bias": ("mlp.fc.bias", False),
             "mlp.c_proj.weight": ("mlp.proj.weight", True), "mlp.c_proj.bias": ("mlp.proj.bias", False)}
    name, tr = table[rest]
    return f"h.{l}.{name}", tr


def gpt2_case(normlab, work, label, seed, shard=False, **cfg):
    d = os.path.join(work, label)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(seed)
    config = GPT2Config(**cfg)
    model = GPT2LMHeadModel(config)
    perturb(model, seed)
    model.save_pretrained(d, safe_serialization=True, max_shard_size="20KB" if shard else "5GB")
    if shard:
        assert os.path.exists(os.path.join(d, "model.safetensors.index.json")), "expected a sharded save"
    T = min(13, config.n_positions)
    ids, mask, _ = padded_batch(config.vocab_size, 3, T, [T, T - 4, 1], seed)
    labels = np.full_like(ids, -100)
    labels[:, :-1] = np.where(mask[:, 1:] == 1, ids[:, 1:], -100)
    tok = os.path.join(d, "tokens.safetensors")
    save_file({"input_ids": ids, "labels": labels, "attention_mask": mask}, tok)
    out = os.path.join(d, "normlab.safetensors")
    run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out, "--force")
    got = load_file(out)

    ref = model.double().eval()  # constructed models start in training mode (dropout)
    hf_labels = np.where(mask == 1, ids, -100).astype(np.int64)
    o = ref(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)),
            labels=torch.from_numpy(hf_labels), output_hidden_states=True)
    o.loss.backward()
    L = config.n_layer
    for l in range(L):
        check(f"{label} hidden.{l}", got[f"hidden.{l}"], o.hidden_states[l].detach().numpy(), FWD_TOL)
    check(f"{label} hidden.final (ln_f)", got["hidden.final"], o.hidden_states[L].detach().numpy(), FWD_TOL)
    check(f"{label} logits", got["logits"], o.logits.detach().numpy(), FWD_TOL)
    check(f"{label} loss", got["loss"], o.loss.item(), LOSS_TOL)
    n = 0
    for name, p in ref.named_parameters():
        nl, tr = gpt2_grad_name(name)
        g = p.grad.numpy()
        check(f"{label} grad {name}", got["grad." + nl], g.T if tr else g, GRAD_TOL)
        n += 1
    print(f"{label}: {L} layers: hidden states, logits, loss and {n} gradients compared")


# ---------------------------------------------------------------------------------------------
# Llama family (Llama, Qwen2)

def olmo2_classes():
    """OLMo 2 arrived in transformers 4.47, which the suite runs in its own environment (build/pyenv-tf447:
    the main one keeps 4.45.2, whose GGUF reader and tokenizers the other checks pin)."""
    from transformers import Olmo2Config, Olmo2ForCausalLM
    return Olmo2Config, Olmo2ForCausalLM


def llama_case(normlab, work, label, seed, family="llama", shard=False, **cfg):
    d = os.path.join(work, label)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(seed)
    Config, Model = olmo2_classes() if family == "olmo2" else {
        "llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "mistral": (MistralConfig, MistralForCausalLM), "phi3": (Phi3Config, Phi3ForCausalLM),
        "gemma": (GemmaConfig, GemmaForCausalLM), "gemma2": (Gemma2Config, Gemma2ForCausalLM)}[family]
    config = Config(attn_implementation="eager", **cfg)
    model = Model(config)
    perturb(model, seed)
    model.save_pretrained(d, safe_serialization=True, max_shard_size="20KB" if shard else "5GB")
    T = 11
    ids, mask, _ = padded_batch(config.vocab_size, 3, T, [T, T - 3, 1], seed)
    pad = getattr(config, "pad_token_id", None)
    if pad is not None:  # transformers' nn.Embedding(padding_idx = pad_token_id) gives that row no gradient from
        # its inputs (normlab's does): the pad id appears only at padding, as a tokenizer writes it (docs/MODEL.md)
        ids[(mask == 1) & (ids == pad)] = (pad + 1) % config.vocab_size
    labels = np.full_like(ids, -100)
    labels[:, :-1] = np.where(mask[:, 1:] == 1, ids[:, 1:], -100)
    tok = os.path.join(d, "tokens.safetensors")
    save_file({"input_ids": ids, "labels": labels, "attention_mask": mask}, tok)
    out = os.path.join(d, "normlab.safetensors")
    run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out, "--force")
    got = load_file(out)
    ref = model.double().eval()
    hf_labels = np.where(mask == 1, ids, -100).astype(np.int64)
    last = {}
    def keep(module, inputs, output):
        last["h"] = output[0]
    hook = ref.model.layers[-1].register_forward_hook(keep)
    o = ref(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)),
            labels=torch.from_numpy(hf_labels), output_hidden_states=True, use_cache=False)
    hook.remove()
    o.loss.backward()
    L = config.num_hidden_layers
    valid = mask == 1  # a padded query position is not compared (transformers lets it attend past the mask)
    for l in range(L):
        check(f"{label} hidden.{l}", got[f"hidden.{l}"][valid], o.hidden_states[l].detach().numpy()[valid], FWD_TOL)
    check(f"{label} hidden.{L}", got[f"hidden.{L}"][valid], last["h"].detach().numpy()[valid], FWD_TOL)
    check(f"{label} hidden.final (norm)", got["hidden.final"][valid], o.hidden_states[L].detach().numpy()[valid], FWD_TOL)
    check(f"{label} logits", got["logits"][valid], o.logits.detach().numpy()[valid], FWD_TOL)
    check(f"{label} loss", got["loss"], o.loss.item(), LOSS_TOL)
    C, F = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or C // config.num_attention_heads
    A, KV = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    n = 0
    for name, p in ref.named_parameters():
        if p.grad is None:
            continue
        check(f"{label} grad {name}", llama_grad(got, name, A, KV, F, family == "gemma2", family == "olmo2"),
              p.grad.numpy(), GRAD_TOL)
        n += 1
    print(f"{label}: {type(model).__name__}, {L} layers, {config.num_key_value_heads} key-value heads: hidden "
          f"states, logits, loss and {n} gradients compared")


# RoPE scaling normlab does not represent (dynamic: the angles change with the sequence length) and broken
# yarn and llama3 parameters
ROPE_REFUSALS = [
    ("dynamic", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "not dynamic"),
    ("yarn factor below 1", {"rope_scaling": {"type": "yarn", "factor": 0.5}}, "yarn's factor in [1, 1e6]"),
    ("yarn beta_fast below 0", {"rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": -1}}, "beta_fast"),
    ("factor below 1", {"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, "factor in [1, 1e6]"),
    ("llama3 without its bands", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
     "0 < low_freq_factor < high_freq_factor"),
    ("not an object", {"rope_scaling": 8}, "an object")]
# a rotated share that is not an even number of dimensions (8 x 0.7: 5), and LongRoPE factors that do not fit
PHI3_REFUSALS = [
    ("odd partial rotary", {"partial_rotary_factor": 0.7}, "partial_rotary_factor"),
    ("longrope of another length", {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 3,
                                                     "long_factor": [2.0] * 3}}, "one divisor per rotated pair (4)"),
    ("longrope without short_factor", {"rope_scaling": {"type": "longrope", "long_factor": [2.0] * 4}},
     "with a short_factor list")]


def longrope_factor(normlab, work, label):
    """transformers 5 takes LongRoPE's cos/sin factor from rope_parameters' `factor` when it is there (else
    max_position_embeddings / original_max_position_embeddings): factor 16 must give what attention_factor
    sqrt(1 + ln 16 / ln 32) gives, and not what the directory's own ratio (128 / 32) gives."""
    import math
    d = os.path.join(work, label)
    tok = os.path.join(d, "tokens.safetensors")
    def logits(name, extra):
        return logits_with(normlab, work, f"{label}_{name}", d, tok, lambda c: c["rope_scaling"].update(extra))
    by_factor = logits("factor16", {"factor": 16.0})
    by_attention = logits("attention16", {"attention_factor": math.sqrt(1 + math.log(16) / math.log(32))})
    own = load_file(os.path.join(d, "normlab.safetensors"))["logits"]
    if not np.abs(by_factor - by_attention).max() < 1e-6 or np.abs(by_factor - own).max() < 1e-3:
        failures.append(f"{label}: LongRoPE's factor key not read as transformers 5 reads it")


# ---------------------------------------------------------------------------------------------
# BERT

def bert_grad_name(hf):
    n = hf[len("bert."):] if hf.startswith("bert.") else hf
    emb = {"embeddings.word_embeddings.weight": "wte.weight", "embeddings.position_embeddings.weight": "wpe.weight",
           "embeddings.token_type_embeddings.weight": "wtt.weight",
           "embeddings.LayerNorm.weight": "ln_emb.weight", "embeddings.LayerNorm.bias": "ln_emb.bias",
           "cls.predictions.bias": "head.bias",
           "cls.predictions.transform.dense.weight": "head.dense.weight",
           "cls.predictions.transform.dense.bias": "head.dense.bias",
           "cls.predictions.transform.LayerNorm.weight": "head.ln.weight",
           "cls.predictions.transform.LayerNorm.bias": "head.ln.bias"}
    if n in emb:
        return emb[n], None
    if n.startswith("pooler."):
        return None, None
    parts = n.split(".")
    l, rest = parts[2], ".".join(parts[3:])
    for part, q in enumerate(("query", "key", "value")):
        for suffix in ("weight", "bias"):
            if rest == f"attention.self.{q}.{suffix}":
                return f"h.{l}.attn.qkv.{suffix}", part
    table = {"attention.output.dense": "attn.proj", "attention.output.LayerNorm": "attn.ln_out",
             "intermediate.dense": "mlp.fc", "output.dense": "mlp.proj", "output.LayerNorm": "mlp.ln_out"}
    base, suffix = rest.rsplit(".", 1)
    return f"h.{l}.{table[base]}.{suffix}", None


def bert_case(normlab, work, label, seed, mlm=True, **cfg):
    d = os.path.join(work, label)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(seed)
    config = BertConfig(**cfg)
    model = BertForMaskedLM(config) if mlm else BertModel(config)
    perturb(model, seed)
    model.save_pretrained(d, safe_serialization=True)
    T = 11
    ids, mask, tt = padded_batch(config.vocab_size, 3, T, [T, 7, 2], seed, types=config.type_vocab_size)
    rng = np.random.default_rng(seed + 1)
    labels = np.where((rng.random(ids.shape) < 0.3) & (mask == 1), ids, -100).astype(np.int32)
    labels[0, 0] = ids[0, 0]
    tok = os.path.join(d, "tokens.safetensors")
    save_file({"input_ids": ids, "labels": labels, "attention_mask": mask, "token_type_ids": tt}, tok)
    out = os.path.join(d, "normlab.safetensors")
    run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out, "--force")
    got = load_file(out)

    ref = model.double().eval()  # constructed models start in training mode (dropout)
    args = dict(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)),
                token_type_ids=torch.from_numpy(tt.astype(np.int64)), output_hidden_states=True)
    if mlm:
        args["labels"] = torch.from_numpy(labels.astype(np.int64))
    o = ref(**args)
    L = config.num_hidden_layers
    for l in range(L + 1):
        check(f"{label} hidden.{l}", got[f"hidden.{l}"], o.hidden_states[l].detach().numpy(), FWD_TOL)
    if not mlm:
        if "logits" in got or "loss" in got:
            failures.append(f"{label}: a headless BertModel must have no logits or loss in normlab's output")
        print(f"{label}: headless, {L} layers: every hidden state compared")
        return
    check(f"{label} logits", got["logits"], o.logits.detach().numpy(), FWD_TOL)
    check(f"{label} loss", got["loss"], o.loss.item(), LOSS_TOL)
    o.loss.backward()
    n = 0
    qkv = {}
    for name, p in ref.named_parameters():
        if p.grad is None:
            continue
        nl, part = bert_grad_name(name)
        if nl is None:
            continue
        g = p.grad.numpy()
        if part is not None:
            qkv.setdefault(nl, [None] * 3)[part] = g
            continue
        check(f"{label} grad {name}", got["grad." + nl], g, GRAD_TOL)
        n += 1
    for nl, parts in qkv.items():
        check(f"{label} grad {nl}", got["grad." + nl], np.concatenate(parts, axis=0), GRAD_TOL)
        n += 1
    print(f"{label}: {L} layers: hidden states, logits, loss and {n} gradients compared")


# ---------------------------------------------------------------------------------------------
# Export: normlab -> transformers

def export_case(normlab, work, label, sets, loader, seed, eager=False):
    """A normlab checkpoint (perturbed) exported with `export --hf`: from_pretrained's outputs must be normlab's,
    and normlab's reading of the directory the same model bit for bit. eager: transformers' eager attention and
    no cache (Gemma 2: its soft caps)."""
    d = os.path.join(work, label)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpt = os.path.join(d, "init.safetensors")
    run(normlab, "init", "--out", ckpt, *sum([["--set", s] for s in sets], []))
    # perturb the fresh checkpoint so gains/biases are not 1/0
    t = load_file(ckpt)
    from safetensors import safe_open
    with safe_open(ckpt, "np") as f:
        meta = f.metadata()
    rng = np.random.default_rng(seed)
    t = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in t.items()}
    save_file(t, ckpt, metadata=meta)
    hf_dir = os.path.join(d, "hf")
    run(normlab, "export", "--checkpoint", ckpt, "--hf", hf_dir)
    cfg = json.loads(meta["config"])
    T = 9
    vocab = cfg["vocab"]
    ids, mask, tt = padded_batch(vocab, 2, T, [T, 5], seed, types=max(cfg.get("type_vocab", 0), 0))
    labels = np.where(mask == 1, ids, -100).astype(np.int32)
    tok = os.path.join(d, "tokens.safetensors")
    tensors = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    if tt is not None:
        tensors["token_type_ids"] = tt
    save_file(tensors, tok)
    out = os.path.join(d, "normlab.safetensors")
    run(normlab, "grads", "--checkpoint", ckpt, "--tokens", tok, "--out", out)
    got = load_file(out)
    model = loader.from_pretrained(hf_dir, **(dict(attn_implementation="eager") if eager else {})).double().eval()
    args = dict(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)))
    if eager:
        args["use_cache"] = False
    if tt is not None:
        args["token_type_ids"] = torch.from_numpy(tt.astype(np.int64))
    with torch.no_grad():
        o = model(**args, output_hidden_states=True)
    if "logits" in got:
        check(f"{label} exported logits", got["logits"], o.logits.numpy(), FWD_TOL)
    else:
        check(f"{label} exported last hidden state", got[f"hidden.{cfg['n_layers']}"], o.hidden_states[-1].numpy(), FWD_TOL)
    # and back: the exported directory read by normlab is the same model
    out2 = os.path.join(d, "normlab_from_hf.safetensors")
    run(normlab, "grads", "--checkpoint", hf_dir, "--tokens", tok, "--out", out2)
    again = load_file(out2)
    for k in got:
        if not np.array_equal(got[k], again[k]):
            failures.append(f"{label}: {k} differs after export and re-import")
    print(f"{label}: exported as {type(model).__name__}; from_pretrained outputs and the re-import compared")


# ---------------------------------------------------------------------------------------------
# Bad input

def bad_input(normlab, work):
    base = os.path.join(work, "bad")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    torch.manual_seed(0)
    good = os.path.join(base, "good")
    BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=24, max_position_embeddings=16)).save_pretrained(good, safe_serialization=True)
    tok = os.path.join(base, "tokens.safetensors")
    save_file({"input_ids": np.zeros((1, 4), np.int32), "labels": np.zeros((1, 4), np.int32)}, tok)

    def variant(name, edit):
        d = os.path.join(base, name)
        shutil.copytree(good, d)
        edit(d)
        return d

    def edit_config(**changes):
        def f(d):
            p = os.path.join(d, "config.json")
            c = json.load(open(p))
            for k, v in changes.items():
                if v is None:
                    c.pop(k, None)
                else:
                    c[k] = v
            json.dump(c, open(p, "w"))
        return f

    def edit_tensors(fn):
        def f(d):
            p = os.path.join(d, "model.safetensors")
            t = load_file(p)
            fn(t)
            save_file(t, p, metadata={"format": "pt"})
        return f

    def remove(name):
        return lambda d: os.remove(os.path.join(d, name))

    def pickle_only(d):
        os.remove(os.path.join(d, "model.safetensors"))
        open(os.path.join(d, "pytorch_model.bin"), "wb").write(b"\x80\x02}q\x00.")

    def write(name, text):
        return lambda d: open(os.path.join(d, name), "w").write(text)

    key = "bert.encoder.layer.0.attention.self.query.weight"
    cases = [
        ("no_config", remove("config.json"), "no config.json"),
        ("bad_json", write("config.json", "{not json"), "not valid JSON"),
        ("falcon", edit_config(model_type="falcon"), "model_type \"falcon\" is not supported"),
        ("llama with bert's architecture", edit_config(model_type="llama"),
         "architecture \"BertForMaskedLM\" is not supported"),
        ("no_type", edit_config(model_type=None), "no \"model_type\""),
        ("relative_pos", edit_config(position_embedding_type="relative_key"), "position_embedding_type"),
        ("decoder", edit_config(is_decoder=True), "is_decoder"),
        ("activation", edit_config(hidden_act="silu"), "hidden_act"),
        ("arch", edit_config(architectures=["BertForSequenceClassification"]), "BertForSequenceClassification"),
        ("missing_tensor", edit_tensors(lambda t: t.pop(key)), "missing tensor"),
        ("extra_tensor", edit_tensors(lambda t: t.__setitem__("bert.encoder.layer.0.extra.weight", np.zeros(3, np.float32))), "unexpected tensor"),
        ("wrong_shape", edit_tensors(lambda t: t.__setitem__(key, np.zeros((16, 15), np.float32))), "has shape"),
        ("int_weight", edit_tensors(lambda t: t.__setitem__(key, np.zeros((16, 16), np.int32))), "not a floating-point type"),
        ("size_mismatch", edit_config(hidden_size=24), "has shape"),
        ("pickle", pickle_only, "pickle"),
        ("no_weights", remove("model.safetensors"), "no model.safetensors"),
        ("truncated", lambda d: open(os.path.join(d, "model.safetensors"), "r+b").truncate(100), "model.safetensors"),
        ("shard_escape", write("model.safetensors.index.json", json.dumps({"weight_map": {key: "../x.safetensors"}})), "not a file name"),
    ]
    for name, edit, expected in cases:
        d = variant(name, edit)
        out = os.path.join(base, name + ".out.safetensors")
        p = run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out, expect_ok=False)
        msg = (p.stderr or "").strip()
        if p.returncode == 0 or expected not in msg or "error" not in msg or len(msg.splitlines()) != 1:
            failures.append(f"bad input '{name}': exit {p.returncode}, expected one line with '{expected}', got: {msg!r}")
        if os.path.exists(out):
            failures.append(f"bad input '{name}': an output was written")
    # F16 and BF16 weights are converted exactly (not misread): same outputs as the F32 model
    for dtype in ("F32", "F16", "BF16"):
        d = os.path.join(base, "dtype_" + dtype)
        shutil.copytree(good, d)
        m = BertForMaskedLM.from_pretrained(good)
        if dtype == "F32":
            m = m.half().float()  # the same values as the F16 copy
        elif dtype == "F16":
            m = m.half()
        else:
            m = m.to(torch.bfloat16)
        m.save_pretrained(d, safe_serialization=True)
        ref = BertForMaskedLM.from_pretrained(d, torch_dtype=torch.float32).double()
        out = os.path.join(base, "dtype_" + dtype + ".out.safetensors")
        run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out)
        with torch.no_grad():
            o = ref(input_ids=torch.zeros((1, 4), dtype=torch.int64))
        check(f"{dtype} weights: logits", load_file(out)["logits"], o.logits.numpy(), FWD_TOL)
    # export refusals: a model that is not exactly GPT-2 or BERT, and an existing directory
    ck = os.path.join(base, "rms.safetensors")
    run(normlab, "init", "--out", ck, "--set", "model.norm=rmsnorm", "--set", "model.d_model=16", "--set", "model.n_heads=2")
    p = run(normlab, "export", "--checkpoint", ck, "--hf", os.path.join(base, "rms_hf"), expect_ok=False)
    if p.returncode == 0 or "not exactly a Llama-family model: positions are not RoPE" not in p.stderr \
            or os.path.exists(os.path.join(base, "rms_hf")):
        failures.append(f"export of an RMSNorm model with learned positions and GELU must be refused with the "
                        f"reasons: {p.stderr!r}")
    # a Llama block with per-head QK-norm is Qwen3's only without v_norm and biases
    llama = ["--set", "model.norm=rmsnorm", "--set", "model.positions=rope", "--set", "model.activation=swiglu",
             "--set", "model.placement=pre", "--set", "model.bias=none", "--set", "model.d_model=16",
             "--set", "model.n_heads=2", "--set", "model.qk_norm=heads"]
    for extra, reason in ((["--set", "model.v_norm=true"], "Qwen3's only with gains on q and k (no v_norm)"),
                          (["--set", "model.bias=qkv"], "Qwen3's only with gains on q and k (no v_norm) and no biases")):
        ck3 = os.path.join(base, "qk.safetensors")
        run(normlab, "init", "--out", ck3, "--force", *llama, *extra)
        p = run(normlab, "export", "--checkpoint", ck3, "--hf", os.path.join(base, "qk_hf"), expect_ok=False)
        if p.returncode == 0 or reason not in p.stderr or os.path.exists(os.path.join(base, "qk_hf")):
            failures.append(f"export of a pre-norm QK-norm model with {extra[1]} must be refused naming Qwen3: {p.stderr!r}")
    # a divisor per frequency (from a GGUF file's rope_freqs) has no config.json form but llama3's parameters
    ck4 = os.path.join(base, "freqs.safetensors")
    run(normlab, "init", "--out", ck4, "--force", *llama[:-2], "--set", "model.rope_freq_factors=[1, 1.5, 3, 8]")
    p = run(normlab, "export", "--checkpoint", ck4, "--hf", os.path.join(base, "freqs_hf"), expect_ok=False)
    if p.returncode == 0 or "RoPE has a divisor per frequency" not in p.stderr or os.path.exists(os.path.join(base, "freqs_hf")):
        failures.append(f"export of a model with rope_freq_factors must be refused naming them: {p.stderr!r}")
    ck2 = os.path.join(base, "enc.safetensors")
    run(normlab, "init", "--out", ck2, "--set", "model.arch=encoder", "--set", "model.placement=post",
        "--set", "model.d_model=16", "--set", "model.n_heads=2")
    p = run(normlab, "export", "--checkpoint", ck2, "--hf", os.path.join(base, "enc_hf"), expect_ok=False)
    if p.returncode == 0 or "embed_norm" not in p.stderr:
        failures.append(f"export of an encoder without embedding norm must be refused: {p.stderr!r}")
    before = open(os.path.join(good, "model.safetensors"), "rb").read()
    p = run(normlab, "export", "--checkpoint", good, "--hf", good, expect_ok=False)
    if p.returncode == 0 or "already holds" not in p.stderr or open(os.path.join(good, "model.safetensors"), "rb").read() != before:
        failures.append(f"export into an existing model directory without --force must be refused: {p.stderr!r}")
    print(f"bad input: {len(cases)} broken directories refused with one message each; F16/BF16 converted; export refusals")


def olmo2_cases(nl, w):
    """OLMo 2 (transformers 4.47 or later): the reordered block (norms on the branch outputs), q and k
    normalized over their whole projections before RoPE, grouped queries, untied; in and out."""
    llama_case(nl, w, "olmo2_reordered_qknorm", 17, family="olmo2", vocab_size=59, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=44, max_position_embeddings=16,
               rms_norm_eps=1e-6, rope_theta=5e5)
    export_case(nl, w, "export_olmo2", ["model.d_model=24", "model.n_heads=4", "model.n_kv_heads=2", "model.n_layers=2",
                                        "model.seq_len=12", "model.d_ff=30", "model.norm=rmsnorm",
                                        "model.positions=rope", "model.activation=swiglu", "model.bias=none",
                                        "model.placement=reordered", "model.qk_norm=whole", "model.head=untied",
                                        "model.vocab=70"], olmo2_classes()[1], 18)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--olmo2", action="store_true",
                    help="only the OLMo 2 cases (they need transformers 4.47 or later: build/pyenv-tf447)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    nl, w = a.normlab, a.workdir
    if a.olmo2:
        olmo2_cases(nl, w)
        finish("all OLMo 2 parity checks passed")
        return
    gpt2_case(nl, w, "gpt2_tanh", 1, vocab_size=97, n_positions=20, n_embd=36, n_layer=3, n_head=3, n_inner=50)
    gpt2_case(nl, w, "gpt2_erf_sharded", 2, shard=True, vocab_size=61, n_positions=16, n_embd=24, n_layer=2,
              n_head=4, activation_function="gelu", layer_norm_epsilon=1e-6)
    gpt2_case(nl, w, "gpt2_relu", 3, vocab_size=50, n_positions=16, n_embd=20, n_layer=1, n_head=5,
              activation_function="relu")
    bert_case(nl, w, "bert_mlm", 4, vocab_size=101, hidden_size=40, num_hidden_layers=2, num_attention_heads=5,
              intermediate_size=70, max_position_embeddings=24, type_vocab_size=3)
    bert_case(nl, w, "bert_headless", 5, mlm=False, vocab_size=83, hidden_size=30, num_hidden_layers=3,
              num_attention_heads=3, intermediate_size=45, max_position_embeddings=16, type_vocab_size=2)
    bert_case(nl, w, "bert_mlm_tanh_gelu", 6, vocab_size=70, hidden_size=12, num_hidden_layers=1,
              num_attention_heads=1, intermediate_size=7, max_position_embeddings=12, type_vocab_size=1,
              hidden_act="gelu_new", layer_norm_eps=1e-7)
    export_case(nl, w, "export_gpt2", ["model.d_model=24", "model.n_heads=3", "model.n_layers=2", "model.seq_len=12",
                                       "model.d_ff=40", "model.placement=pre"], GPT2LMHeadModel, 7)
    export_case(nl, w, "export_bert_mlm", ["model.arch=encoder", "model.d_model=20", "model.n_heads=4",
                                           "model.n_layers=2", "model.seq_len=12", "model.placement=post",
                                           "model.embed_norm=true", "model.head=mlm", "model.type_vocab=2",
                                           "model.activation=gelu_exact", "model.eps=1e-12"], BertForMaskedLM, 8)
    export_case(nl, w, "export_bert_headless", ["model.arch=encoder", "model.d_model=18", "model.n_heads=3",
                                                "model.n_layers=1", "model.seq_len=10", "model.placement=post",
                                                "model.embed_norm=true", "model.head=none"], BertModel, 9)
    llama_case(nl, w, "llama_gqa_untied", 10, vocab_size=89, hidden_size=48, num_hidden_layers=3,
               num_attention_heads=6, num_key_value_heads=2, intermediate_size=70, max_position_embeddings=32,
               rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=False)
    llama_case(nl, w, "llama_mqa_tied_sharded", 11, shard=True, vocab_size=53, hidden_size=20, num_hidden_layers=2,
               num_attention_heads=5, num_key_value_heads=1, intermediate_size=33, max_position_embeddings=16,
               tie_word_embeddings=True)
    llama_case(nl, w, "llama_biases_mha", 12, vocab_size=40, hidden_size=16, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=2, intermediate_size=24, max_position_embeddings=16,
               attention_bias=True, mlp_bias=True, tie_word_embeddings=False)
    llama_case(nl, w, "qwen2_qkv_bias", 13, family="qwen2", vocab_size=71, hidden_size=36, num_hidden_layers=2,
               num_attention_heads=6, num_key_value_heads=3, intermediate_size=50, max_position_embeddings=24,
               rope_theta=1e6, tie_word_embeddings=True)
    # Gemma: GeGLU (tanh GELU), the embedding times sqrt(hidden_size), RMSNorm gains 1 + w (perturbed
    # weights: w away from 0), tied; multi-query here
    llama_case(nl, w, "gemma_mqa_geglu", 15, family="gemma", vocab_size=61, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=1, head_dim=8, intermediate_size=40,
               max_position_embeddings=16, hidden_activation="gelu_pytorch_tanh")
    # Gemma 2: the sandwich (each branch's output normalized), its own score scale, soft caps on the scores
    # and the final logits (small caps, so the perturbed model's scores and logits reach them), a sliding
    # window longer than the sequence, grouped queries; query_pre_attn_scalar != head_dim
    llama_case(nl, w, "gemma2_sandwich_softcap", 16, family="gemma2", vocab_size=67, hidden_size=32,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=40,
               max_position_embeddings=16, query_pre_attn_scalar=5, attn_logit_softcapping=0.8,
               final_logit_softcapping=1.5, sliding_window=12, hidden_activation="gelu_pytorch_tanh")
    # heads of another width than hidden_size / heads (Gemma 2's and Qwen3's real checkpoints: 2048 = 8 x 256
    # against 2304 in Gemma 2 2B): wider here in a Llama with grouped queries, narrower in a Gemma 2
    llama_case(nl, w, "llama_wide_heads", 17, vocab_size=45, hidden_size=24, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=10, intermediate_size=30,
               max_position_embeddings=16, tie_word_embeddings=False)
    llama_case(nl, w, "gemma2_narrow_heads", 18, family="gemma2", vocab_size=51, hidden_size=32,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=6, intermediate_size=40,
               max_position_embeddings=16, query_pre_attn_scalar=6, attn_logit_softcapping=3.0,
               final_logit_softcapping=5.0, sliding_window=12, hidden_activation="gelu_pytorch_tanh")
    # RoPE scaling: Llama 3.1's llama3 (a divisor per frequency; original_max_position_embeddings 32 puts the
    # six frequencies of a 12-wide head in every band: kept, interpolated, divided by 8) and linear (Qwen2)
    llama_case(nl, w, "llama3_rope_scaling", 19, vocab_size=47, hidden_size=36, num_hidden_layers=2,
               num_attention_heads=3, num_key_value_heads=1, intermediate_size=40, max_position_embeddings=64,
               rope_theta=1e4, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    config_refusals(nl, w, "llama3_rope_scaling", ROPE_REFUSALS)
    # Phi-3: q, k, v fused in qkv_proj and gate, up in gate_up_proj; a sliding window (here past the 11 tokens)
    llama_case(nl, w, "phi3_fused", 23, family="phi3", vocab_size=61, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64,
               sliding_window=15, rope_theta=1e4, pad_token_id=60, bos_token_id=1, eos_token_id=60)
    config_refusals(nl, w, "phi3_fused", PHI3_REFUSALS)
    # Phi-3.5's LongRoPE within its original length: short_factor as divisors, cos and sin times
    # sqrt(1 + ln(128 / 32) / ln(32)) (scores times its square); 11 tokens <= 32 (seq_len capped there)
    llama_case(nl, w, "phi3_longrope", 24, family="phi3", vocab_size=61, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=40, max_position_embeddings=128,
               original_max_position_embeddings=32, rope_theta=1e4, pad_token_id=60, bos_token_id=1,
               eos_token_id=60, rope_scaling={"type": "longrope", "short_factor": [1.0, 1.7, 3.1, 9.5],
                                              "long_factor": [1.0, 4.0, 16.0, 64.0]})
    longrope_factor(nl, w, "phi3_longrope")
    # Mistral: Llama without biases, a sliding window on every layer (12 >= the 11 tokens: seq_len is capped
    # at it, where it masks nothing) and, here, wider heads (head_dim, as Mistral Nemo)
    llama_case(nl, w, "mistral_window_gqa", 22, family="mistral", vocab_size=57, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=12, intermediate_size=44,
               max_position_embeddings=64, sliding_window=12, rope_theta=1e6, tie_word_embeddings=False)
    # YaRN as transformers 4.45 computes it (correction range from max_position_embeddings, here with no
    # original length, so 4.45 and 5 agree): a 12-wide head's six frequencies kept, blended and interpolated
    llama_case(nl, w, "llama_yarn", 25, vocab_size=47, hidden_size=36, num_hidden_layers=2,
               num_attention_heads=3, num_key_value_heads=1, intermediate_size=40, max_position_embeddings=64,
               rope_theta=1e4, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    llama_case(nl, w, "qwen2_linear_rope", 20, family="qwen2", vocab_size=41, hidden_size=24, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=1, intermediate_size=30, max_position_embeddings=32,
               rope_theta=1e4, rope_scaling={"type": "linear", "factor": 4.0})
    qwen3_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    gemma3_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    smollm3_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    phi4mini_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    qwen3_yarn_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    olmo3_golden(nl, w, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    export_case(nl, w, "export_llama", ["model.d_model=24", "model.n_heads=4", "model.n_kv_heads=2", "model.n_layers=2",
                                        "model.seq_len=12", "model.d_ff=30", "model.norm=rmsnorm",
                                        "model.positions=rope", "model.rope_base=5e5", "model.activation=swiglu",
                                        "model.bias=none", "model.head=untied", "model.vocab=90"], LlamaForCausalLM, 14)
    export_case(nl, w, "export_llama_wide_heads", ["model.d_model=16", "model.n_heads=4", "model.n_kv_heads=2",
                                                   "model.head_dim=6", "model.n_layers=2", "model.seq_len=12",
                                                   "model.d_ff=20", "model.norm=rmsnorm", "model.positions=rope",
                                                   "model.activation=swiglu", "model.bias=none", "model.head=untied",
                                                   "model.vocab=50"], LlamaForCausalLM, 16)
    export_case(nl, w, "export_qwen2", ["model.d_model=24", "model.n_heads=3", "model.n_kv_heads=1", "model.n_layers=2",
                                        "model.seq_len=12", "model.d_ff=30", "model.norm=rmsnorm",
                                        "model.positions=rope", "model.activation=swiglu", "model.bias=qkv",
                                        "model.vocab=77"], Qwen2ForCausalLM, 15)
    export_case(nl, w, "export_llama_linear_rope", ["model.d_model=24", "model.n_heads=2", "model.n_layers=2",
                                                    "model.seq_len=12", "model.d_ff=30", "model.norm=rmsnorm",
                                                    "model.positions=rope", "model.rope_scale=4",
                                                    "model.activation=swiglu", "model.bias=none", "model.vocab=60"],
                LlamaForCausalLM, 21)
    # Gemma (GeGLU, the embedding times sqrt(d), gains written as w for 1 + w) and Gemma 2 (the sandwich, its
    # own score scale, soft caps small enough to bend)
    gemma = ["model.d_model=24", "model.n_heads=4", "model.n_kv_heads=2", "model.n_layers=2", "model.seq_len=12",
             "model.d_ff=30", "model.norm=rmsnorm", "model.positions=rope", "model.activation=geglu", "model.bias=none",
             f"model.embed_scale={math.sqrt(24)!r}", "model.vocab=70"]
    export_case(nl, w, "export_gemma", gemma, GemmaForCausalLM, 25)
    export_case(nl, w, "export_gemma2", gemma + ["model.placement=sandwich", "model.attn_scale=0.3",
                                                 "model.attn_softcap=0.8", "model.logit_softcap=1.5"],
                Gemma2ForCausalLM, 26, eager=True)
    bad_input(nl, w)
    finish("all Hugging Face parity checks passed")


if __name__ == "__main__":
    main()
