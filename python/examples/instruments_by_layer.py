"""A pretrained model's stream RMS and block Jacobian spectra, layer by layer, on your sentences.

    python python/examples/instruments_by_layer.py [--model PATH] [--out figure.png] ["a sentence" ...]

PATH is anything normlab.load reads (a Hugging Face directory, a GGUF file, a normlab checkpoint or
run); the default is all-MiniLM-L6-v2, which scripts/fetch_model.sh fetches into the normlab cache.
Each sentence goes through the model's own tokenizer; the figure has two panels: the residual
stream's norm at every block boundary (dynamics, one line per sentence) and the singular values of
every block's token-local Jacobian d x_out / d x_in at the sentence's last token (jacobian, the
spread of the spectrum per layer: max, median, min), the readings `normlab analyze` prints.
"""
import argparse
import os
import subprocess

import normlab

import matplotlib
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
DEFAULT_SENTENCES = ["In the beginning God created the heaven and the earth.",
                     "The quick brown fox jumps over the lazy dog.",
                     "Layer normalization keeps every token's features at unit scale."]


def default_model() -> str:
    cache = os.environ.get("NORMLAB_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "normlab"))
    path = os.path.join(cache, "all-MiniLM-L6-v2")
    if not os.path.exists(os.path.join(path, "config.json")):  # fetched once, as the tests do
        subprocess.run(["bash", os.path.join(SOURCE, "scripts", "fetch_model.sh"), "all-MiniLM-L6-v2", cache],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sentences", nargs="*", default=DEFAULT_SENTENCES)
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="instruments_by_layer.png")
    a = ap.parse_args()
    if os.environ.get("DISPLAY") is None:
        matplotlib.use("Agg")  # headless: write the file only
    import matplotlib.pyplot as plt

    model = normlab.load(a.model or default_model())
    print(model)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for sentence in a.sentences:
        ids = model.tokenize(sentence)
        dyn = model.dynamics(ids)
        layers = dyn.to_pandas()  # one row per layer: stream_rms (of the stream entering it), branch ratios, ...
        norms = list(layers["stream_rms"]) + [dyn["final_stream_rms"]]  # ... and leaving the last one
        left.plot(range(len(norms)), norms, marker="o", label=f"{sentence[:28]}... ({len(ids)} tokens)")
    left.set(xlabel="block boundary (0: the embedding output, L: the last block's output)",
             ylabel="mean over tokens of RMS(x) = ||x|| / sqrt(d)", title="residual stream")
    left.legend(fontsize=7)

    ids = model.tokenize(a.sentences[0])
    jac = model.jacobian(ids, full=False, lanczos_k=0)
    layer, top, mid, low = [], [], [], []
    for block in jac["blocks"]:
        sv = np.asarray(block["token_local"]["singular_values"])
        layer.append(block["layer"] + 1)
        top.append(sv.max()), mid.append(np.median(sv)), low.append(sv.min())
    right.fill_between(layer, low, top, alpha=0.25, label="min .. max")
    right.plot(layer, mid, marker="o", label="median")
    # a Post-LN block ends in a LayerNorm, whose Jacobian has the kernel span{1}: its smallest singular
    # value is 0 to rounding (~1e-16), the lemma `normlab theory` checks
    right.set(xlabel="block", ylabel="singular value", yscale="log",
              title=f"token-local block Jacobian spectrum (last token)\n{a.sentences[0][:40]}...")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"figure: {a.out}")


if __name__ == "__main__":
    main()
