"""golden_inputs: what golden.py hands to the normlab CLI and to the oracle: TOML config files, random
token batches in MODEL.md's token-file names (gpt / encoder, padded, encoder-decoder), the token files
themselves, and a batch's forward inputs for normlab_torch.
"""

import json
from pathlib import Path

import numpy as np
import torch

import normlab_torch as nt


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def write_toml(path, sections):
    lines = []
    for sec, kv in sections.items():
        lines.append(f"[{sec}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in kv.items()]
        lines.append("")
    Path(path).write_text("\n".join(lines))


def make_tokens(arch, vocab, B, T, seed):
    """Random token batch: gpt next-token labels (last -100); encoder ~15% masked (>= 1 per row)."""
    rng = np.random.RandomState(seed)
    if arch == "gpt":
        seq = rng.randint(0, vocab, size=(B, T + 1))
        ids = seq[:, :T]
        labels = seq[:, 1:T + 1].copy()
        labels[:, T - 1] = nt.IGNORE_INDEX
    else:
        orig = rng.randint(0, 256, size=(B, T))
        masked = rng.rand(B, T) < 0.15
        for b in range(B):
            if not masked[b].any():
                masked[b, rng.randint(T)] = True
        ids = np.where(masked, nt.MASK_TOKEN, orig)
        labels = np.where(masked, orig, nt.IGNORE_INDEX)
    return ids.astype(np.int32), labels.astype(np.int32)


def pad_tokens(arch, ids, labels, type_vocab, seed):
    """Right padding (row b keeps T - 3b tokens, at least 1), an attention_mask, and token types."""
    rng = np.random.RandomState(seed + 7)
    B, T = ids.shape
    mask = np.ones((B, T), np.int32)
    for b in range(B):
        mask[b, max(1, T - 3 * b):] = 0
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    labels = np.where(mask == 1, labels, nt.IGNORE_INDEX).astype(np.int32)
    if arch == "gpt":  # the last real token's next token is padding
        labels[:, :-1] = np.where(mask[:, 1:] == 1, labels[:, :-1], nt.IGNORE_INDEX)
    for b in range(B):  # every row keeps a label
        if not (labels[b] != nt.IGNORE_INDEX).any():
            labels[b, 0] = ids[b, 0]
    types = rng.randint(0, max(type_vocab, 1), size=(B, T)).astype(np.int32) if type_vocab > 0 else None
    return ids, labels, mask, types


def encdec_special_ids(config):
    """(BOS, EOS, number of byte ids) of an encdec vocabulary: 256, 257, 256 for the default 258
    (a smaller vocabulary -- only in selftest.py's tiny models -- uses its last two ids)."""
    V = config["vocab"]
    return min(nt.BOS_TOKEN, V - 2), min(nt.EOS_TOKEN, V - 1), min(256, V - 2)


def make_encdec_tokens(config, B, S, T, seed, masks=("src", "tgt")):
    """A random seq2seq batch in Hugging Face's names (MODEL.md, "Token files of an encoder-decoder").

    Source row b keeps max(1, S - 2b) tokens (right padding, attention_mask 0 after them); target row b
    has k = max(1, T - 3b) - 1 bytes y: decoder_input_ids = [BOS, y_1 .. y_k, 0 ...], labels =
    [y_1 .. y_k, EOS, -100 ...], decoder_attention_mask 1 on the first k + 1 positions. Padded ids are 0.
    masks: which of the two masks the batch holds ("src", "tgt"); the target is right-padded anyway.
    """
    rng = np.random.RandomState(seed)
    bos, eos, n_bytes = encdec_special_ids(config)
    src_vocab = config["vocab"] if config["shared_embeddings"] else config["src_vocab"]
    src = rng.randint(0, min(256, src_vocab), size=(B, S))
    src_mask = np.zeros((B, S), np.int32)
    y = rng.randint(0, n_bytes, size=(B, T))
    dec_in = np.zeros((B, T), np.int64)
    labels = np.full((B, T), nt.IGNORE_INDEX, np.int64)
    dec_mask = np.zeros((B, T), np.int32)
    for b in range(B):
        src_mask[b, :max(1, S - 2 * b)] = 1
        n = max(1, T - 3 * b)                       # real decoder positions: BOS + k bytes
        dec_in[b, 0] = bos
        dec_in[b, 1:n] = y[b, :n - 1]
        labels[b, :n - 1] = y[b, :n - 1]
        labels[b, n - 1] = eos
        dec_mask[b, :n] = 1
    src = np.where(src_mask == 1, src, 0)
    batch = {"input_ids": src.astype(np.int32), "decoder_input_ids": dec_in.astype(np.int32),
             "labels": labels.astype(np.int32)}
    if "src" in masks:
        batch["attention_mask"] = src_mask
    if "tgt" in masks:
        batch["decoder_attention_mask"] = dec_mask
    return batch


def make_batch(case, config, seed):
    """The token file of a case: name -> int32 array (the names of MODEL.md's token files)."""
    if config["arch"] == "encdec":
        B, S, T = case.bt
        return make_encdec_tokens(config, B, S, T, seed, case.masks)
    B, T = case.bt
    ids, labels = make_tokens(config["arch"], config["vocab"], B, T, seed)
    batch = {"input_ids": ids, "labels": labels}
    if case.pad:
        ids, labels, mask, types = pad_tokens(config["arch"], ids, labels, config["type_vocab"], seed)
        batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if types is not None:
            batch["token_type_ids"] = types
    return batch


def save_batch(path, batch):
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v.astype(np.int32)) for k, v in batch.items()}, str(path))


# token file name -> keyword of normlab_torch.forward_params
FORWARD_KEYS = {"token_type_ids": "token_types", "attention_mask": "key_mask",
                "decoder_input_ids": "decoder_input_ids", "decoder_attention_mask": "decoder_mask"}


def forward_inputs(batch):
    """(input_ids, labels, kwargs) of normlab_torch.forward_params / train for a token-file batch."""
    t = {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in batch.items()}
    return t["input_ids"], t["labels"], {FORWARD_KEYS[k]: v for k, v in t.items() if k in FORWARD_KEYS}
