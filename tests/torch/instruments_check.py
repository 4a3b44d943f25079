#!/usr/bin/env python3
"""instruments_check.py: the instruments' readings on an exported (trained) model against an
independent computation: torch.autograd Jacobians of the PyTorch oracle (normlab_torch.py) and
numpy SVDs, in float64.

    instruments_check.py --normlab build/normlab --workdir DIR

For placements pre and post: train a tiny model for 20 steps with normlab (so gains and biases are
no longer 1 and 0), write a token file, run `normlab analyze jacobian` and `analyze attention` with
--json, and compare: every norm site's singular values, every block's token-local and
full-sequence singular values, the end-to-end ones, and every head's ||A||_2 and c_max; and from
`normlab analyze dynamics --tokens`: every layer's gradient norm and W2 gradient norm, and rank
collapse res(X_l) per layer for the model and for its four skip/MLP ablations (same weights).
Prints `N passed, M failed`; exit 1 on any failure.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import normlab_torch as nt  # noqa: E402

# Both sides compute in float64 from the same float32 parameters; the SVDs (LAPACK dgesdd in
# normlab, numpy's LAPACK here) agree to ~1e-13 relative to sigma_max. 1e-9 leaves ample margin.
RTOL = 1e-9


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{r.stdout}\n{r.stderr}")


def close(name, ours, ref, scale, results):
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    err = float(np.max(np.abs(ours - ref))) / scale if ours.size else 0.0
    ok = ours.shape == ref.shape and err <= RTOL
    results.append((name, ok, err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    T, tok = 6, 5
    for placement in ["pre", "post"]:
        d = work / placement
        d.mkdir(exist_ok=True)
        sets = ["--set", "model.d_model=12", "--set", "model.n_heads=3", "--set", "model.n_layers=2",
                "--set", "model.seq_len=8", "--set", f"model.placement={placement}",
                "--set", "train.steps=20", "--set", "train.batch_size=4", "--set", "train.lr=1e-2",
                "--set", f"train.out_dir={d / 'run'}"]
        run([args.normlab, "train", "-q", "--force", *sets])
        ckpt = d / "run" / "checkpoint.safetensors"
        ids = np.array([[(7 * t + 3) % 256 for t in range(T)]], dtype=np.int32)
        labels = np.roll(ids, -1, axis=1)
        save_file({"input_ids": ids, "labels": labels}, str(d / "X.safetensors"))
        run([args.normlab, "analyze", "jacobian", "--checkpoint", str(ckpt), "--tokens", str(d / "X.safetensors"),
             "--token", str(tok), "--json", str(d / "J.json"), "--force"])
        run([args.normlab, "analyze", "attention", "--checkpoint", str(ckpt), "--tokens", str(d / "X.safetensors"),
             "--json", str(d / "A.json"), "--force"])
        J, A = json.loads((d / "J.json").read_text()), json.loads((d / "A.json").read_text())

        model, config = nt.load_checkpoint(str(ckpt), dtype=torch.float64)
        params = dict(model.named_parameters())
        C, L = config["d_model"], config["n_layers"]
        x0 = (params["wte.weight"][torch.as_tensor(ids).long()] + params["wpe.weight"][:T]).detach()

        def blocks(first, last):
            def f(flat):
                x = flat.reshape(1, T, C)
                for l in range(first, last):
                    p = config["placement"][l]
                    x = nt.sublayer(config, params, f"h.{l}.attn", p, nt.attention, x)
                    x = nt.sublayer(config, params, f"h.{l}.mlp", p, nt.mlp, x)
                return x.reshape(-1)
            return f

        def svd(m):
            return np.linalg.svd(m.detach().numpy(), compute_uv=False)

        # streams entering each layer, for the norm sites
        with torch.no_grad():
            streams = [x0]
            for l in range(L):
                streams.append(blocks(l, l + 1)(streams[-1].reshape(-1)).reshape(1, T, C))
        for l in range(L):
            full = torch.autograd.functional.jacobian(blocks(l, l + 1), streams[l].reshape(-1))
            local = full[tok * C:(tok + 1) * C, tok * C:(tok + 1) * C]
            rep = J["blocks"][l]
            s_local, s_full = svd(local), svd(full)
            close(f"{placement} block {l} token-local singular values", rep["token_local"]["singular_values"], s_local, s_local[0], results)
            close(f"{placement} block {l} full singular values", rep["full_sequence"]["singular_values"], s_full, s_full[0], results)
        e2e = torch.autograd.functional.jacobian(blocks(0, L), x0.reshape(-1))
        s = svd(e2e)
        close(f"{placement} end-to-end singular values", J["end_to_end"]["full_sequence"]["singular_values"], s, s[0], results)
        # the first norm site of each placement: pre h.0.attn.ln_in on x0, post h.0.attn.ln_out on r
        site = J["norm_sites"][0]
        if placement == "pre":
            z = x0[0, tok]
        else:
            with torch.no_grad():
                f = nt.attention(config, params, "h.0.attn", x0)
                z = (x0 + f)[0, tok]
        prefix = site["site"]
        jn = torch.autograd.functional.jacobian(lambda v: nt.norm(config, params, prefix, v), z.detach())
        s = svd(jn)
        close(f"{placement} {prefix} singular values", site["spectrum"]["singular_values"], s, s[0], results)
        # attention: ||A||_2 and c_max per head
        with torch.no_grad():
            x = x0
            for l in range(L):
                p = config["placement"][l]
                h = nt.norm(config, params, f"h.{l}.attn.ln_in", x) if p in nt.IN_NORM else x
                qkv = nt.linear(h, params[f"h.{l}.attn.qkv.weight"], params[f"h.{l}.attn.qkv.bias"])[0]
                NH, HS = config["n_heads"], C // config["n_heads"]
                for hd in range(NH):
                    q = qkv[:, hd * HS:(hd + 1) * HS]
                    k = qkv[:, C + hd * HS:C + (hd + 1) * HS]
                    S = q @ k.T / np.sqrt(HS)
                    S = S.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
                    P = torch.softmax(S, -1).numpy()
                    head = next(r for r in A["per_head"] if r["layer"] == l and r["head"] == hd)
                    close(f"{placement} layer {l} head {hd} ||A||_2", [head["norm2"]], [np.linalg.norm(P, 2)], 1.0, results)
                    close(f"{placement} layer {l} head {hd} c_max", [head["c_max"]], [P.sum(0).max()], 1.0, results)
                x = blocks(l, l + 1)(x.reshape(-1)).reshape(1, T, C)

        # dynamics on the token file's batch: gradients by layer and rank collapse with ablations
        run([args.normlab, "analyze", "dynamics", "--checkpoint", str(ckpt), "--tokens", str(d / "X.safetensors"),
             "--update-steps", "0", "--json", str(d / "D.json"), "--force"])
        D = json.loads((d / "D.json").read_text())
        tparams = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        loss, _ = nt.forward_params(config, tparams, ids, labels)
        loss.backward()
        for entry in D["param_grad_norms"]:
            g = float(tparams[entry["name"]].grad.norm())
            close(f"{placement} {entry['name']} gradient norm", [entry["grad_norm"]], [g], max(g, 1e-300), results)
        for l in range(L):
            g = torch.sqrt(sum((t.grad ** 2).sum() for k, t in tparams.items() if k.startswith(f"h.{l}.")))
            w2 = tparams[f"h.{l}.mlp.proj.weight"].grad.norm()
            close(f"{placement} layer {l} gradient norm", [D["layers"][l]["grad_norm"]], [float(g)], float(g), results)
            close(f"{placement} layer {l} W2 gradient norm", [D["layers"][l]["ffn_out_grad_norm"]], [float(w2)], float(w2), results)

        def res(x):  # ||X - 1 mean(X)^T||_F / ||X||_F of the one sequence
            x = x[0]
            return float((x - x.mean(0, keepdim=True)).norm() / x.norm())

        for variant in D["rank_collapse"]:
            cfg = dict(config, residual=variant["skips"], mlp=variant["mlp"])
            with torch.no_grad():
                x, ranks = x0, []
                for l in range(L):
                    ranks.append(res(x))
                    p = cfg["placement"][l]
                    x = nt.sublayer(cfg, params, f"h.{l}.attn", p, nt.attention, x)
                    if cfg["mlp"]:
                        x = nt.sublayer(cfg, params, f"h.{l}.mlp", p, nt.mlp, x)
                ranks.append(res(x))
            name = f"skips {'on' if variant['skips'] else 'off'}, MLP {'on' if variant['mlp'] else 'off'}"
            close(f"{placement} rank collapse by layer, {name}", variant["residual_rank"], ranks, 1.0, results)

    failed = 0
    for name, ok, err in results:
        print(f"{'PASS' if ok else 'FAIL'} {name} (max rel err {err:.2e})")
        failed += not ok
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
