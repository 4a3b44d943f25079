"""normlab in Python: the same engine and instruments as the ``normlab`` command, from a notebook.

A thin layer over the C++ library the command is built from (the extension ``normlab._core``):
nothing is computed in Python, and every number equals the command's, bit for bit (the instruments
return the command's own ``--json`` document). docs/PYTHON.md is the guide; in short::

    import normlab
    m = normlab.load("path/to/model")          # a checkpoint, run directory, HF directory or GGUF file
    ids = m.tokenize("In the beginning God created the heaven and the earth.")
    out = m.forward(ids)                        # out.logits (B, T, V), out.hidden [(B, T, C)] * (L + 1)
    dyn = m.dynamics(ids)                       # stream norms, branch ratios, gradients by layer
    dyn.to_pandas()                             # one row per layer
    normlab.train({"train": {"steps": 50}}, out_dir="runs/nb", callback=print)

Errors the command would report (a bad path, an unknown key, a corrupt file, an id out of range)
raise ``normlab.Error`` (a ValueError) with the command's message.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

# OpenBLAS picks its kernels when it loads, from a table of CPU models that newer CPUs are missing
# from (they get SSE3 kernels): the command sets OPENBLAS_CORETYPE from the CPU's features instead
# (src/ops/isa.h), and so does the module before _core loads. _core holds its own static copy of
# OpenBLAS (python/CMakeLists.txt), so the kernels it runs are the command's whether or not numpy or
# torch loaded the shared OpenBLAS first, and with whichever kernels they got.
from . import _cpu

_wanted_core = _cpu.openblas_coretype()  # None when NORMLAB_ISA is bad: _core reports it
if "OPENBLAS_CORETYPE" not in os.environ and _wanted_core:
    os.environ["OPENBLAS_CORETYPE"] = _wanted_core

import numpy as np  # noqa: E402

from . import _core  # noqa: E402
from ._results import Results, read_results  # noqa: E402

if "OPENBLAS_CORETYPE" in os.environ and _core.openblas_core().lower() != os.environ["OPENBLAS_CORETYPE"].lower():
    import warnings  # (a build whose module links the shared OpenBLAS: not the one CMakeLists.txt makes)

    warnings.warn(f"normlab's OpenBLAS runs its {_core.openblas_core()} kernels, not the "
                  f"{os.environ['OPENBLAS_CORETYPE']} ones the normlab command uses here: results differ from the "
                  f"command's in the last bits and may be slower.", RuntimeWarning, stacklevel=2)

__all__ = ["Error", "Model", "Forward", "Results", "load", "from_torch", "train", "compare", "read_results",
           "num_threads", "set_num_threads", "__version__"]

Error = _core.Error
__version__ = _core.version()

def _path(path) -> str:
    """A path argument as a shell would read it ("~/x" under the home directory), as every command does."""
    return os.path.expanduser(os.fspath(path))


# normlab's own files (the built-in corpus, the GPT-2 vocabulary, the studies, the report's page, the
# model fetcher: src/util/resources.h): an installed wheel carries them in normlab/resources/; a
# module built in a clone (build/python) has none there and reads the clone's.
_resources = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")
if os.path.isdir(_resources):
    _core.set_resource_dir(_resources)


def num_threads() -> int:
    """The threads normlab's kernels use (OpenMP's; OMP_NUM_THREADS, else the cores)."""
    return _core.num_threads()


def set_num_threads(n: int) -> None:
    """Set the threads normlab's kernels use. Results are bit-identical to the command's at the same
    thread count; importing torch first may change the count (torch sets OpenMP's to its own choice),
    so set it, or OMP_NUM_THREADS, when you compare with the command."""
    _core.set_num_threads(n)


@dataclass
class Forward:
    """What ``Model.forward`` returns: ``logits`` (B, T, V) float32 (None for a headless model),
    ``hidden`` the L + 1 residual streams at the block boundaries (each (B, T, C): the embedding
    output, then every block's output; an encoder-decoder's decoder), ``final`` the last hidden state
    after the final norm. An encoder-decoder's also: ``memory`` (B, S, C), the encoder's output after
    its final norm (what cross-attention reads), and ``encoder_hidden``, the streams entering each
    encoder layer (each (B, S, C)); None and [] for other models."""
    logits: np.ndarray | None
    hidden: list[np.ndarray]
    final: np.ndarray
    memory: np.ndarray | None = None
    encoder_hidden: list[np.ndarray] = field(default_factory=list)


def _ids(inputs: str | Sequence[int] | np.ndarray, model: "Model") -> np.ndarray:
    if isinstance(inputs, str):
        if model.config["arch"] == "encdec":
            raise Error("an encoder-decoder model takes ids (and source=): translation_pair(source, target) "
                        "makes both from text")
        return model.tokenize(inputs)
    return _int32(inputs, "token ids")


def _int32(values, what: str) -> np.ndarray:
    """Integers as the engine's int32, refusing what a cast would change: floats (2.7 is not an id or
    a label) and values outside int32 (2**32 + 3 would wrap to 3)."""
    a = np.asarray(values)
    if a.dtype.kind not in "iu":
        raise Error(f"{what} must be integers, not {a.dtype}")
    if a.size and (int(a.min()) < -2**31 or int(a.max()) > 2**31 - 1):
        bad = int(a.max()) if int(a.max()) > 2**31 - 1 else int(a.min())
        raise Error(f"{what}: {bad} is outside the range of token ids and labels (int32)")
    return np.ascontiguousarray(a, dtype=np.int32)


def _source(source, model: "Model") -> np.ndarray | None:
    return None if source is None else _ids(source, model)


class Model:
    """A model in memory: from ``normlab.load`` or ``normlab.from_torch``.

    ``config`` is its normlab model config (the dict of a checkpoint's metadata, docs/MODEL.md).
    Inputs are token ids (a 1-D array of T ids or a 2-D (B, T) array) or a string, read through the
    model's own tokenizer (``tokenize``). An encoder-decoder model (``config["arch"] == "encdec"``)
    takes the decoder's ids and ``source=`` the encoder's (one source row per row; ``translation_pair``
    makes both from text) in ``forward``, ``loss_and_grads`` and the instruments, and ``translate``s."""

    def __init__(self, core: _core.Model):
        self._core = core
        self.config: dict = json.loads(core.config_json)

    def __repr__(self) -> str:
        c = self.config
        return (f"normlab.Model({self.source!r}: {c['arch']}, {c['n_layers']} layers, d = {c['d_model']}, "
                f"{c['norm']}, {self.n_params:,} parameters)")

    @property
    def source(self) -> str:
        """The path the model was loaded from, or what it was made from."""
        return self._core.source

    @property
    def n_params(self) -> int:
        return self._core.n_params

    # ---- the model itself -------------------------------------------------------------------------

    def forward(self, inputs, source=None, activation_memory: float = 2.0**30) -> Forward:
        """Logits and every hidden state (float32, as ``normlab grads`` writes them). A batch whose
        activations would take more than ``activation_memory`` bytes (1 GiB; a 1B model's 8 x 128
        tokens need about 4 GB) runs in passes of fewer sequences, with the same outputs."""
        logits, hidden, final, memory, encoder_hidden = self._core.forward(
            _ids(inputs, self), _source(source, self), float(activation_memory))
        return Forward(logits, list(hidden), final, memory, list(encoder_hidden))

    def loss_and_grads(self, inputs, labels, source=None) -> tuple[float, dict[str, np.ndarray]]:
        """The mean cross-entropy over positions whose label is not -100, and the gradient of every
        parameter by name (float32, as ``normlab grads`` on a token file of these ids and labels)."""
        ids = _ids(inputs, self)
        labels = _int32(np.asarray(labels).reshape(ids.shape), "labels")
        return self._core.loss_and_grads(ids, labels, _source(source, self))

    def params(self) -> dict[str, np.ndarray]:
        """Every parameter as a writable float32 numpy view into the model (no copy)."""
        return self._core.params()

    def tokenize(self, text: str, tokenizer: str = "", special: bool = True) -> np.ndarray:
        """The ids of ``text`` through the model's own tokenizer (a Hugging Face directory's, a GGUF
        file's, or the one its training run read; bytes for a byte-level model), or ``tokenizer``
        (a file or directory, "gpt2", "bytes"). ``special``: add [CLS] ... [SEP] where the tokenizer
        has them (as ``normlab analyze --text``); ``sample`` reads prompts without them."""
        return self._core.tokenize(text, _path(tokenizer) if tokenizer else "", special)

    def decode(self, ids, tokenizer: str = "") -> str:
        """The text of ``ids`` (bytes that are not UTF-8, which a byte-level model can sample, become
        U+FFFD)."""
        raw = self._core.decode([int(i) for i in np.asarray(ids).ravel()], _path(tokenizer) if tokenizer else "")
        return raw.decode("utf-8", errors="replace")

    def translation_pair(self, source: str, target: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An encoder-decoder's input from text, as translation training and the command's ``analyze
        --source-text S --text T`` read it (UTF-8 bytes): ``(source_ids, ids, labels)``, the source's
        bytes + EOS, the decoder's input BOS + the target's bytes, and the labels, the target's bytes
        + EOS. ``m.attention(ids, source=source_ids)``, ``m.loss_and_grads(ids, labels, source=...)``."""
        return self._core.translation_pair(source, target)

    def translate(self, text: str | Sequence[str], beam: int = 1, length_penalty: float = 1.0,
                  max_len: int = 0) -> str | list[str]:
        """An encoder-decoder's translation of ``text`` (a string, or a list of them: a list back),
        greedy or by beam search (``beam`` 1 to 64; score log p / length^length_penalty), at most
        ``max_len`` target positions (0: the model's seq_len): ``normlab translate``'s lines (bytes
        that are not UTF-8, which an untrained byte-level model emits, become U+FFFD)."""
        texts = [text] if isinstance(text, str) else list(text)
        out = [b.decode("utf-8", errors="replace") for b in self._core.translate(texts, beam, length_penalty, max_len)]
        return out[0] if isinstance(text, str) else out

    def sample(self, prompt, max_new: int = 64, temperature: float = 0.0, top_k: int = 0, seed: int = 0) -> str:
        """The prompt and its continuation (greedy when temperature is 0), as ``normlab sample``."""
        ids = self.tokenize(prompt, special=False) if isinstance(prompt, str) else _ids(prompt, self)
        out = self._core.sample([int(i) for i in ids], max_new, temperature, top_k, seed)
        return self.decode(list(ids) + list(out))

    # ---- the instruments (docs/INSTRUMENTS.md, docs/THEORY.md) -----------------------------------

    def _kind(self, kind: str) -> str:  # an encoder-decoder's documents have their own tables
        return kind + "_encdec" if self.config["arch"] == "encdec" and kind != "attention" else kind

    def jacobian(self, inputs, token: int = -1, full: bool = True, full_max_dim: int = 4096,
                 lanczos_k: int = 5, source=None) -> Results:
        """``normlab analyze jacobian`` on one sequence: the norm sites' Jacobians (the LayerNorm lemma
        checks), every block's token-local and full-sequence Jacobian spectrum, the end-to-end one (an
        encoder-decoder: the decoder's and the source's end-to-end spectra)."""
        return Results(self._kind("jacobian"), self._core.instrument(
            "jacobian", _ids(inputs, self), None, token, full, full_max_dim, lanczos_k, _source(source, self)))

    def attention(self, inputs, source=None, precision: str = "auto") -> Results:
        """``normlab analyze attention`` on one sequence: per layer and head ||A||_2, the bound, entropies.
        ``precision`` as the command's ``--precision`` (``"auto"``: float64 while its copy of the model
        takes at most a quarter of the machine's memory, else the model's own float32 parameters)."""
        return Results("attention", self._core.instrument("attention", _ids(inputs, self), source=_source(source, self),
                                                          precision=precision))

    def dynamics(self, inputs, labels=None, source=None, precision: str = "auto") -> Results:
        """``normlab analyze dynamics`` on the given rows (as its ``--text``, or ``--tokens`` with
        labels): stream norms, branch ratios, gradient norms and rank collapse by layer. Without
        labels a gpt (and an encoder-decoder's decoder) predicts the next tokens and an encoder
        reconstructs its input; an encoder-decoder's come with ``translation_pair``. ``precision`` as
        ``attention``'s (an encoder-decoder reads float64)."""
        ids = _ids(inputs, self)
        lab = None if labels is None else _int32(np.asarray(labels).reshape(ids.shape), "labels")
        return Results(self._kind("dynamics"), self._core.instrument("dynamics", ids, lab, source=_source(source, self),
                                                                     precision=precision))

    def sinks(self, inputs, precision: str = "auto") -> Results:
        """``normlab analyze sinks`` on the given rows (each row a window): per layer the largest
        activations, their dimensions and tokens, kurtosis and token norms (``streams``; the massive
        dimensions as their own table, ``massive``), per head the first token's attention importance and
        the sink share (``heads``), and the sink rate; for a causal model with a head, the gradient sinks:
        per layer the next-token loss's gradient at the first position against the median (``gradients``),
        the same at each self-attention's normalized input, before the norm's Jacobian
        (``attn_input_gradients``), and the norm's Jacobian gain at the largest token against the median
        one (``norm_gains``). ``precision`` as ``attention``'s."""
        return Results("sinks", self._core.instrument("sinks", _ids(inputs, self), precision=precision))

    def theory(self, seeds: int = 5, corpus: str = "", tokenizer: str = "", seq_len: int = 16,
               precision: str = "auto") -> Results:
        """``normlab theory --checkpoint``: every claim one model can answer, on ``seeds`` input windows
        of ``corpus`` (default: the run's own data, else the built-in corpus) through the model's
        tokenizer. ``precision`` as the command's ``--precision``: ``"float32"`` reads a float32 copy of
        the model with its gradients (8 bytes a parameter) instead of float64 copies, and skips the
        claims checked to rounding; ``"auto"`` chooses it when two float64 copies would pass half of
        the machine's memory."""
        return Results("theory", self._core.theory(seeds, _path(corpus) if corpus else "",
                                                   _path(tokenizer) if tokenizer else "", seq_len, precision))


def load(path: str | os.PathLike) -> Model:
    """A model from whatever the command accepts: a normlab checkpoint, a run directory, a Hugging
    Face directory (GPT-2, BERT, Llama, Qwen2, Gemma, Gemma 2, OLMo 2) or a GGUF file."""
    return Model(_core.load(_path(path)))


# transformers classes whose forward normlab computes exactly (the rest is refused by name)
_TORCH_FAMILIES = {
    "GPT2LMHeadModel", "GPT2Model", "BertModel", "BertForMaskedLM", "BertForPreTraining",
    "LlamaForCausalLM", "Qwen2ForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM", "Olmo2ForCausalLM",
}


def from_torch(model: Any) -> Model:
    """A transformers model object as a normlab model, its weights taken from memory (no files): the
    same model ``load`` makes of the directory ``model.save_pretrained`` writes. The families normlab
    represents exactly are GPT-2, BERT and the Llama family (Llama, Qwen2, Gemma, Gemma 2, OLMo 2); anything else,
    or an option of theirs normlab does not represent, raises ``normlab.Error`` naming it."""
    name = type(model).__name__
    if name not in _TORCH_FAMILIES or not hasattr(model, "config") or not hasattr(model, "state_dict"):
        raise Error(f"from_torch: {name} is not a model normlab represents exactly (it takes "
                    f"{', '.join(sorted(_TORCH_FAMILIES))})")
    config = model.config.to_dict()
    config["architectures"] = [name]
    state = {}
    for key, tensor in model.state_dict().items():
        t = tensor.detach()
        if not t.is_floating_point():
            raise Error(f"from_torch: {name}: tensor '{key}' is {t.dtype}, not a float tensor")
        state[key] = t.to(device="cpu").float().contiguous().numpy()
    return Model(_core.from_state(json.dumps(config), state, f"the transformers model {name}"))


# ---- training and studies ----------------------------------------------------------------------------

def _progress(total_steps: int | None):
    """A callback drawing a progress bar (tqdm's notebook-aware bar when tqdm is installed)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    state = {"bar": None}

    def show(record: dict) -> None:
        if record.get("type") != "train":
            return
        if tqdm is None:
            print(f"step {record['step']}: loss {record['loss']:.4f}", flush=True)
            return
        if state["bar"] is None:
            state["bar"] = tqdm(total=total_steps, desc="train", unit="step")
        bar = state["bar"]
        bar.update(record["step"] - bar.n)
        bar.set_postfix(loss=f"{record['loss']:.4f}")
    return show


def train(config: str | os.PathLike | Mapping | None = None, *, sets: Iterable[str] = (),
          out_dir: str | os.PathLike | None = None, overwrite: bool = False, resume: str | os.PathLike | None = None,
          callback: Callable[[dict], None] | None = None, progress: bool = False) -> dict:
    """Train as ``normlab train`` does: ``config`` a TOML file's path or a dict of its tables (None:
    the defaults), ``sets`` the ``--set`` overrides, ``out_dir`` the run directory (train.out_dir),
    ``resume`` a run directory to continue (``normlab train --resume``). Every record written to
    metrics.jsonl (train, val, layers, summary, ...: docs/USAGE.md "Per-layer logs during training") is handed to ``callback`` as a
    dict as soon as it is written; ``progress`` shows a progress bar.

    The GIL is released while the engine runs. Ctrl-C stops the run after its current step, writing
    its checkpoint, metrics and summary exactly as the command does, then raises KeyboardInterrupt
    (resume it with ``resume=out_dir``). Returns the result: steps_done, last losses, diverged, ..."""
    sets = list(sets)
    if out_dir is not None:
        sets.append(f"train.out_dir={json.dumps(_path(out_dir))}")
    path, doc = "", ""
    if isinstance(config, Mapping):
        doc = json.dumps(config)
    elif config is not None:
        path = _path(config)
    callbacks = [c for c in (callback, _progress(None) if progress else None) if c is not None]

    def on_record(text: str) -> None:
        record = json.loads(text)
        for c in callbacks:
            c(record)
    if threading.current_thread() is not threading.main_thread():
        raise Error("train runs in the main thread (Ctrl-C stops it there); call it from the main thread")
    result = _core.train(path, doc, sets, "" if resume is None else _path(resume), overwrite,
                         on_record if callbacks else None)
    if result["interrupted"]:
        raise KeyboardInterrupt(f"normlab: interrupted after step {result['steps_done']} of {result['steps']}: "
                                f"the checkpoint, metrics and summary are in {result['out_dir']}; continue with "
                                f"normlab.train(resume={result['out_dir']!r})")
    return result


def compare(study: str | os.PathLike | None = None, *, out_dir: str | os.PathLike | None = None,
            sets: Iterable[str] | None = None, force: bool = False, resume: str | os.PathLike | None = None):
    """Run a study as ``normlab compare`` does (``study`` a built-in study's name, ``"default"`` by default,
    or a study TOML file) into ``out_dir`` and return its results table (``read_results``: one row per
    run). Ctrl-C stops after the current step; finish the study with ``compare(resume=out_dir)``, as
    ``normlab compare --resume``: finished runs kept, the interrupted one resumed from its checkpoint,
    the rest run. With ``resume``, a ``study`` or ``sets`` given must be the study the directory holds,
    or one whose grid only adds runs (then only those run)."""
    s = "" if study is None else _path(study)
    is_file = s.endswith(".toml") or os.sep in s
    listed = None if sets is None else list(sets)
    if resume is not None:
        out = _path(resume)
        code = _core.compare("" if is_file else s, s if is_file else "",
                             "" if out_dir is None else _path(out_dir), listed, force, out)
    else:
        if out_dir is None:
            raise Error("compare: give out_dir (or resume=DIR to finish a stopped study)")
        out = _path(out_dir)
        code = _core.compare("" if is_file else s, s if is_file else "", out, listed, force, "")
    if code == _core.interrupted_exit_code:
        raise KeyboardInterrupt(f"normlab: the study in {out} was interrupted; finish it with "
                                f"normlab.compare(resume={out!r}) or normlab compare --resume {out}")
    return read_results(out)
