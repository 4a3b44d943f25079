"""tf5_golden.py: writes tests/data/qwen3-tiny/, gemma3-tiny/, gemma3-swa6-tiny/, smollm3-tiny/, phi4mini-tiny/,
qwen3-yarn-tiny/, olmo2-tiny/ and olmo3-tiny/, the references a Qwen3, two Gemma 3, a SmolLM3, a Phi-4-mini-like
Phi-3, a Qwen3 with YaRN, an OLMo 2 and an OLMo 3 directory (or the GGUF file converted from it) are checked against.

Qwen3ForCausalLM needs transformers 4.51 or later, Gemma3ForCausalLM 4.50, SmolLM3ForCausalLM 4.53, which do not
import with the torch 1.13 of the test environment; so the references are made once, here, by a
current transformers on a current torch (the benchmark venv: bench/.venv, `pip install transformers
safetensors`), and committed, one directory per model:
  - config.json + model.safetensors: a random model, every weight moved off its initial value:
    qwen3-tiny a Qwen3ForCausalLM (heads wider than hidden_size / heads, grouped queries, QK-norm per
    head, untied head); gemma3-tiny a Gemma3ForCausalLM (heads wider too, one key-value head, QK-norm
    per head, the sandwich, (1 + w) gains, sqrt(d) embedding scale, two local layers and a global one
    with RoPE bases 1e4 and 1e6 and linear scaling 8 on the global layer, tied head); gemma3-swa6-tiny the
    same block over seven layers in Gemma 3's real pattern (a global layer after every five local ones,
    the rule llama.cpp hard-codes: tests/torch/gguf_check.py converts it) with a final soft cap; smollm3-tiny a
    SmolLM3ForCausalLM (four layers, no RoPE on every second, grouped queries, tied head); phi4mini-tiny a
    Phi3ForCausalLM as Phi-4-mini is made (partial_rotary_factor 0.75: six of each head's eight dimensions
    rotate; LongRoPE, whose factor on cos and sin scales those six and not the other two; tied head);
    qwen3-yarn-tiny a Qwen3ForCausalLM with YaRN as Qwen3's model cards set it (factor 4 over an original
    length of 256, here below max_position_embeddings: transformers 5 takes the correction range from the
    original length, 4.45 from max_position_embeddings; the 16-wide heads put frequencies in all three bands);
    olmo2-tiny an Olmo2ForCausalLM (norms on the branch outputs, QK-norm over the whole projections, grouped
    queries, untied head: what tests/torch/gguf_check.py converts to an olmo2 GGUF file); olmo3-tiny an
    Olmo3ForCausalLM (OLMo 2's block, three sliding-window layers and a full one, YaRN on the full one only);
  - golden.safetensors: a padded batch (input_ids, attention_mask, labels) and what transformers
    computes from it in float64: every hidden state, the final norm's output, the logits, the loss
    and the gradient of every parameter (named "grad.<Hugging Face name>");
  - versions.txt: the torch and transformers versions that made it.
hf_parity.py (tf5_golden) then checks normlab's `grads` on each directory against its file.
Run: bench/.venv/bin/python tests/torch/tf5_golden.py [qwen3] [gemma3] [gemma3_swa6] [smollm3] [phi4mini]
     [qwen3_yarn] [olmo2] [olmo3]   (default: all)
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
import sys
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, Olmo2Config, Olmo2ForCausalLM, Olmo3Config,
                          Olmo3ForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM)

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def qwen3():
    torch.manual_seed(21)
    config = Qwen3Config(vocab_size=57, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=10, intermediate_size=36, max_position_embeddings=16,
                         rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                         use_sliding_window=False, attn_implementation="eager")
    return Qwen3ForCausalLM(config), config, os.path.join(DATA, "qwen3-tiny")


def gemma3():
    torch.manual_seed(31)
    config = Gemma3TextConfig(vocab_size=61, hidden_size=24, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=1, head_dim=8, intermediate_size=36, max_position_embeddings=32,
                              rms_norm_eps=1e-6, query_pre_attn_scalar=8, sliding_window=16,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                  "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                              attn_implementation="eager")
    return Gemma3ForCausalLM(config), config, os.path.join(DATA, "gemma3-tiny")


def gemma3_swa6():
    """Gemma 3 with its real layer pattern (five local layers, then a global one: llama.cpp's fixed rule, so
    the GGUF check can convert it) over seven layers, and a final soft cap."""
    torch.manual_seed(51)
    config = Gemma3TextConfig(vocab_size=47, hidden_size=16, num_hidden_layers=7, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=8, intermediate_size=24, max_position_embeddings=32,
                              rms_norm_eps=1e-6, query_pre_attn_scalar=8, sliding_window=16,
                              final_logit_softcapping=2.0,
                              layer_types=["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                  "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                              attn_implementation="eager")
    return Gemma3ForCausalLM(config), config, os.path.join(DATA, "gemma3-swa6-tiny")


def smollm3():
    torch.manual_seed(41)
    config = SmolLM3Config(vocab_size=53, hidden_size=24, num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=36, max_position_embeddings=32, rope_theta=5e4,
                           rms_norm_eps=1e-6, no_rope_layer_interval=2, tie_word_embeddings=True, pad_token_id=None,
                           bos_token_id=None, eos_token_id=None,
                           attn_implementation="eager")
    return SmolLM3ForCausalLM(config), config, os.path.join(DATA, "smollm3-tiny")


def phi4mini():
    torch.manual_seed(61)
    config = Phi3Config(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=40, max_position_embeddings=128,
                        original_max_position_embeddings=32, partial_rotary_factor=0.75, rope_theta=1e4,
                        rope_scaling={"type": "longrope", "short_factor": [1.0, 2.3, 7.1],
                                      "long_factor": [1.0, 4.0, 16.0]},
                        tie_word_embeddings=True, pad_token_id=60, bos_token_id=1, eos_token_id=60,
                        attn_implementation="eager")
    return Phi3ForCausalLM(config), config, os.path.join(DATA, "phi4mini-tiny")


def qwen3_yarn():
    torch.manual_seed(71)
    config = Qwen3Config(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, intermediate_size=40, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                                          "rope_theta": 1e4},
                         rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                         attn_implementation="eager")
    return Qwen3ForCausalLM(config), config, os.path.join(DATA, "qwen3-yarn-tiny")


def olmo2():
    torch.manual_seed(81)
    config = Olmo2Config(vocab_size=59, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64, rope_theta=5e5,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, pad_token_id=None,
                         bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    return Olmo2ForCausalLM(config), config, os.path.join(DATA, "olmo2-tiny")


def olmo3():
    """OLMo 3 as its 7B and 32B configs state it (transformers 4's keys: one rope_theta, rope_scaling YaRN,
    which Olmo3Config applies to the full-attention layers only; three sliding-window layers, then a full
    one), 16-wide heads so YaRN's blend has frequencies in all three bands."""
    torch.manual_seed(91)
    config = Olmo3Config(vocab_size=43, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=256, sliding_window=16,
                         rope_theta=1e4, rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                                       "beta_slow": 1.0, "original_max_position_embeddings": 64,
                                                       "attention_factor": 1.1386294361119891},
                         rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, pad_token_id=None,
                         bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    return Olmo3ForCausalLM(config), config, os.path.join(DATA, "olmo3-tiny")


