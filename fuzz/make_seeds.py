#!/usr/bin/env python3
# make_seeds.py: writes the committed seed corpus of every harness into fuzz/corpus/<name>/: a handful
# of small valid inputs and nearly valid ones (one thing wrong each). Deterministic; run it after
# changing a seed here (`python3 fuzz/make_seeds.py`). The inputs a fuzzer found a defect with are
# seeds too, named regress-<what> (the defect is said where each is written).
import json, os, struct, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(harness, name, data):
    d = os.path.join(root, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def safetensors(tensors, metadata=None, pad=True, extra=b""):
    """tensors: list of (name, dtype, shape, bytes); laid out in order."""
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data + extra


i32 = lambda *v: struct.pack("<%di" % len(v), *v)

# --- safetensors
f32 = struct.pack("<3f", 1.0, -2.5, 3.25)
put("safetensors", "f32", safetensors([("w", "F32", [3], f32)], {"format": "pt"}))
put("safetensors", "mixed", safetensors([("a", "I32", [2, 2], i32(1, 2, 3, 4)), ("b", "BF16", [2], b"\x80\x3f\x00\x40"),
                                         ("c", "F16", [1], b"\x00\x3c"), ("d", "I64", [1], struct.pack("<q", -7)),
                                         ("e", "F64", [], struct.pack("<d", 0.5)), ("z", "F32", [0, 4], b"")]))
put("safetensors", "trailing", safetensors([("w", "F32", [3], f32)], extra=b"\0\0\0\0"))
put("safetensors", "gap", safetensors([("w", "F32", [2], f32[:8])]) [:-8] + b"\0" * 4 + f32[:8])
put("safetensors", "overlap", b"\x50\0\0\0\0\0\0\0" + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}' + b"\0" * 12)
put("safetensors", "bad-length", struct.pack("<Q", 1 << 40) + b'{"a":1}')
put("safetensors", "deep-meta", safetensors([], {"x": "y"}).replace(b'"y"', b'"' + b"[" * 40 + b'"'))
put("safetensors", "huge-shape", safetensors([("w", "F32", [1 << 40, 1 << 40], b"")]))

# --- checkpoint_config: the JSON of model_config_to_json
cfg = {"arch": "gpt", "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 64, "vocab": 256, "seq_len": 8,
       "norm": "layernorm", "eps": 1e-5, "activation": "gelu", "placement": ["pre"], "residual": True,
       "mlp": True, "init": "gpt2", "init_std": 0.02, "dropout": 0.0, "seed": 1337}
put("checkpoint_config", "gpt", json.dumps(cfg))
put("checkpoint_config", "encdec", json.dumps(dict(cfg, arch="encdec", dec_layers=1, placement="post")))
put("checkpoint_config", "encoder", json.dumps(dict(cfg, arch="encoder", vocab=257, norm="rmsnorm", placement="deepnorm")))
put("checkpoint_config", "terabytes", json.dumps(dict(cfg, d_model=1 << 20, d_ff=1 << 24, n_layers=100000)))
put("checkpoint_config", "int-wrap", json.dumps(dict(cfg, n_layers=2**32 + 1, seq_len=1e300)))
put("checkpoint_config", "unknown-key", json.dumps(dict(cfg, colour="red")))
put("checkpoint_config", "mixed-placement", json.dumps(dict(cfg, n_layers=3, placement=["pre", "post", "sandwich"])))

# --- run_config: TOML, then NUL-separated --set overrides
with open(os.path.join(os.path.dirname(root), "..", "configs", "example.toml")) as f:
    example = f.read()
put("run_config", "example", example)
small = "[model]\nd_model = 16\nn_heads = 2\nn_layers = 1\nseq_len = 8\n[train]\nsteps = 2\n"
put("run_config", "small-sets", small + "\0train.lr=3e-4\0model.placement=post\0data.corpus=x.txt")
put("run_config", "bad-set", small + "\0lr\0model.=1\0train.grad_accum=99999999999")
put("run_config", "non-ascii", "[model]\nd_model = 16\n\u00a1 = 1\n")
put("run_config", "types", "[model]\nplacement = [\"pre\", 1]\n[train]\nlr = \"fast\"\nsteps = 1e19\n[optim]\nx = 1\n")
put("run_config", "inline", "model = { d_model = 32, n_heads = 2 }\ntrain.seed = 2\n\0model.eps=0\0train.seed=-1")

# --- study
with open(os.path.join(os.path.dirname(root), "..", "tests", "data", "tiny_study.toml")) as f:
    put("study", "tiny", f.read())
put("study", "sets", "[study]\nname = \"s\"\n[base.model]\nd_model = 16\n[[grid]]\nmodel.placement = [\"pre\", \"post\"]\n"
    "[[grid]]\ntrain.lr = [1e-3, 2e-3]\ntrain.seed = [1, 2]\n\0train.steps=3\0model.n_heads=2")
put("study", "empty-grid", "[study]\nname = \"e\"\n[[grid]]\n")
put("study", "big-grid", "[study]\nname = \"b\"\n[[grid]]\n" + "".join(
    "train.seed%d = [%s]\n" % (k, ", ".join(str(i) for i in range(8))) for k in range(8)))
put("study", "grid-set-clash", "[study]\nname = \"c\"\n[[grid]]\ntrain.lr = [1, 2]\n\0train.lr=3")

# --- json
put("json", "object", json.dumps({"a": 1, "b": -2, "c": 2.5, "d": True, "e": "s", "f": [1, {"g": None}],
                                  "big": 2**64 - 1, "neg": -2**63, "huge": 1e300, "frac": 0.5}))
put("json", "int-edges", '{"x": 4294967312, "y": 1e19, "z": -1e19, "w": 2147483648, "v": -2147483649}')
put("json", "deep", "[" * 600 + "]" * 600)
put("json", "deep-string", '{"a": "' + "[" * 700 + '"}')
put("json", "bad-utf8", b'{"a": "\xff\xfe", "\xc3": 1}')
put("json", "truncated", '{"a": [1, 2')

# --- token_files: one input read both as .bin (uint16 ids) and as .safetensors
put("token_files", "bin-stream", struct.pack("<40H", *[(i * 7) % 300 for i in range(40)]))
put("token_files", "stream", safetensors([("input_ids", "I32", [1, 40], i32(*[(i * 5) % 200 for i in range(40)]))]))
put("token_files", "rows", safetensors([("input_ids", "I32", [2, 3], i32(1, 2, 3, 4, 5, 6)),
                                        ("labels", "I32", [2, 3], i32(2, 3, -100, 5, 6, -100)),
                                        ("attention_mask", "I32", [2, 3], i32(1, 1, 1, 1, 1, 0)),
                                        ("token_type_ids", "I32", [2, 3], i32(0, 0, 0, 0, 1, 1))]))
put("token_files", "seq2seq", safetensors([("input_ids", "I32", [1, 2], i32(5, 6)), ("attention_mask", "I32", [1, 2], i32(1, 1)),
                                           ("decoder_input_ids", "I32", [1, 3], i32(1, 7, 8)),
                                           ("labels", "I32", [1, 3], i32(7, 8, 2))]))
put("token_files", "big-id", safetensors([("input_ids", "I32", [20], i32(*([2**31 - 1] + list(range(19)))))]))
put("token_files", "negative-id", safetensors([("input_ids", "I32", [20], i32(*range(-1, 19)))]))
put("token_files", "bad-label", safetensors([("input_ids", "I32", [1, 3], i32(1, 2, 3)), ("labels", "I32", [1, 3], i32(-7, 3, -100))]))

# --- corpus: text up to the first NUL (also the source side and the mod2imp text), then the target side
put("corpus", "text", "In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n" * 2)
put("corpus", "parallel", "Al principio\nY la tierra\n\0In the beginning\nAnd the earth\n")
put("corpus", "parallel-uneven", "uno\ndos\ntres\n\0one\ntwo\n")
put("corpus", "crlf-empty-line", "a\r\n\r\nb\n\0x\r\ny\r\nz\n")
put("corpus", "bad-utf8", b"caf\xc3 \xff\n\0ok\n")
put("corpus", "imp", "$$$Genesis 1:1\n<w lemma=\"strong:H07225\">In the beginning</w> God &amp; <note>n</note>created\n"
    "$$$Genesis 1:2\n<transChange type=\"added\">And</transChange> the earth &#x41; &#65;\u00b6\n$$$[ Module Heading ]\nx\n"
    "\0<w lemma=\"strong:G2424\">Jesus</w><chapter eID=\"x\"/>after")
put("corpus", "imp-bad", "$$$Genesis 1:\n<w>a</w>&bogus;\n$$$Exodus 99999999999:1\nx\n\0<w lemma=\"strong:H99999999999\">x</w>&#99999999999;")

# --- tokenizer_json
bpe = {"version": "1.0", "added_tokens": [{"id": 8, "content": "<|endoftext|>", "special": True, "normalized": False,
                                           "single_word": False, "lstrip": False, "rstrip": False}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "aa": 6, "<unk>": 7},
                 "unk_token": "<unk>", "merges": ["a b", "ab c", "b c", "a a"]}}
