"""hf_parity_tf5.py: models only transformers 5 implements (Qwen3, Gemma 3, SmolLM3, OLMo 3, Phi-3 with partial
rotary as Phi-4-mini, RoPE scaling by YaRN as transformers 5 computes it), against what
transformers 5 computed from them: tests/data/<name>-tiny holds a directory it wrote and its golden outputs
(made by tf5_golden.py, since these models need a transformers newer than the suite's torch allows). Every
hidden state, the logits, the loss and every gradient; Qwen3's export bit for bit; what normlab does not
represent refused by name. Called by hf_parity.py.
"""
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from hf_common import FWD_TOL, GRAD_TOL, LOSS_TOL, check, config_refusals, failures, llama_grad, logits_with, run


def tf5_golden(normlab, work, source, name, sandwich=False, olmo2=False):
    """A directory transformers 5 wrote (tests/data/<name>-tiny, made by tf5_golden.py: these models need a
    transformers newer than this environment's torch allows) against what it computed from it: every hidden
    state, the logits, the loss and every gradient. Returns the token file and normlab's outputs."""
    d = os.path.join(source, "tests", "data", f"{name}-tiny")
    golden = load_file(os.path.join(d, "golden.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    tok = os.path.join(work, f"{name}_tokens.safetensors")
    save_file({k: golden[k] for k in ("input_ids", "labels", "attention_mask")}, tok)
    out = os.path.join(work, f"{name}_normlab.safetensors")
    run(normlab, "grads", "--checkpoint", d, "--tokens", tok, "--out", out, "--force")
    got = load_file(out)
    valid = golden["attention_mask"] == 1
    L = config["num_hidden_layers"]
    for key in [f"hidden.{l}" for l in range(L + 1)] + ["hidden.final", "logits"]:
        check(f"{name} {key}", got[key][valid], golden[key][valid], FWD_TOL)
    check(f"{name} loss", got["loss"], golden["loss"][0], LOSS_TOL)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    A = config["num_attention_heads"] * head_dim
    KV = config["num_key_value_heads"] * head_dim
    n = 0
    for key in golden:
        if key.startswith("grad."):
            check(f"{name} {key}", llama_grad(got, key[len("grad."):], A, KV, config["intermediate_size"], sandwich,
                                              olmo2),
                  golden[key], GRAD_TOL)
            n += 1
    arch = config["architectures"][0]
    print(f"tf5_golden: {arch} against transformers {open(os.path.join(d, 'versions.txt')).read().split()[3]}: "
          f"hidden states, logits, loss and {n} gradients compared")
    return d, config, tok, got


def export_roundtrip(normlab, work, name, d, config, tok, got, arch, keys, rope_theta=None, gains_shifted=False):
    """export --hf of the directory transformers 5 wrote (d) must give back its tensors bit for bit under the
    same names, the settings `keys` of its config.json and its rope_theta (default: rope_parameters'), and the
    same model on re-import. gains_shifted (Gemma: a gain 1 + w stored as w): the norm gains within half a unit
    of 1's last place (w -> 1 + w rounds once on import; the export's (1 + w) - 1 is exact)."""
    exported = os.path.join(work, f"{name}_export")
    shutil.rmtree(exported, ignore_errors=True)
    p = run(normlab, "export", "--checkpoint", d, "--hf", exported)
    if arch not in p.stdout + p.stderr:
        failures.append(f"{name} export: the command did not say {arch}: {p.stdout!r} {p.stderr!r}")
    theirs, ours = load_file(os.path.join(d, "model.safetensors")), load_file(os.path.join(exported, "model.safetensors"))
    if sorted(theirs) != sorted(ours):
        failures.append(f"{name} export: tensor names differ: only transformers' {sorted(set(theirs) - set(ours))}, "
                        f"only normlab's {sorted(set(ours) - set(theirs))}")
    for k in sorted(set(theirs) & set(ours)):
        same = theirs[k].dtype == ours[k].dtype and (
            np.array_equal(theirs[k], ours[k]) or
            (gains_shifted and "norm" in k and np.abs(theirs[k] - ours[k]).max() <= 2.0 ** -24))
        if not same:
            failures.append(f"{name} export: {k} differs from the file transformers wrote")
    with open(os.path.join(exported, "config.json")) as f:
        written = json.load(f)
    for key in keys:
        if written.get(key) != config.get(key):
            failures.append(f"{name} export: config.json {key} = {written.get(key)!r}, transformers wrote {config.get(key)!r}")
    rope_theta = rope_theta or config["rope_parameters"].get("rope_theta")
    if rope_theta is not None and written.get("rope_theta") != rope_theta:
        failures.append(f"{name} export: rope_theta {written.get('rope_theta')!r}, transformers wrote {rope_theta!r}")
    out2 = os.path.join(work, f"{name}_export_normlab.safetensors")
    run(normlab, "grads", "--checkpoint", exported, "--tokens", tok, "--out", out2, "--force")
    again = load_file(out2)
    for k in got:
        if not np.array_equal(got[k], again[k]):
            failures.append(f"{name} export: {k} differs after export and re-import")
    print(f"{name}: export --hf gives back its tensors {'(norm gains within 2^-24)' if gains_shifted else 'bit for bit'}, "
          "its config's settings and the same model")


LLAMA_KEYS = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "hidden_act", "rms_norm_eps", "vocab_size",
              "tie_word_embeddings", "attention_bias", "use_sliding_window", "max_position_embeddings")


def qwen3_golden(normlab, work, source):
    """Qwen3 (heads wider than hidden_size / heads, QK-norm per head, grouped queries) in, and out again."""
    d, config, tok, got = tf5_golden(normlab, work, source, "qwen3")
    export_roundtrip(normlab, work, "qwen3", d, config, tok, got, "Qwen3ForCausalLM", LLAMA_KEYS + ("head_dim",))


def smollm3_golden(normlab, work, source):
    """SmolLM3 (no RoPE on every second layer here, every fourth in the real model; tied head) in, and out
    again (no_rope_layers as transformers wrote them); NoPE patterns normlab's model.nope_every cannot state
    refused by name."""
    d, config, tok, got = tf5_golden(normlab, work, source, "smollm3")
    export_roundtrip(normlab, work, "smollm3", d, config, tok, got, "SmolLM3ForCausalLM",
                     LLAMA_KEYS + ("mlp_bias", "no_rope_layers", "no_rope_layer_interval"))
    config_refusals(normlab, work, "smollm3", [
        ("irregular no_rope_layers", {"no_rope_layers": [1, 0, 0, 1]}, "0 exactly on every N-th layer"),
        ("no_rope_layers of another length", {"no_rope_layers": [1, 0]}, "one entry (0 or 1) per layer"),
        ("sliding window", {"use_sliding_window": True}, "use_sliding_window")], d=d, tok=tok)


GEMMA3_KEYS = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "intermediate_size", "hidden_activation", "rms_norm_eps",
               "vocab_size", "tie_word_embeddings", "attention_bias", "query_pre_attn_scalar", "layer_types",
               "attn_logit_softcapping", "final_logit_softcapping", "use_bidirectional_attention")


