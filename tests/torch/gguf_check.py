"""gguf_check.py: normlab's GGUF reader against the `gguf` package (llama.cpp's own Python reader
and writer, 0.10.0) and hostile files.

1. Dequantization, bit for bit: a file written by gguf.GGUFWriter holds random blocks of every type
   normlab reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: random bytes,
   with finite random float16 scales, subnormals included), and blocks quantized from random data
   by gguf.quants where it can quantize; `normlab gguf --dequantize` must equal
   gguf.quants.dequantize exactly (the float32 bit patterns). With --smollm2, every tensor of the
   real SmolLM2-135M file too.
2. Hostile files (written byte by byte here): bad magic, version 1, huge counts and lengths,
   offsets past the end, overlapping or unaligned tensors, unknown types, every truncation of a
   small valid file: each is exit 1 with one "normlab: error:" line naming the file, quickly.
3. A tiny llama file written by GGUFWriter loads (`normlab gguf` says so), and one with an
   architecture or key normlab does not represent is refused by name. Models written as llama.cpp's
   converter writes them give transformers' logits: llama with RoPE scaling (Llama 3.1's rope_freqs
   tensor, linear rope.scaling), qwen2 (biases, rows not permuted), qwen3 (tests/data/qwen3-tiny),
   gemma, gemma2 (gains stored as 1 + w, the sandwich, soft caps, a sliding window; at 46 layers the
   27B model's score scale, which llama.cpp decides by the layer count), gemma3
   (tests/data/gemma3-swa6-tiny: llama.cpp's fixed pattern of five local layers at base 10000), phi3
   (fused matrices; LongRoPE's factor tensors and attention factor; Phi-4-mini's partial rotary from
   tests/data/phi4mini-tiny) and olmo2 (tests/data/olmo2-tiny: norms on the branch outputs, QK-norm over
   the whole projections).
4. A SentencePiece vocabulary (tokenizer.ggml.model = "llama", as Llama 2, Mistral and TinyLlama
   files hold it): a BPE model with byte fallback trained here by the `sentencepiece` library (0.2.0,
   the reference implementation) on the King James Bible and some non-Latin text, written into a GGUF
   file's metadata (pieces, scores, token types); `normlab tokenize` of texts the model never saw
   (spaces in runs, digits, accents, CJK, emoji, bytes no piece covers) must give sentencepiece's own
   ids, after the BOS llama.cpp adds.
"""
import argparse
import json
import math
import os
import struct
import shutil
import subprocess
import sys
import time

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file

# (type, elements per block, bytes per block, byte ranges holding float16 scales)
TYPES = [
    (Q.F32, 1, 4, []),
    (Q.F16, 1, 2, [(0, 2)]),
    (Q.BF16, 1, 2, []),
    (Q.Q8_0, 32, 34, [(0, 2)]),
    (Q.Q4_0, 32, 18, [(0, 2)]),
    (Q.Q4_1, 32, 20, [(0, 2), (2, 4)]),
    (Q.Q5_0, 32, 22, [(0, 2)]),
    (Q.Q5_1, 32, 24, [(0, 2), (2, 4)]),
    (Q.Q4_K, 256, 144, [(0, 2), (2, 4)]),
    (Q.Q5_K, 256, 176, [(0, 2), (2, 4)]),
    (Q.Q6_K, 256, 210, [(208, 210)]),
]


def finite_halves(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00
    while bad.any():
        h[bad] = rng.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint32).astype(np.uint16)
        bad = (h & 0x7C00) == 0x7C00
    return h


def random_blocks(rng, qtype, block, nbytes, scales, rows, blocks_per_row):
    n = rows * blocks_per_row
    raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint32).astype(np.uint8)
    if qtype == Q.F32:
        vals = (rng.standard_normal(n) * 10 ** rng.uniform(-30, 30, n)).astype(np.float32)
        raw = vals.view(np.uint8).reshape(n, 4)
    elif qtype == Q.BF16:
        b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
        b[(b & 0x7F80) == 0x7F80] &= 0xBFFF  # no Inf/NaN exponents
        raw = b.view(np.uint8).reshape(n, 2)
    for lo, hi in scales:
        raw[:, lo:hi] = finite_halves(rng, n).view(np.uint8).reshape(n, 2)
    return raw.reshape(rows, blocks_per_row * nbytes)