put("tokenizer_json", "bpe", json.dumps(bpe))
put("tokenizer_json", "bpe-pair-merges", json.dumps(dict(bpe, model=dict(bpe["model"], merges=[["b", "c"], ["a", "b"]]))))
wp = {"added_tokens": [{"id": 1, "content": "[CLS]", "special": True}, {"id": 2, "content": "[SEP]", "special": True}],
      "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None, "clean_text": True,
                     "handle_chinese_chars": True},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100,
                "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "hello": 4, "world": 5, "##ing": 6, "x": 7}}}
put("tokenizer_json", "wordpiece", json.dumps(wp))
put("tokenizer_json", "template", json.dumps(dict(wp, post_processor={
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}})))
put("tokenizer_json", "huge-id", json.dumps(dict(wp, model=dict(wp["model"], vocab={"[UNK]": 0, "a": 2147483647}))))
put("tokenizer_json", "unigram", '{"model": {"type": "Unigram", "vocab": []}}')
put("tokenizer_json", "dup-merge-ids", json.dumps(dict(bpe, model=dict(bpe["model"], vocab={"a": 0, "b": 0}))))
# --- gguf: a tiny file with every kind of metadata value, a byte-level BPE tokenizer and tensors of
# several types, then nearly valid ones
def gguf_str(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, payload):
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def gguf_file(kvs, tensors, data, version=3):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, ne, typ, off in tensors:
        out += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", typ, off)
    out += b"\0" * ((-len(out)) % 32)
    return out + data


