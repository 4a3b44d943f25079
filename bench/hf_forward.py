"""hf_forward.py: transformers' forward of a randomly initialized model of a published shape, the peer of
bench/scale.sh's normlab rows (run in bench/.venv, never in the tests).

    python bench/hf_forward.py d_model=2048 n_layers=16 n_heads=32 n_kv_heads=8 d_ff=8192 vocab=128256 ...
                               [--batch 8] [--seq 128] [--threads 2]

The arguments are scale.sh's shape keys (normlab's model keys): the model is transformers' Qwen3 when
qk_norm=heads (RMSNorm on each head's queries and keys), else Llama; RMSNorm, SwiGLU, RoPE, no biases,
the output matrix tied to the embedding, float32, as normlab's model of the same keys. The weights are
random (transformers' own initialization); timing and memory do not depend on them. Prints one line,
"timing: init X s, forward Y s (transformers V, torch W, N threads)": the forward is the median of 3
after one warm-up, under torch.inference_mode(), of batch x seq random ids.
"""
from __future__ import annotations

import argparse
import statistics
import time

# normlab's key -> transformers' config field (the rest of a shape's keys are handled below)
FIELDS = {
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "d_ff": "intermediate_size",
    "vocab": "vocab_size",
    "rope_base": "rope_theta",
    "eps": "rms_norm_eps",
    "seq_len": "max_position_embeddings",
}
INTS = {"d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab", "seq_len"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="+", help="key=value, scale.sh's shape keys")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    keys = dict(kv.split("=", 1) for kv in a.shape)
    unknown = set(keys) - set(FIELDS) - {"qk_norm"}
    if unknown:
        raise SystemExit(f"hf_forward.py: unknown shape keys {sorted(unknown)} (known: {sorted(FIELDS)}, qk_norm)")

    import torch
    import transformers

    torch.set_num_threads(a.threads)
    fields = {FIELDS[k]: (int(v) if k in INTS else float(v)) for k, v in keys.items() if k in FIELDS}
    fields.setdefault("rms_norm_eps", 1e-5)  # configs/llama.toml's eps
    fields.setdefault("head_dim", fields["hidden_size"] // fields["num_attention_heads"])
    common = dict(hidden_act="silu", tie_word_embeddings=True, attention_bias=False, torch_dtype="float32", **fields)
    if keys.get("qk_norm") == "heads":
        config = transformers.Qwen3Config(**common)
    else:
        config = transformers.LlamaConfig(mlp_bias=False, **common)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    init = time.perf_counter() - t0
    ids = torch.randint(0, config.vocab_size, (a.batch, a.seq))
    times = []
    with torch.inference_mode():
        for rep in range(4):
            t0 = time.perf_counter()
            model(input_ids=ids)
            if rep:
                times.append(time.perf_counter() - t0)
    print(f"timing: init {init:.1f} s, forward {statistics.median(times):.2f} s (transformers {transformers.__version__}, "
          f"torch {torch.__version__}, {a.threads} threads)")


if __name__ == "__main__":
    main()