def run(normlab, *args, timeout=120):
    t = time.time()
    p = subprocess.run([normlab, *args], capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t


def same_bits(a, b):
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
    b = np.ascontiguousarray(b, dtype=np.float32).reshape(-1)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check_dequantize(normlab, path, out, failures, only=None):
    p, _ = run(normlab, "gguf", path, "--dequantize", out, "--force", timeout=600)
    if p.returncode != 0:
        failures.append(f"normlab gguf --dequantize {path}: {p.stderr.strip()}")
        return 0
    got = load_file(out)
    reader = gguf.GGUFReader(path)
    n = 0
    for t in reader.tensors:
        if only and t.name not in only:
            continue
        ref = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))
        if t.name not in got:
            failures.append(f"{path}: tensor {t.name} missing from normlab's output")
        elif tuple(got[t.name].shape) != shape:
            failures.append(f"{t.name}: normlab shape {got[t.name].shape}, reference {shape}")
        elif not same_bits(got[t.name], ref):
            d = np.abs(got[t.name].reshape(-1).astype(np.float64) - ref.reshape(-1).astype(np.float64))
            failures.append(f"{t.name} ({t.tensor_type.name}): {int((d > 0).sum())} values differ, max {d.max():.3g}")
        n += 1
    return n


def write_random(path, seed):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "test")
    for qtype, block, nbytes, scales in TYPES:
        for rows, bpr in [(1, 1), (3, 2), (5, 3)]:
            raw = random_blocks(rng, qtype, block, nbytes, scales, rows, bpr)
            if qtype in (Q.F32, Q.F16, Q.BF16):
                w.add_tensor(f"random.{qtype.name}.{rows}x{bpr}", raw, raw_dtype=qtype)
            else:
                w.add_tensor(f"random.{qtype.name}.{rows}x{bpr}", raw, raw_dtype=qtype)
        # blocks made by the reference's quantizer from real-valued data, where it has one
        data = (rng.standard_normal((4, 2 * block)) * rng.uniform(0.01, 3)).astype(np.float32)
        try:
            qd = gguf.quants.quantize(data, qtype)
        except NotImplementedError:
            continue
        w.add_tensor(f"quantized.{qtype.name}", qd, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------
# hostile files, written here byte by byte

def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(key, v):
    return gstr(key) + struct.pack("<II", 4, v)


def kv_str(key, v):
    return gstr(key) + struct.pack("<I", 8) + gstr(v)


def raw_file(kvs, tensors, data, version=3, n_tensors=None, n_kv=None, align=32):
    """tensors: (name, [ne...], type, offset)"""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = b"".join(kvs)
    for name, ne, typ, off in tensors:
        body += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        body += struct.pack("<IQ", typ, off)
    out = head + body
    out += b"\0" * ((-len(out)) % align)
    return out + data


def hostile_cases():
    f32 = np.arange(64, dtype=np.float32).tobytes()
    ok_kvs = [kv_str("general.architecture", "test")]
    valid = raw_file(ok_kvs, [("a", [32], 0, 0), ("b", [32], 0, 128)], f32 + f32)
    cases = {
        "bad magic": ("GGUF", b"GGML" + valid[4:]),
        "version 1": ("version 1", valid[:4] + struct.pack("<I", 1) + valid[8:]),
        "version 4": ("version 4", valid[:4] + struct.pack("<I", 4) + valid[8:]),
        "huge tensor count": ("tensors cannot fit", raw_file(ok_kvs, [], b"", n_tensors=1 << 60)),
        "huge metadata count": ("metadata entries cannot fit", raw_file(ok_kvs, [], b"", n_kv=1 << 62)),
        "huge key length": ("cannot fit", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62) + b"abc"),
        "huge string value": ("claims", raw_file([gstr("k") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 50)], [], b"")),
        "huge array": ("elements", raw_file([gstr("k") + struct.pack("<IIQ", 9, 4, 1 << 61)], [], b"")),
        "array of arrays": ("arrays of arrays", raw_file([gstr("k") + struct.pack("<IIQ", 9, 9, 1)], [], b"")),
        "unknown value type": ("unknown value type", raw_file([gstr("k") + struct.pack("<II", 99, 0)], [], b"")),
        "bool not 0/1": ("bool", raw_file([gstr("k") + struct.pack("<IB", 7, 5)], [], b"")),
        "duplicate key": ("twice", raw_file([kv_u32("k", 1), kv_u32("k", 2)], [], b"")),
        "offset past end": ("past the end", raw_file(ok_kvs, [("a", [32], 0, 1 << 40)], f32)),
        "size past end": ("past the end", raw_file(ok_kvs, [("a", [64], 0, 0)], f32[:128])),
        "overlapping tensors": ("overlap", raw_file(ok_kvs, [("a", [32], 0, 0), ("b", [32], 0, 64)], f32 + f32)),
        "unaligned tensor": ("alignment", raw_file(ok_kvs, [("a", [8], 0, 4)], f32)),
        "unknown tensor type": ("IQ2_XXS", raw_file(ok_kvs, [("a", [256], 16, 0)], b"\0" * 66)),
        "type id past the table": ("type 200", raw_file(ok_kvs, [("a", [32], 200, 0)], f32)),
        "zero dimension": ("out of range", raw_file(ok_kvs, [("a", [0], 0, 0)], f32)),
        "huge dimension": ("out of range", raw_file(ok_kvs, [("a", [1 << 50, 1 << 20], 0, 0)], f32)),
        "five dimensions": ("dimensions", raw_file(ok_kvs, [("a", [1, 1, 1, 1, 1], 0, 0)], f32)),
        "partial block": ("blocks", raw_file(ok_kvs, [("a", [33], 8, 0)], b"\0" * 68)),
        "duplicate tensor": ("twice", raw_file(ok_kvs, [("a", [32], 0, 0), ("a", [32], 0, 128)], f32 + f32)),
        "bad alignment": ("power of two", raw_file([kv_u32("general.alignment", 24)], [], b"")),
    }
    end = len(valid) - 512 + 256  # the file's last used byte (tensor b ends there)
    for cut in sorted(set(list(range(0, 60, 3)) + [end - 300, end - 1])):
        cases[f"truncated at {cut} of {len(valid)}"] = ("", valid[:cut])
    return valid, cases


