"""smollm2.py: how fast normlab works on a real 30-layer model, SmolLM2-135M-Instruct (GGUF, Q4_1).

The speed targets for a real model on a 2-core machine, each timed end to end as a user meets it:
  load      reading and dequantizing the file (`normlab.load`, the same reader every command uses)
  forward   a forward of 8 x 128 tokens through the module (after the load)
  dynamics  `normlab analyze dynamics --checkpoint FILE` with its defaults (the whole command)
  jacobian  `normlab analyze jacobian --no-full --lanczos-k 0 --seq-len 64`: every norm site and the
            token-local Jacobian extremes of all 30 blocks at T = 64 (the whole command)
  sinks     `normlab analyze sinks --batches 1 --batch-size 8 --seq-len 128`: massive activations,
            attention sinks and gradient sinks (a backward pass) of 8 x 128 tokens (the whole command)
  sample    64 greedy tokens after a prompt with the KV cache, against transformers' `generate`
            reading the same file (float32, KV cache, output head tied to the embedding as the file
            says), both timed after loading; the continuations must be equal token for token.
Run by bench/smollm2.sh (which makes the benchmark venv: current torch and transformers from PyPI).
Each time is the best of --repeat runs; the machine and its CPU are printed with the table.
"""
import argparse
import os
import platform
import subprocess
import sys
import time

import numpy as np

PROMPT = "The capital of France is"
MAX_NEW = 64


def note(what, seconds):
    print(f"smollm2.py: {what}: {seconds:.2f} s", file=sys.stderr, flush=True)


def best_of(label, repeat, fn):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        note(label, times[-1])
    return min(times), out


def cpu_name():
    """The CPU's model name and its widest vector ISA (the kernels normlab picks at run time)."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name} ({isa})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normlab", required=True, help="the normlab executable")
    ap.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; the best is kept")
    ap.add_argument("--no-peer", action="store_true", help="skip transformers (normlab's rows only)")
    args = ap.parse_args()

    import normlab
    threads = normlab.num_threads()
    rows = []  # (what, normlab seconds, peer seconds or None, target seconds, note)

    t_load, model = best_of("load", args.repeat, lambda: normlab.load(args.gguf))
    rows.append(("load and dequantize", t_load, None, 5.0, "normlab.load; transformers: from_pretrained, one run"))

    ids = np.random.default_rng(0).integers(0, 49152, size=(8, 128), dtype=np.int32)
    model.forward(ids)  # first touch of every page of the plan
    t_fwd, _ = best_of("forward", args.repeat, lambda: model.forward(ids))
    rows.append(("forward 8 x 128 tokens", t_fwd, None, 5.0, "Model.forward, after the load"))

    def command(*extra):
        return lambda: subprocess.run([args.normlab, "analyze", *extra, "--checkpoint", args.gguf],
                                      check=True, stdout=subprocess.DEVNULL)
    t_dyn, _ = best_of("dynamics", args.repeat, command("dynamics"))
    rows.append(("analyze dynamics (defaults)", t_dyn, None, 60.0, "whole command, load included"))
    t_jac, _ = best_of("jacobian", args.repeat, command("jacobian", "--no-full", "--lanczos-k", "0", "--seq-len", "64"))
    rows.append(("analyze jacobian, 30 blocks at T = 64", t_jac, None, 120.0, "whole command, load included"))
    t_sinks, _ = best_of("sinks", args.repeat, command("sinks", "--batches", "1", "--batch-size", "8", "--seq-len", "128"))
    rows.append(("analyze sinks, 8 x 128 tokens with gradient sinks", t_sinks, None, 60.0, "whole command, load included"))

    prompt = [int(i) for i in model.tokenize(PROMPT, special=False)]
    # the ids themselves (Model.sample returns the decoded text): the module's core call, as `normlab sample --ids`
    model._core.sample(prompt, 4, 0.0, 0, 0)  # warm the decoder's caches
    t_ours, ours = best_of("normlab sample", args.repeat, lambda: model._core.sample(prompt, MAX_NEW, 0.0, 0, 0))
    ours = list(ours)[-MAX_NEW:]

    t_peer, same = None, None
    peer_version = ""
    if not args.no_peer:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
        peer_version = f"transformers {transformers.__version__}, torch {torch.__version__}"
        torch.set_num_threads(threads)
        d, g = os.path.split(os.path.abspath(args.gguf))
        t0 = time.perf_counter()
        ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=g, dtype=torch.float32).eval()
        rows[0] = rows[0][:2] + (time.perf_counter() - t0,) + rows[0][3:]  # one load: it takes a while
        ref.lm_head.weight = ref.model.embed_tokens.weight  # the file has no output.weight: tied
        batch = torch.from_numpy(ids.astype(np.int64))

        def forward():
            with torch.inference_mode():
                return ref(batch, use_cache=False).logits
        forward()
        rows[1] = rows[1][:2] + (best_of("transformers forward", args.repeat, forward)[0],) + rows[1][3:]
        pid = torch.tensor([prompt])
        # normlab's sample does not stop at an end-of-text token: neither may transformers (min_new_tokens
        # would instead forbid that token, changing the text)
        ref.generation_config.eos_token_id = None

        def generate():
            with torch.inference_mode():
                out = ref.generate(pid, attention_mask=torch.ones_like(pid), max_new_tokens=MAX_NEW,
                                   do_sample=False, use_cache=True)
            return out[0, len(prompt):].tolist()
        generate()
        t_peer, theirs = best_of("transformers generate", args.repeat, generate)
        same = theirs == ours
    rows.append((f"sample {MAX_NEW} greedy tokens (KV cache)", t_ours, t_peer, None,
                 "after loading" + ("" if same is None else
                                    ("; continuations equal" if same else "; CONTINUATIONS DIFFER"))))

    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF) on {cpu_name()}, {threads} threads, "
          f"normlab {normlab.__version__}" + (f"; peer {peer_version}" if peer_version else ""))
    print()
    print("| what | normlab | transformers | target | |")
    print("|---|---:|---:|---:|---|")
    for what, ours_s, peer_s, target, note in rows:
        peer = "" if peer_s is None else f"{peer_s:.2f} s"
        tgt = "" if target is None else f"< {target:.0f} s"
        met = "" if target is None else ("met" if ours_s < target else "NOT MET")
        if target is None and peer_s is not None:
            met = "faster" if ours_s < peer_s else "SLOWER"
        print(f"| {what} | {ours_s:.2f} s | {peer} | {tgt} | {met}; {note} |")
    return 0 if same is not False else 1


if __name__ == "__main__":
    sys.exit(main())