def write(model, config, OUT):
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(22)
    with torch.no_grad():  # away from init: norm gains off 1, every matrix moved
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    model.save_pretrained(OUT)
    B, T = 3, 11
    rng = np.random.default_rng(23)
    ids = rng.integers(0, config.vocab_size, size=(B, T)).astype(np.int32)
    mask = np.ones((B, T), dtype=np.int32)
    for b, n in enumerate([T, T - 3, 1]):  # right padding
        mask[b, n:] = 0
    labels = np.full_like(ids, -100)
    labels[:, :-1] = np.where(mask[:, 1:] == 1, ids[:, 1:], -100)
    ref = model.double().eval()
    hf_labels = np.where(mask == 1, ids, -100).astype(np.int64)
    last = {}
    hook = ref.model.layers[-1].register_forward_hook(lambda m, i, o: last.update(h=o[0] if isinstance(o, tuple) else o))
    o = ref(input_ids=torch.from_numpy(ids.astype(np.int64)), attention_mask=torch.from_numpy(mask.astype(np.int64)),
            labels=torch.from_numpy(hf_labels), output_hidden_states=True, use_cache=False)
    hook.remove()
    o.loss.backward()
    L = config.num_hidden_layers
    golden = {"input_ids": ids, "attention_mask": mask, "labels": labels,
              "logits": o.logits.detach().numpy(), "loss": np.array([o.loss.item()]),
              "hidden.final": o.hidden_states[L].detach().numpy(), f"hidden.{L}": last["h"].detach().numpy()}
    for l in range(L):
        golden[f"hidden.{l}"] = o.hidden_states[l].detach().numpy()
    for name, p in ref.named_parameters():
        if p.grad is not None:
            golden["grad." + name] = p.grad.numpy()
    save_file({k: np.ascontiguousarray(v) for k, v in golden.items()}, os.path.join(OUT, "golden.safetensors"))
    with open(os.path.join(OUT, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\nnumpy {np.__version__}\n")
    print(f"wrote {OUT}: {sum(1 for k in golden if k.startswith('grad.'))} gradients, loss {o.loss.item():.6f}")


if __name__ == "__main__":
    makers = {"qwen3": qwen3, "gemma3": gemma3, "gemma3_swa6": gemma3_swa6, "smollm3": smollm3, "phi4mini": phi4mini,
              "qwen3_yarn": qwen3_yarn, "olmo2": olmo2, "olmo3": olmo3}
    for name in sys.argv[1:] or list(makers):
        write(*makers[name]())