def check_hostile(normlab, workdir, failures):
    valid, cases = hostile_cases()
    vpath = os.path.join(workdir, "valid.gguf")
    open(vpath, "wb").write(valid)
    p, _ = run(normlab, "gguf", vpath)
    if p.returncode != 0:
        failures.append(f"the valid hand-written file is refused: {p.stderr.strip()}")
    for name, (needle, data) in cases.items():
        path = os.path.join(workdir, "hostile.gguf")
        open(path, "wb").write(data)
        for args in (["gguf", path], ["sample", "--checkpoint", path, "--prompt", "x"]):
            p, secs = run(normlab, *args, timeout=60)
            err = p.stderr.strip()
            if p.returncode != 1 or not err.startswith("normlab: error:") or err.count("\n") > 0 or secs > 10:
                failures.append(f"{name} ({' '.join(args[:1])}): exit {p.returncode} in {secs:.1f}s, stderr {err[:300]!r}")
            elif args[0] == "gguf" and (needle not in err or path not in err):
                failures.append(f"{name}: the message does not name '{needle}' and the file: {err[:300]}")
    return len(cases)


def check_llama_metadata(normlab, workdir, failures):
    """A tiny llama written by GGUFWriter loads; what normlab does not represent is refused by name."""
    rng = np.random.default_rng(3)
    C, H, KV, F, V, L = 64, 4, 2, 96, 300, 2
    def write(path, extra=None, arch="llama", drop=None, add=None, head_dim=None):
        w = gguf.GGUFWriter(path, arch)
        w.add_block_count(L)
        w.add_context_length(256)
        w.add_embedding_length(C)
        w.add_feed_forward_length(F)
        w.add_head_count(H)
        w.add_head_count_kv(KV)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(5e5)
        if extra:
            extra(w)
        hd = head_dim or C // H
        if head_dim:
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        tensors = {"token_embd.weight": (V, C), "output_norm.weight": (C,)}
        for l in range(L):
            tensors.update({f"blk.{l}.attn_norm.weight": (C,), f"blk.{l}.attn_q.weight": (H * hd, C),
                            f"blk.{l}.attn_k.weight": (KV * hd, C), f"blk.{l}.attn_v.weight": (KV * hd, C),
                            f"blk.{l}.attn_output.weight": (C, H * hd), f"blk.{l}.ffn_norm.weight": (C,),
                            f"blk.{l}.ffn_gate.weight": (F, C), f"blk.{l}.ffn_up.weight": (F, C),
                            f"blk.{l}.ffn_down.weight": (C, F)})
        if add:
            tensors[add] = (V, C)
        for name, shape in tensors.items():
            if name != drop:
                w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    ok = os.path.join(workdir, "tiny_llama.gguf")
    write(ok)
    p, _ = run(normlab, "gguf", ok)
    if p.returncode != 0 or "model: llama: 2 layers, d_model 64, 4 heads (2 key-value), d_ff 96, vocab 300" not in p.stdout:
        failures.append(f"tiny llama: {p.stdout[-400:]} {p.stderr}")
    # an output matrix of its own: an untied head, whose logits are x output.weight^T
    untied = os.path.join(workdir, "tiny_llama_untied.gguf")
    write(untied, add="output.weight")
    p, _ = run(normlab, "sample", "--checkpoint", untied, "--prompt", "ab", "--tokenizer", "bytes", "--max-new", "3",
               "--ids")
    if p.returncode != 0 or len(p.stdout.split()) != 3:
        failures.append(f"tiny llama with output.weight: {p.stdout} {p.stderr}")
    # a directory without config.json holding one GGUF file (what scripts/fetch_model.sh writes) is that
    # file: the same ids; a directory holding two is refused, naming what it holds
    one = os.path.join(workdir, "one_gguf")
    shutil.rmtree(one, ignore_errors=True)  # a rerun in the same build directory starts from an empty one
    os.makedirs(one)
    shutil.copy(untied, one)
    q, _ = run(normlab, "sample", "--checkpoint", one, "--prompt", "ab", "--tokenizer", "bytes", "--max-new", "3", "--ids")
    if q.returncode != 0 or q.stdout != p.stdout:
        failures.append(f"a directory holding one GGUF file: {q.stdout} {q.stderr} (the file itself: {p.stdout})")
    shutil.copy(ok, one)
    q, _ = run(normlab, "sample", "--checkpoint", one, "--prompt", "ab", "--tokenizer", "bytes", "--max-new", "3", "--ids")
    if q.returncode == 0 or "tiny_llama.gguf" not in q.stderr:
        failures.append(f"a directory holding two GGUF files: exit {q.returncode}, {q.stderr}")
    # heads wider than embedding_length / head_count (attention.key_length, as Gemma 2 and Qwen3 files)
    wide = os.path.join(workdir, "tiny_llama_wide_heads.gguf")
    write(wide, head_dim=24)
    p, _ = run(normlab, "sample", "--checkpoint", wide, "--prompt", "ab", "--tokenizer", "bytes", "--max-new", "3", "--ids")
    if p.returncode != 0 or len(p.stdout.split()) != 3:
        failures.append(f"tiny llama with key_length 24: {p.stdout} {p.stderr}")
    p, _ = run(normlab, "gguf", wide)
    if p.returncode != 0 or "4 heads (2 key-value) of 24, d_ff 96" not in p.stdout:
        failures.append(f"tiny llama with key_length 24: `normlab gguf` says {p.stdout[-300:]} {p.stderr}")
    refusals = {
        "general.architecture is 'gpt2'": dict(arch="gpt2"),
        "rope.scaling.type is 'yarn'": dict(extra=lambda w: w.add_rope_scaling_type(gguf.RopeScalingType.YARN)),
        "rope.scaling.factor 0.5 must be in [1, 1e6]": dict(extra=lambda w: (
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR), w.add_rope_scaling_factor(0.5))),
        "expert_count > 0": dict(extra=lambda w: w.add_expert_count(8)),
        "llama.attention.sliding_window": dict(extra=lambda w: w.add_uint32("llama.attention.sliding_window", 4)),
        "no tensor 'blk.1.ffn_up.weight'": dict(drop="blk.1.ffn_up.weight"),
        "tensor 'rope_freqs.weight' must hold one divisor per rotated pair (8 values)": dict(add="rope_freqs.weight"),
        # Gemma: what its files may say and normlab does not represent, and a block without its sandwich norms
        "gemma2.attn_logit_softcapping is -1; a soft cap is in [0, 1e6]": dict(
            arch="gemma2", extra=lambda w: w.add_attn_logit_softcapping(-1.0)),
        "metadata 'gemma3.attention.sliding_window_pattern' is not something": dict(
            arch="gemma3", extra=lambda w: w.add_uint32("gemma3.attention.sliding_window_pattern", 4)),
        "no tensor 'blk.0.post_attention_norm.weight'": dict(arch="gemma2"),
        # partial rotary: not in the llama layout (its converter permuted whole heads), never an odd count;
        # Phi-3: its fused matrices, LongRoPE's two factor lists of one divisor per rotated pair
        "rope.dimension_count is 8 of the head size 16": dict(extra=lambda w: w.add_rope_dimension_count(8)),
        "rope.dimension_count is 7 of the head size 16": dict(
            arch="qwen2", extra=lambda w: w.add_rope_dimension_count(7)),
        "no tensor 'blk.0.attn_qkv.weight'": dict(arch="phi3"),
        "rope_factors_short.weight and rope_factors_long.weight of one divisor per rotated pair (8 values)": dict(
            arch="phi3", add="rope_factors_long.weight"),
        "rope.scaling.attn_factor is not 1 without LongRoPE's factors": dict(
            arch="phi3", extra=lambda w: w.add_rope_scaling_attn_factors(1.2)),
        # OLMo 3's sliding window (three layers of four) is not OLMo 2's block
        "metadata 'olmo2.attention.sliding_window' is not something": dict(
            arch="olmo2", extra=lambda w: w.add_sliding_window(4096)),
        "no tensor 'blk.0.attn_q_norm.weight' (a olmo2 model": dict(arch="olmo2"),
    }
    for needle, kw in refusals.items():
        path = os.path.join(workdir, "refused.gguf")
        write(path, **kw)
        p, _ = run(normlab, "sample", "--checkpoint", path, "--prompt", "x", "--tokenizer", "bytes")
        if p.returncode != 1 or needle not in p.stderr:
            failures.append(f"refusal '{needle}': exit {p.returncode}, {p.stderr.strip()[:300]}")
    return len(refusals) + 2