tokens = ["a", "b", "ab", "\u0120", "\u0120a", "<s>"]
gguf_tok = [gguf_kv("general.architecture", 8, gguf_str("llama")),
            gguf_kv("tokenizer.ggml.model", 8, gguf_str("gpt2")),
            gguf_kv("tokenizer.ggml.pre", 8, gguf_str("smollm")),
            gguf_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(tokens)) + b"".join(gguf_str(t) for t in tokens)),
            gguf_kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 2) + gguf_str("a b") + gguf_str("\u0120 a")),
            gguf_kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(tokens)) + struct.pack("<6i", 1, 1, 1, 1, 1, 3)),
            gguf_kv("tokenizer.ggml.add_bos_token", 7, b"\1"),
            gguf_kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 5)),
            gguf_kv("general.alignment", 4, struct.pack("<I", 32)),
            gguf_kv("x.f64", 12, struct.pack("<d", 0.5)), gguf_kv("x.i16", 3, struct.pack("<h", -3))]
q8 = struct.pack("<e", 0.5) + bytes(range(32))
q4k = struct.pack("<ee", 0.25, 0.125) + bytes(range(12)) + bytes(range(128))
gguf_tensors = [("f32", [4], 0, 0), ("q8", [32], 8, 32), ("q4k", [256], 12, 96)]
gguf_data = struct.pack("<4f", 1, 2, 3, 4) + b"\0" * 16 + q8 + b"\0" * 30 + q4k
put("gguf", "valid", gguf_file(gguf_tok, gguf_tensors, gguf_data))
put("gguf", "version2", gguf_file(gguf_tok, gguf_tensors, gguf_data, version=2))
put("gguf", "overlap", gguf_file(gguf_tok, [("a", [4], 0, 0), ("b", [8], 0, 0)], gguf_data))
put("gguf", "truncated", gguf_file(gguf_tok, gguf_tensors, gguf_data)[:-40])
put("gguf", "bad-merge", gguf_file(gguf_tok[:4] + [gguf_kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 1) + gguf_str("a  b"))], [], b""))
put("gguf", "huge-array", gguf_file([gguf_kv("k", 9, struct.pack("<IQ", 4, 2**60))], [], b""))
# --- regressions: the inputs of the defects the fuzzers found (docs/TESTING.md, "Fuzzing and sanitizers")
# a layer count of 2^31 - 1 walked layer by layer before its range was checked (a hang)
put("checkpoint_config", "regress-n-layers-2e9", json.dumps(dict(cfg, n_layers=2147473648, seq_len=1e300)))
# id 2^31 - 1 in a token stream: "largest id + 1" overflowed (UBSan: signed integer overflow)
put("token_files", "regress-id-int32-max", safetensors([("input_ids", "I32", [20], i32(*([2**31 - 1] + list(range(19)))))]))
# OSIS markup with ill-formed UTF-8 reached the decoder's assertion
put("corpus", "regress-osis-bad-utf8", b"$$$Genesis 1:1\n<w>caf\xc3</w>\n\0<w>\xff</w>")
# a tokenizer.json id of 2^31 - 2 made the vocabulary a table of 2^31 strings (64 GB)
put("tokenizer_json", "regress-sparse-huge-id", json.dumps(dict(wp, model=dict(wp["model"], vocab={"[UNK]": 0, "a": 2147483646}))))
# a --set key with line breaks broke the parsing back of the model errors' joined message
# (std::out_of_range from substr, a message naming nothing)
put("run_config", "regress-key-with-newlines", "[model]\nd_s = 2\n\0train.lr=3e-4\0model.\n\n\nplacement=orpus=x.txt")
put("run_config", "regress-not-a-table", "model = 5\ntrain = [1]\n")
print("seeds written under", root)