def gemma3_golden(normlab, work, source):
    """Gemma 3 (a RoPE base per layer with linear scaling on the global one, QK-norm per head with (1 + w)
    gains, the sandwich, wider heads, multi-query attention) in, and out again: its tensors (the gains
    shifted back to w), its settings, the local layers' base and the global layers' scaling, the same model
    on re-import. (max_position_embeddings and sliding_window come back as the capped sequence length.)"""
    for name in ("gemma3", "gemma3-swa6"):  # gemma3-swa6: the real layer pattern, a final soft cap
        d, config, tok, got = tf5_golden(normlab, work, source, name, sandwich=True)
        rope = config["rope_parameters"]
        export_roundtrip(normlab, work, name, d, config, tok, got, "Gemma3ForCausalLM", GEMMA3_KEYS,
                         rope_theta=rope["full_attention"]["rope_theta"], gains_shifted=True)
        with open(os.path.join(work, f"{name}_export", "config.json")) as f:
            written = json.load(f)
        if (written.get("rope_local_base_freq") != rope["sliding_attention"]["rope_theta"] or
                written.get("rope_scaling") != {"rope_type": "linear", "factor": rope["full_attention"]["factor"]}):
            failures.append(f"{name} export: RoPE written as {written.get('rope_local_base_freq')!r}, "
                            f"{written.get('rope_scaling')!r}; transformers wrote {rope!r}")
    d = os.path.join(source, "tests", "data", "gemma3-tiny")
    # what normlab's Gemma 3 does not represent, each refused with one line naming it
    config_refusals(normlab, work, "gemma3", [
        ("multimodal", {"model_type": "gemma3"}, "image-and-text model"),
        ("irregular layer_types", {"layer_types": ["full_attention", "sliding_attention", "full_attention"]},
         "layer_types"),
        ("dynamic", {"rope_parameters": {"full_attention": {"rope_type": "dynamic", "factor": 8.0, "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
         "not dynamic"),
        ("scaled local layers", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                                     "sliding_attention": {"rope_type": "yarn", "factor": 8.0,
                                                                           "rope_theta": 1e4}}},
         "the local layers' RoPE has no scaling"),
        ("bidirectional", {"use_bidirectional_attention": True}, "use_bidirectional_attention")],
        d=d, tok=os.path.join(work, "gemma3_tokens.safetensors"))


def phi4mini_golden(normlab, work, source):
    """Phi-4-mini's attention: a Phi-3 that rotates 6 of each head's 8 dimensions (partial_rotary_factor 0.75),
    with LongRoPE, whose factor on cos and sin (sqrt(1 + ln(128 / 32) / ln 32)) scales those 6 and not the
    other 2 (model.rope_mscale: as one factor m^2 on the scores it would scale all 8); a share that rotates an
    odd number of dimensions refused by name."""
    import math
    d, config, tok, got = tf5_golden(normlab, work, source, "phi4mini")
    m = math.sqrt(1 + math.log(128 / 32) / math.log(32))
    def without_factor(c):  # the golden must see the factor: m = 1 gives other logits
        c["rope_parameters"]["attention_factor"] = 1.0
    if np.abs(logits_with(normlab, work, "phi4mini", d, tok, without_factor) - got["logits"]).max() < 1e-3:
        failures.append("phi4mini: LongRoPE's attention factor changes nothing (the test cannot see it)")
    whole = dict(config["rope_parameters"], partial_rotary_factor=1.0)  # 4 pairs: the 3 factors no longer fit
    odd = dict(config["rope_parameters"], partial_rotary_factor=0.625)  # 8 x 0.625 = 5 dimensions
    config_refusals(normlab, work, "phi4mini", [
        ("odd rotated share", {"partial_rotary_factor": 0.625, "rope_parameters": odd}, "partial_rotary_factor"),
        ("whole heads", {"partial_rotary_factor": 1.0, "rope_parameters": whole}, "one divisor per rotated pair (4)")],
        d=d, tok=tok)
    print(f"phi4mini_golden: partial rotary with LongRoPE's factor {m:.4f} on the rotated dimensions only")


def qwen3_yarn_golden(normlab, work, source):
    """Qwen3 with YaRN (factor 4 over an original length of 256, below max_position_embeddings 1024: the
    correction range from the original length, as transformers 5 computes it) against transformers 5; then
    the attention factor's three sources agree: an explicit attention_factor equal to DeepSeek's
    mscale / mscale_all_dim ratio gives the same logits as the ratio, and both differ from the default."""
    import math
    d, config, tok, got = tf5_golden(normlab, work, source, "qwen3-yarn")
    def rope(**kv):
        def edit(c):
            c["rope_parameters"].update(kv)
        return edit
    ratio = (0.1 * 2 * math.log(4) + 1) / (0.1 * 1 * math.log(4) + 1)
    by_ratio = logits_with(normlab, work, "qwen3-yarn", d, tok, rope(mscale=2.0, mscale_all_dim=1.0))
    by_factor = logits_with(normlab, work, "qwen3-yarn", d, tok, rope(attention_factor=ratio))
    if not np.abs(by_ratio - by_factor).max() < 1e-6 or np.abs(by_ratio - got["logits"]).max() < 1e-3:
        failures.append("qwen3-yarn: YaRN's attention factor from mscale / mscale_all_dim not as transformers computes it")
    config_refusals(normlab, work, "qwen3-yarn", [
        ("yarn factor below 1", {"rope_parameters": dict(config["rope_parameters"], factor=0.5)}, "yarn's factor"),
        ("dynamic", {"rope_parameters": dict(config["rope_parameters"], rope_type="dynamic")}, "not dynamic")],
        d=d, tok=tok)
    print("qwen3_yarn_golden: YaRN's blended frequencies and attention factor as transformers 5")


def olmo3_golden(normlab, work, source):
    """OLMo 3 (OLMo 2's block; three sliding-window layers, then a full one; YaRN on the full layer only,
    the sliding ones at their own base) against transformers 5. Shown to matter: the same weights with every
    layer full (YaRN everywhere) give other logits. Out again, without YaRN (export writes no per-frequency
    scaling): its tensors bit for bit, its layer kinds and both RoPE entries, the same model on re-import;
    a scaled sliding layer and an irregular pattern refused by name."""
    d, config, tok, got = tf5_golden(normlab, work, source, "olmo3", olmo2=True)
    every_full = logits_with(normlab, work, "olmo3", d, tok,
                             lambda c: c.update(layer_types=["full_attention"] * c["num_hidden_layers"]))
    if np.abs(every_full - got["logits"]).max() < 1e-3:
        failures.append("olmo3: the kind of each layer changes nothing (the test cannot see YaRN's place)")
    plain = os.path.join(work, "olmo3_plain")  # the full layer's YaRN dropped: what export --hf can state
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(d, plain)
    rope = config["rope_parameters"]
    plain_rope = {"full_attention": {"rope_type": "default", "rope_theta": rope["full_attention"]["rope_theta"]},
                  "sliding_attention": rope["sliding_attention"]}
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump(dict(config, rope_parameters=plain_rope), f)
    out = os.path.join(work, "olmo3_plain_normlab.safetensors")
    run(normlab, "grads", "--checkpoint", plain, "--tokens", tok, "--out", out, "--force")
    export_roundtrip(normlab, work, "olmo3", plain, dict(config, rope_parameters=plain_rope), tok, load_file(out),
                     "Olmo3ForCausalLM", LLAMA_KEYS[:-2] + ("layer_types", "rope_parameters"))
    refused = run(normlab, "export", "--checkpoint", d, "--hf", os.path.join(work, "olmo3_yarn_export"),
                  expect_ok=False)
    if refused.returncode != 1 or "rope_mscale" not in refused.stderr:
        failures.append(f"olmo3 export with YaRN: exit {refused.returncode}, {refused.stderr!r}")
    config_refusals(normlab, work, "olmo3", [
        ("irregular layer_types", {"layer_types": ["full_attention", "sliding_attention"] * 2}, "layer_types"),
        ("scaled sliding layers", {"rope_parameters": dict(rope, sliding_attention=rope["full_attention"])},
         "the local layers' RoPE has no scaling"),
        ("attention biases", {"attention_bias": True}, "attention_bias")], d=d, tok=tok)
    print("olmo3_golden: YaRN on the full layer only, as transformers 5; export without it bit for bit")