def llama_cpp_permute(w, heads):
    """convert_hf_to_gguf.py's LlamaModel.permute: rows of each head from Hugging Face's rotate-half order
    to llama.cpp's interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_cpp_rope_freqs(head_dim, base, s):
    """convert_hf_to_gguf.py's rope_freqs for rope_type llama3: one divisor per frequency, float32."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def write_converted(path, arch, sd, config, rope=None):
    """An HF state dict written as llama.cpp's convert_hf_to_gguf.py writes it: the llama architecture's q
    and k rows permuted to interleaved pairs (qwen2, qwen3 and Gemma keep Hugging Face's order: llama.cpp
    rotates them "neox" style), q, k, v biases (qwen2), per-head q and k norms (qwen3, gemma3), RoPE scaling
    as the converter states it (rope_freqs.weight for llama3, rope.scaling.* for linear). Gemma's: every
    norm gain stored as 1 + w (its modify_tensors), key_length always, no output.weight; gemma2's soft caps
    and sliding window; gemma3's sliding window and final soft cap when set; the sandwich's two norms. Phi-3's
    (its Phi3MiniModel): q, k, v fused in attn_qkv and gate, up in ffn_up as Hugging Face holds them, the
    rotated dimensions int(partial_rotary_factor hidden_size) // heads, the original context length, the
    sliding window (0: none), and for LongRoPE both factor lists as tensors with the attention factor
    sqrt(1 + ln(s) / ln(original)), s = max_position_embeddings / original. OLMo 2's (its Olmo2Model): the
    branch-output norms as post_attention_norm and post_ffw_norm, the q and k norms over whole projections,
    rows as trained."""
    gemma, phi3 = arch.startswith("gemma"), arch == "phi3"
    if phi3 and config.get("tie_word_embeddings"):
        sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    olmo2 = arch == "olmo2"  # (its converter: norms on the branch outputs under the sandwich's names)
    if gemma:
        sd = {k: v + 1 if k.endswith("norm.weight") else v for k, v in sd.items() if k != "lm_head.weight"}
    C, H, KV = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    L, F = config["num_hidden_layers"], config["intermediate_size"]
    hd = config.get("head_dim") or C // H
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    if hd * H != C or gemma:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        w.add_final_logit_softcapping(config["final_logit_softcapping"])
    if arch == "gemma3" and config.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(config["final_logit_softcapping"])
    if arch in ("gemma2", "gemma3") and config.get("sliding_window"):
        w.add_sliding_window(config["sliding_window"])
    if phi3:
        rp = config.get("rope_parameters") or config.get("rope_scaling") or {}
        original = config.get("original_max_position_embeddings") or rp.get("original_max_position_embeddings") \
            or config["max_position_embeddings"]
        rot = rp.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
        w.add_rope_dimension_count(int(rot * C) // H)
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_sliding_window(config.get("sliding_window") or 0)
        if rp.get("long_factor"):
            s = config["max_position_embeddings"] / original
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(s) / math.log(original)) if s > 1 else 1.0)
            w.add_tensor("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
            w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))
    if rope and rope["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rope:
        w.add_tensor("rope_freqs.weight", llama_cpp_rope_freqs(hd, config["rope_theta"], rope))
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    if "lm_head.weight" in sd:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    sandwich = (("post_attention_norm", "post_attention_layernorm"), ("ffn_norm", "pre_feedforward_layernorm"),
                ("post_ffw_norm", "post_feedforward_layernorm"))
    reordered = (("post_attention_norm", "post_attention_layernorm"), ("post_ffw_norm", "post_feedforward_layernorm"))
    names = (("attn_norm", "input_layernorm"),
             *(sandwich if arch in ("gemma2", "gemma3") else reordered if olmo2 else
               (("ffn_norm", "post_attention_layernorm"),)),
             ("attn_v", "self_attn.v_proj"),
             ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
             ("ffn_down", "mlp.down_proj"), ("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm"),
             ("attn_qkv", "self_attn.qkv_proj"), ("ffn_up", "mlp.gate_up_proj"))
    for l in range(L):
        h = f"model.layers.{l}."
        for name, key in names:
            if h + key + ".weight" in sd:
                w.add_tensor(f"blk.{l}.{name}.weight", sd[h + key + ".weight"])
        if phi3:
            continue
        q, k = sd[h + "self_attn.q_proj.weight"], sd[h + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = llama_cpp_permute(q, H), llama_cpp_permute(k, KV)
        w.add_tensor(f"blk.{l}.attn_q.weight", q)
        w.add_tensor(f"blk.{l}.attn_k.weight", k)
        for x in "qkv":
            if h + f"self_attn.{x}_proj.bias" in sd:
                w.add_tensor(f"blk.{l}.attn_{x}.bias", sd[h + f"self_attn.{x}_proj.bias"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_converted(normlab, workdir, failures, source_dir):
    """GGUF files as llama.cpp's converter writes them, against transformers' logits for the same weights:
    random models (transformers 4.45) of the llama architecture with Llama 3.1's llama3 RoPE scaling and with
    linear scaling, of qwen2 (q, k, v biases, rotate-half rows), gemma, gemma2 and phi3 (plain and LongRoPE),
    and from tests/data (what transformers 5.24 computed): qwen3 (per-head QK-norm, wider heads), gemma3 in
    its real layer pattern, phi4mini (partial rotary with LongRoPE) and olmo2 (the reordered block)."""
    import torch
    from transformers import (Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM, LlamaConfig,
                              LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM)
    base = dict(vocab_size=53, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                intermediate_size=40, max_position_embeddings=64, rope_theta=1e4, rms_norm_eps=1e-5,
                tie_word_embeddings=False, attn_implementation="eager")
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 32}
    # Gemma: tied (the converter drops lm_head), heads of 8 wider than 36 / 3; Gemma 2 with small soft caps
    # (so tanh bends) and a sliding window past the 12 tokens; its q.k scale is 1/sqrt(head_dim) in llama.cpp
    # except at 46 layers (the 27B model), where it is 1/sqrt(hidden_size / heads): transformers' models state
    # it as query_pre_attn_scalar
    gemma = dict(tie_word_embeddings=True, head_dim=8, hidden_activation="gelu_pytorch_tanh")
    gemma2 = dict(gemma, attn_logit_softcapping=0.8, final_logit_softcapping=1.5, sliding_window=16,
                  query_pre_attn_scalar=8)
    gemma2_27b = dict(gemma2, num_hidden_layers=46, hidden_size=12, intermediate_size=16, query_pre_attn_scalar=4)
    # Phi-3: fused matrices and a sliding window past the 12 tokens (Phi-3-mini-4k's 2047); LongRoPE as Phi-3.5's
    # (max 64 over an original 32: cos and sin x sqrt(1 + ln 2 / ln 32), the short factors up to 32 tokens)
    phi3 = dict(sliding_window=20, pad_token_id=52, bos_token_id=1, eos_token_id=52)
    phi3_longrope = dict(phi3, original_max_position_embeddings=32)
    longrope = {"type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7, 6.2, 9.9],
                "long_factor": [1.0, 4.0, 8.0, 16.0, 32.0, 64.0]}
    cases = [("llama_llama3", "llama", LlamaConfig, LlamaForCausalLM, llama3, {}),
             ("llama_linear", "llama", LlamaConfig, LlamaForCausalLM, {"rope_type": "linear", "factor": 4.0}, {}),
             ("qwen2", "qwen2", Qwen2Config, Qwen2ForCausalLM, None, {}),
             ("gemma", "gemma", GemmaConfig, GemmaForCausalLM, None, gemma),
             ("gemma2", "gemma2", Gemma2Config, Gemma2ForCausalLM, None, gemma2),
             ("gemma2_46_layers", "gemma2", Gemma2Config, Gemma2ForCausalLM, None, gemma2_27b),
             ("phi3", "phi3", Phi3Config, Phi3ForCausalLM, None, phi3),
             ("phi3_longrope", "phi3", Phi3Config, Phi3ForCausalLM, longrope, phi3_longrope)]
    n = 0
    for label, arch, Config, Model, rope, extra in cases:
        torch.manual_seed(5)
        config = Config(**dict(base, **extra), rope_scaling=dict(rope) if rope else None)
        model = Model(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape))
        sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
        path = os.path.join(workdir, f"converted_{label}.gguf")
        write_converted(path, arch, sd, config.to_dict(), None if arch == "phi3" else rope)
        ids = np.random.default_rng(7).integers(0, config.vocab_size, size=(2, 12)).astype(np.int32)
        with torch.no_grad():
            want = model.double()(input_ids=torch.from_numpy(ids.astype(np.int64)), use_cache=False).logits.numpy()
        n += compare_logits(normlab, workdir, label, path, ids, np.ones_like(ids), want, failures)
    # what transformers 5.24 computed (tests/data): qwen3, and gemma3 in its real layer pattern (llama.cpp's fixed
    # rule: five local layers at base 10000, then a global one at the file's base with its linear scaling)
    # Phi-4-mini's block from tests/data/phi4mini-tiny (6 of each head's 8 dimensions rotated, LongRoPE, tied) and
    # OLMo 2's from olmo2-tiny (norms on the branch outputs, QK-norm over the whole projections)
    paths = {}
    for label, arch in (("qwen3", "qwen3"), ("gemma3-swa6", "gemma3"), ("phi4mini", "phi3"), ("olmo2", "olmo2")):
        d = os.path.join(source_dir, "tests", "data", f"{label}-tiny")
        golden = load_file(os.path.join(d, "golden.safetensors"))
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        rope = config["rope_parameters"].get("full_attention", config["rope_parameters"])
        config["rope_theta"] = rope["rope_theta"]
        path = os.path.join(workdir, f"converted_{label}.gguf")
        write_converted(path, arch, load_file(os.path.join(d, "model.safetensors")), config,
                        rope if rope.get("rope_type") == "linear" else None)
        n += compare_logits(normlab, workdir, label, path, golden["input_ids"], golden["attention_mask"],
                            golden["logits"], failures)
        paths[arch] = path
    p, _ = run(normlab, "gguf", paths["phi3"])  # the summary states the partial rotary and LongRoPE's factor
    if "6 of each head's 8 dimensions rotated" not in p.stdout or "cos and sin x 1.18322" not in p.stdout:
        failures.append(f"normlab gguf on a phi3 file: {p.stdout[-400:]}")
    p, _ = run(normlab, "gguf", paths["gemma3"])  # the summary names what llama.cpp's rules decided
    if "local layers (5 of every 6) at RoPE base 10000 unscaled, logits capped at 2, sequences up to 16" not in p.stdout:
        failures.append(f"normlab gguf on a gemma3 file: {p.stdout[-400:]}")
    return n


def compare_logits(normlab, workdir, label, path, ids, mask, want, failures):
    """normlab's logits from the GGUF file at `path` must be `want` (at the positions the mask keeps)."""
    from safetensors.numpy import save_file
    tok = os.path.join(workdir, f"converted_{label}_tokens.safetensors")
    save_file({"input_ids": ids.astype(np.int32), "labels": ids.astype(np.int32),
               "attention_mask": mask.astype(np.int32)}, tok)
    out = os.path.join(workdir, f"converted_{label}_out.safetensors")
    p, _ = run(normlab, "grads", "--checkpoint", path, "--tokens", tok, "--out", out, "--force")
    if p.returncode != 0:
        failures.append(f"converted {label}: normlab grads on the GGUF file failed: {p.stderr[-400:]}")
        return 0
    keep = mask == 1
    err = np.abs(load_file(out)["logits"][keep] - want[keep]).max()
    if not err < 2e-5:
        failures.append(f"converted {label}: GGUF logits differ from transformers' by {err:.3g}")
    return 1


def check_sentencepiece(normlab, workdir, source_dir, failures):
    """normlab's SentencePiece BPE from GGUF metadata against the sentencepiece library's encode."""
    import sentencepiece as spm
    corpus = os.path.join(workdir, "spm_corpus.txt")
    with open(os.path.join(source_dir, "data", "kjv.txt"), encoding="utf-8") as f:
        text = f.read(400_000)
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(text + "\nCafé naïve résumé über straße\n日本語のテキスト 中文文本\n")
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=1500, model_type="bpe",
                                   byte_fallback=True, character_coverage=0.9995, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, split_digits=True, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    types = []
    for i in range(sp.get_piece_size()):
        types.append(6 if sp.is_byte(i) else 3 if sp.is_control(i) else 2 if sp.is_unknown(i)
                     else 5 if sp.is_unused(i) else 1)
    path = os.path.join(workdir, "spm.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(sp.get_piece_size())])
    w.add_token_scores([float(sp.get_score(i)) for i in range(sp.get_piece_size())])
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    texts = ["In the beginning God created the heaven and the earth.",
             "  two  spaces,   three   and a tab\there", "Numbers 3:16 and 1234567", "Café naïve résumé",
             "日本語 and 中文 mixed", "emoji \U0001F600 and \u00fe\u0100 bytes", "x", " leading space",
             text[123_456:125_456]]
    for t in texts:
        want = [sp.bos_id()] + sp.encode(t)
        p, _ = run(normlab, "tokenize", "--tokenizer", path, "--text", t, "--json")
        got = json.loads(p.stdout)["ids"] if p.returncode == 0 else p.stderr.strip()
        if got != want:
            failures.append(f"sentencepiece {t[:40]!r}: normlab {str(got)[:200]} vs sentencepiece {str(want)[:200]}")
    return len(texts)


def check_split_pre_tokenizers(normlab, workdir, source_dir, failures):
    """Byte-level BPE from GGUF metadata with the pre-tokenizers 'llama-bpe' (Llama 3) and 'qwen2' (llama.cpp's
    names for the Split regexes of those tokenizer.json files): the GPT-2 vocabulary written as GGUF metadata,
    against the tokenizers library with the same vocabulary and the model's Split regex then ByteLevel."""
    import tokenizers
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab_dir = os.path.join(source_dir, "third_party", "gpt2-vocab")
    encoder, bpe_file = os.path.join(vocab_dir, "encoder.json"), os.path.join(vocab_dir, "vocab.bpe")
    with open(encoder, encoding="utf-8") as f:
        ids = json.load(f)
    with open(bpe_file, encoding="utf-8") as f:
        merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    tokens = sorted(ids, key=ids.get)
    regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    texts = ["Hello world, it's 2026: 1234567 items!", "HE'S THEY'RE\n\n  \n x", "a \n\tb  \r\n\r\nc",
             "caf\u00e9 \u4f60\u597d \U0001F600 ...!!!\n\n"]
    n = 0
    for pre, numbers in (("llama-bpe", r"\p{N}{1,3}"), ("qwen2", r"\p{N}")):
        path = os.path.join(workdir, f"bpe_{pre}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list([t.encode("utf-8") for t in tokens])
        w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
        w.add_token_merges(merges)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        ref = Tokenizer(models.BPE.from_file(encoder, bpe_file))
        ref.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(regex.replace(r"\p{N}{1,3}", numbers)), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        for t in texts:
            want = ref.encode(t).ids
            p, _ = run(normlab, "tokenize", "--tokenizer", path, "--text", t, "--json")
            got = json.loads(p.stdout)["ids"] if p.returncode == 0 else p.stderr.strip()
            if got != want:
                failures.append(f"pre-tokenizer {pre} {t[:40]!r}: normlab {str(got)[:200]} vs tokenizers {str(want)[:200]}")
            n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--smollm2", help="also every tensor of this real GGUF file")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."),
                    help="the source tree (its data/kjv.txt trains the SentencePiece model)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    failures = []
    n = 0
    for seed in (1, 2):
        path = os.path.join(a.workdir, f"random{seed}.gguf")
        write_random(path, seed)
        n += check_dequantize(a.normlab, path, os.path.join(a.workdir, "dequantized.safetensors"), failures)
    print(f"dequantization: {n} random and quantized tensors of {len(TYPES)} types compared bit for bit")
    if a.smollm2:
        m = check_dequantize(a.normlab, a.smollm2, os.path.join(a.workdir, "smollm2.safetensors"), failures)
        os.remove(os.path.join(a.workdir, "smollm2.safetensors"))
        print(f"dequantization: {m} tensors of {a.smollm2} compared bit for bit")
    print(f"hostile files: {check_hostile(a.normlab, a.workdir, failures)} cases")
    print(f"llama metadata: {check_llama_metadata(a.normlab, a.workdir, failures)} cases")
    print(f"converted files against transformers: {check_converted(a.normlab, a.workdir, failures, a.source)}")
    print(f"Llama 3 / Qwen2 pre-tokenizers from GGUF metadata: {check_split_pre_tokenizers(a.normlab, a.workdir, a.source, failures)} texts")
    print(f"sentencepiece vocabulary: {check_sentencepiece(a.normlab, a.workdir, a.source, failures)} texts")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("gguf_check: all passed")


if __name__ == "__main__":
    main()
