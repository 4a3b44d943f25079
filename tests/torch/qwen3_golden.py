"""qwen3_golden.py: writes tests/data/qwen3-tiny/, the reference a Qwen3 directory is checked against.

Qwen3ForCausalLM needs transformers 4.51 or later, which does not import with the torch 1.13 of the
test environment; so the reference is made once, here, by a current transformers on a current torch
(the benchmark venv: bench/.venv, `pip install transformers safetensors`), and committed:
  - config.json + model.safetensors: a random Qwen3ForCausalLM (heads wider than hidden_size / heads,
    grouped queries, QK-norm per head, untied head), every weight moved off its initial value;
  - golden.safetensors: a padded batch (input_ids, attention_mask, labels) and what transformers
    computes from it in float64: every hidden state, the final norm's output, the logits, the loss
    and the gradient of every parameter (named "grad.<Hugging Face name>");
  - versions.txt: the torch and transformers versions that made it.
hf_parity.py (qwen3_golden) then checks normlab's `grads` on the directory against the file.
Run: bench/.venv/bin/python tests/torch/qwen3_golden.py
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "qwen3-tiny")


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(21)
    config = Qwen3Config(vocab_size=57, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=10, intermediate_size=36, max_position_embeddings=16,
                         rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                         use_sliding_window=False, attn_implementation="eager")
    model = Qwen3ForCausalLM(config)
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
    main()
