#!/usr/bin/env python3
"""tokenizer_check.py: `normlab tokenize` against Hugging Face `tokenizers` 0.20.3 (and
transformers' GPT2TokenizerFast / BertTokenizerFast), id for id, on a varied text set.

    tokenizer_check.py --normlab build/normlab --workdir DIR

Tokenizers compared (every one on every text):
  gpt2 (vendored encoder.json + vocab.bpe)   vs GPT2TokenizerFast from the same files, and a
                                                tokenizers.Tokenizer built as BPE.from_file +
                                                ByteLevel(add_prefix_space=False) + <|endoftext|>
  gpt2 tokenizer.json (saved from the above)  vs tokenizers.Tokenizer.from_file
  the GPT-2 vocabulary behind Llama 3's and Qwen2's pre-tokenizer (Split regex, then ByteLevel; Qwen2's
      NFC normalizer first)
                                              vs tokenizers.Tokenizer.from_file
  the same with add_prefix_space = true       vs tokenizers.Tokenizer.from_file
  BERT WordPiece trained here (no download), four normalizer settings (lowercase x strip_accents),
      as tokenizer.json (BertProcessing / TemplateProcessing)   vs tokenizers.Tokenizer.from_file
      as vocab.txt (--lowercase / --strip-accents)              vs BertTokenizerFast
  SentencePiece BPE with byte fallback trained here (the `sentencepiece` library), converted by
      transformers' LlamaTokenizerFast as Llama 2 / Mistral files hold it: legacy (normalizers
      Prepend + Replace, the decoder Sequence) and not (the Metaspace pre-tokenizer, prepend_scheme
      first), and a Metaspace that splits         vs tokenizers.Tokenizer.from_file
  $HOME/.cache/normlab/all-MiniLM-L6-v2/tokenizer.json, if present (else a printed note)
Every text goes through --text-file (bytes exactly; NUL included); a few also through --text.
Also: an ill-formed UTF-8 file and argument -> exit 1 with one message naming the byte offset.
Prints the first differing text and position of each failure, then `N passed, M failed`; exit 1
on any failure.
"""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPT2_DIR = ROOT / "third_party" / "gpt2-vocab"
MINILM = Path.home() / ".cache" / "normlab" / "all-MiniLM-L6-v2" / "tokenizer.json"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

TEXTS = [
    "",
    "Hello world",
    "Hello, world! How are you?",
    # contractions, and what is not one
    "I'm sure it's fine, they're here, we've gone, you'll see, he'd know, don't",
    "IT'S THE DOG'S BONE'S. I'M. WE'LL. 'S 'T 'RE 'VE 'M 'LL 'D",
    "''s 's' ' s 'ss '' x'sy rock'n'roll dogs'  !!'s ?'re",
    "it\u2019s curly \u2018quoted\u2019 \u201cdouble\u201d",
    # digits and numbers
    "1234567890 12345678901234567890123456789 3.14159 1,000,000 -42 +7e10 0x1F",
    "\u0663\u0664\u0665 \u2160\u2161\u216b \u00bd\u00be \u00b2\u00b3 \u2460\u2461 \uff11\uff12",
    "abc123def 123abc a1b2c3",
    # white space: runs, tabs, newlines, trailing and leading, other spaces
    "a  b   c    d",
    "a\tb\t\tc\t \td",
    "line one\nline two\n\nline four\r\nwindows\rmac",
    "trailing spaces   ",
    "   leading spaces",
    "     ",
    "\n\n\n",
    "\t",
    " ",
    "x \n y\n \nz",
    "nbsp\u00a0here \u2009thin\u2003em\u3000ideographic\u3000\u3000x\u202fnarrow\u205fmath",
    "nel\u0085line\u2028sep\u2029para\u000bvt\u000cff",
    # punctuation runs
    "!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "wait...what?!?! (yes) [no] {maybe} <tag> a/b\\c |pipe| ~tilde~ `code` _under_",
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u00ab guillemets \u00bb \u2014 dash \u2013 en \u2026 \u3002\u3001\uff01\uff1f\u300c\u300d",
    "email@example.com https://example.org/path?q=1&r=2#frag C++ C# .NET",
    # accents, combining marks, case
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u1e9e \u00c5ngstr\u00f6m Cr\u00e8me Br\u00fbl\u00e9e",
    "cafe\u0301 decomposed e\u0301\u0301 a\u0308o\u0308u\u0308 n\u0303 stacked a\u0323\u0302 q\u0307\u0323",
    "\u0130stanbul \u0131 I\u0307 \u03a3\u039f\u03a6\u039f\u03a3 \u03bf\u03b4\u03cc\u03c2 \u1f08\u1f00 \u01c5 \u01c4 \ufb01 \u0149",
    "Vi\u1ec7t Nam ti\u1ebfng Vi\u1ec7t c\u1ee7a ch\u00fang t\u00f4i",
    # scripts: CJK, Japanese, Korean, Arabic, Hebrew, Devanagari, Thai, Cyrillic, Greek
    "\u4f60\u597d\u4e16\u754c \u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002 \u9f8d\u9f98",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca \uff76\uff80\uff76\uff85",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \uc548\ub155\ud558\uc138\uc694 \u1100\u1161\u11a8",
    "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629 \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663",
    "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0915\u093c \u0926\u0947\u0935\u0928\u093e\u0917\u0930\u0940 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0401\u0436 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\U00020000\U0002a6d6 \U0002b740 \uf900\ufa6a \u2f00\u2fd5 \u3400\u4db5",
    # emoji: plain, skin tone, ZWJ family, flags, tag sequence, keycap, variation selector
    "emoji \U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f 1\ufe0f\u20e3 \u2764\ufe0f",
    "new emoji \U0001f979 \U0001fae0 \U0001f9cb \U0001faf6",
    # control and format characters, NUL, U+FFFD, private use, BOM, soft hyphen
    "ctrl\x01\x02\x1f\x7f\x80\x9f end",
    "nul\x00inside\x00",
    "repl\ufffdacement \ufeffbom soft\u00adhyphen zw\u200bsp zw\u200dj lrm\u200e rli\u2067x\u2069",
    "pua\ue000\uf8ff\U000f0000 end",
    # characters whose class depends on the reference's Unicode versions (unicode.h)
    "adlam \U0001e922\U0001e944\U0001e95e kawi \U00011f04\U00011f05 cyr \U0001e030 arab\u08d4\u0890x",
    "old-category \u1734 \u166d \U000111c9 \u1885\u1886 \ua9bd \u180e x",
    "x\U00011f04y \U00011f04's \U0001d2c0're \U0001e030'll a\U0001e030b 1\U0001d2c02 \U0001e4d0\U0001e4f1 \U00031350z c\U0001e944d",
    # long words and text
    "a" * 150,
    "supercalifragilisticexpialidocious" * 4,
    "\u4e00" * 120,
    "x" * 100 + " " + "y" * 101 + " " + "\u00e9" * 99 + "\u0301",
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    # special tokens inside text
    "[CLS] hello [SEP] [MASK] world [PAD][UNK] [cls] [ MASK ]",
    "<|endoftext|>The end.<|endoftext|><|endoftext|> <|endoftext|>\n",
    "x<|endoftext|>y [MASK]z",
]


def random_texts(n, seed):
    """Seeded random strings from a pool that mixes every class the tokenizers distinguish."""
    pool = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    pool += list(" \t\n\r.,;:!?'\"-()[]{}<>/\\|@#$%^&*_+=~`")
    pool += list("\u00e9\u00fc\u00f1\u00df\u0130\u03a3\u0301\u0308\u0327\u064e\u05b4\u093c")
    pool += list("\u4f60\u597d\u65e5\u672c\uac00\ud7a3\u3042\u30a2\u0627\u05d0\u0915\u0e01\u0416")
    pool += list("\U0001f600\U0001f44d\u200d\U0001f3fd\ufe0f\u00a0\u3000\u2028\x00\x07\x7f\u200b\ufeff\ue000")
    pool += list("\u0663\u2160\u00bd\u00b2\u2019\u3002\uff01\u2014")
    chunks = [" [MASK] ", "[CLS]", "<|endoftext|>", "'s", "'LL", "  ", "\n\n", "don't", "1234"]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, 40)):
            parts.append(rng.choice(chunks) if rng.random() < 0.08 else rng.choice(pool))
        out.append("".join(parts))
    return out


CORPUS_EXTRA = [
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve r\u00e9sum\u00e9 \u00fcber die Stra\u00dfe.",
    "\u4f60\u597d\u4e16\u754c \u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "I'm sure it's fine; they're here and we've gone. Don't! 1234567890",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \u0939\u093f\u0928\u094d\u0926\u0940 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
]


def tokenize_many(normlab, tokenizer, texts, jsonl_path, extra=()):
    """`normlab tokenize --json --jsonl` on texts written to jsonl_path (one JSON string per line):
    (the parsed output line of each text, None) or (None, what went wrong)."""
    Path(jsonl_path).write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    r = subprocess.run([normlab, "tokenize", "--tokenizer", str(tokenizer), "--json", "--jsonl", str(jsonl_path), *extra],
                       capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode("utf-8", "replace").strip()
    lines = r.stdout.decode("utf-8").split("\n")[:-1]  # (not splitlines: U+2028 is not a line end here)
    if len(lines) != len(texts):
        return None, f"--jsonl printed {len(lines)} lines for {len(texts)} texts"
    return [json.loads(line) for line in lines], None


class Check:
    def __init__(self, normlab, work):
        self.normlab, self.work = normlab, work
        self.passed = self.failed = 0
        self.text_files = {}
        self.jsonl_files = {}

    def text_file(self, text):
        if text not in self.text_files:
            p = self.work / f"text{len(self.text_files):04d}.txt"
            p.write_bytes(text.encode("utf-8"))
            self.text_files[text] = p
        return self.text_files[text]

    def ours(self, tokenizer, text, extra, via_argument=False):
        source = ["--text", text] if via_argument else ["--text-file", str(self.text_file(text))]
        cmd = [self.normlab, "tokenize", "--tokenizer", str(tokenizer), "--json", *source, *extra]
        r = subprocess.run(cmd, capture_output=True)
        if r.returncode != 0:
            return None, r.stderr.decode("utf-8", "replace").strip()
        return json.loads(r.stdout), None

    def ours_many(self, tokenizer, texts, extra):
        """Every text in one process (tokenize_many), one file per text list."""
        key = tuple(texts)
        if key not in self.jsonl_files:
            self.jsonl_files[key] = self.work / f"texts{len(self.jsonl_files):02d}.jsonl"
        return tokenize_many(self.normlab, tokenizer, texts, self.jsonl_files[key], extra)

    def compare(self, name, tokenizer, extra, oracle, texts, argument_texts=()):
        """oracle(text) -> (ids, tokens). Every text must give the same ids and tokens: all of them
        through --jsonl in one process, the first few also one by one through --text-file (the file
        path byte for byte) and argument_texts through --text."""
        bad = 0
        many, err = self.ours_many(tokenizer, list(texts), extra)
        if err is not None:
            self.fail(name, "(--jsonl)", f"normlab failed: {err}")
            bad += 1
            many = [None] * len(texts)
        runs = [(t, got, "--jsonl") for t, got in zip(texts, many) if got is not None]
        for text in list(texts[:3]) + [("arg", t) for t in argument_texts]:
            via_argument = isinstance(text, tuple)
            if via_argument:
                text = text[1]
            got, err = self.ours(tokenizer, text, extra, via_argument)
            if err is not None:
                self.fail(name, text, f"normlab failed: {err}")
                bad += 1
                continue
            runs.append((text, got, "--text" if via_argument else "--text-file"))
        for text, got, how in runs:
            want_ids, want_tokens = oracle(text)
            if got["ids"] != want_ids or got["tokens"] != want_tokens:
                n = next((i for i, (a, b) in enumerate(zip(got["ids"], want_ids)) if a != b),
                         min(len(got["ids"]), len(want_ids)))
                self.fail(name, text,
                          f"({how}) first difference at position {n} (normlab {len(got['ids'])} ids, "
                          f"reference {len(want_ids)}):\n      normlab   {got['ids'][n:n + 8]} "
                          f"{got['tokens'][n:n + 8]}\n      reference {want_ids[n:n + 8]} "
                          f"{want_tokens[n:n + 8]}")
                bad += 1
        if bad == 0:
            self.passed += 1
            print(f"ok    {name}: {len(texts) + len(argument_texts)} texts identical")

    def fail(self, name, text, why):
        self.failed += 1
        print(f"FAIL  {name}: text {text[:120]!r}{'...' if len(text) > 120 else ''}\n      {why}")

    def expect_error(self, name, cmd, needle):
        r = subprocess.run([self.normlab, *cmd], capture_output=True)
        err = r.stderr.decode("utf-8", "replace")
        lines = [line for line in err.splitlines() if line.strip()]
        if r.returncode == 1 and len(lines) == 1 and needle in err and "normlab: error:" in err:
            self.passed += 1
            print(f"ok    {name}: {lines[0]}")
        else:
            self.failed += 1
            print(f"FAIL  {name}: exit {r.returncode}, wanted 1 and one line with {needle!r}; stderr: {err!r}")


def hf(tok):
    def run(text):
        e = tok.encode(text)
        return e.ids, [tok.id_to_token(i) for i in e.ids]
    return run


def fast(tok):
    def run(text):
        ids = tok(text)["input_ids"]
        return ids, tok.convert_ids_to_tokens(ids)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    try:
        import tokenizers
        import transformers
        from tokenizers import BertWordPieceTokenizer, Tokenizer, decoders, models, pre_tokenizers
        from tokenizers.processors import BertProcessing, TemplateProcessing
        from transformers import BertTokenizerFast, GPT2TokenizerFast
    except ImportError as e:
        print(f"FAIL: {e}: this Python needs tokenizers==0.20.3 and transformers==4.45.2 "
              "(scripts/setup.sh --tests installs them in build/pyenv)")
        return 1
    if tokenizers.__version__ != "0.20.3":
        print(f"note: the reference is tokenizers 0.20.3; this is {tokenizers.__version__}")
    transformers.logging.set_verbosity_error()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    c = Check(args.normlab, work)
    kjv = (ROOT / "data" / "kjv.txt").read_text(encoding="utf-8")
    # and a text of 2.3 MB, which normlab pre-tokenizes a piece of about 1 MiB at a time (cut before a
    # space that follows a non-white ASCII byte: src/io/tokenizer.cpp): every class mixed, then English.
    # (Built with 64-byte pieces, every comparison here agreed with the reference as well.)
    texts = TEXTS + random_texts(40, seed=1234) + [kjv[:20000], "".join(random_texts(30000, seed=7)) + kjv[:1200000]]
    argument_texts = ["Hello world", "caf\u00e9 \u4f60\u597d [MASK] <|endoftext|> it's", ""]

    # GPT-2: the vendored vocabulary. GPT2TokenizerFast is what transformers users get; the bare
    # tokenizers setup below must agree with it (it is the same pipeline).
    encoder, bpe_file = str(GPT2_DIR / "encoder.json"), str(GPT2_DIR / "vocab.bpe")
    gpt2_fast = GPT2TokenizerFast(vocab_file=encoder, merges_file=bpe_file)
    bare = Tokenizer(models.BPE.from_file(encoder, bpe_file))
    bare.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    bare.decoder = decoders.ByteLevel()
    bare.add_special_tokens(["<|endoftext|>"])
    setup_diff = [t for t in texts if fast(gpt2_fast)(t) != hf(bare)(t)]
    if setup_diff:
        c.fail("gpt2 oracle setups", setup_diff[0], "GPT2TokenizerFast and BPE.from_file + ByteLevel differ")
    c.compare("gpt2 (vendored files) vs GPT2TokenizerFast", "gpt2", [], fast(gpt2_fast), texts, argument_texts)

    gpt2_json = work / "gpt2" / "tokenizer.json"
    gpt2_json.parent.mkdir(exist_ok=True)
    gpt2_fast.backend_tokenizer.save(str(gpt2_json))
    c.compare("gpt2 tokenizer.json vs Tokenizer.from_file", gpt2_json.parent, [],
              hf(Tokenizer.from_file(str(gpt2_json))), texts)
    doc = json.loads(gpt2_json.read_text(encoding="utf-8"))
    doc["pre_tokenizer"]["add_prefix_space"] = True
    prefixed = work / "gpt2-prefix-space.json"
    prefixed.write_text(json.dumps(doc), encoding="utf-8")
    c.compare("gpt2 tokenizer.json, add_prefix_space", prefixed, [], hf(Tokenizer.from_file(str(prefixed))), texts)

    # Llama 3's and Qwen2's pre-tokenizer (a Split regex, isolated, then ByteLevel without its own regex;
    # Qwen2's regex takes numbers one by one, Llama 3's in runs of up to three) over the GPT-2 vocabulary
    llama3_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    split_texts = texts + ["\n\n  \n x", "Hello\r\n\r\nWorld \r\n", "a \n\tb  \n", "12345 1234567 1,234.5678",
                           "!!!\n\n?? \n\n", "HE'S THEY'RE YOU'Ll I'D 'd 'T", "\u00bf\u00a1 x \u00a0\u00a0y",
                           "x  \t\n\n\t  y", "(hello) [world] {x}\n\ttab",
                           # canonical composition (Qwen2's NFC): marks in and out of order, Hangul jamo,
                           # two-starter pairs, singletons and excluded composites, a newer-than-9.0 pair
                           "e\u0301 a\u0323\u0302 a\u0302\u0323 \u1100\u1161\u11a8 \u1100\u1161 \u0b47\u0b3e "
                           "A\u030a\u0301 \u212b \u0344 \u0f73 q\u0307\u0323 \u00c5\u0328 \u0958 \U00011935\U00011930"]
    for label, regex in (("llama3", llama3_regex), ("qwen2", llama3_regex.replace(r"\p{N}{1,3}", r"\p{N}"))):
        split = Tokenizer(models.BPE.from_file(encoder, bpe_file))
        split.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        if label == "qwen2":  # Qwen2's tokenizer.json normalizes to NFC first
            split.normalizer = tokenizers.normalizers.NFC()
        split.decoder = decoders.ByteLevel()
        split.add_special_tokens(["<|endoftext|>"])
        path = work / f"{label}-split.json"
        split.save(str(path))
        c.compare(f"{label} Split regex + ByteLevel tokenizer.json", path, [], hf(Tokenizer.from_file(str(path))),
                  split_texts)

    # BERT WordPiece, trained here on the Bible and a few lines in other scripts (so that accents,
    # CJK and subwords are in the vocabulary, while the texts' rarer characters are not).
    corpus = kjv.splitlines()[:4000] + CORPUS_EXTRA * 20
    for lowercase, strip in [(True, None), (False, None), (True, False), (False, True)]:
        tag = f"lowercase={lowercase} strip_accents={strip}"
        d = work / f"bert-{lowercase}-{strip}"
        d.mkdir(exist_ok=True)
        bert = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=strip,
                                      lowercase=lowercase)
        bert.train_from_iterator(corpus, vocab_size=3000, min_frequency=2, special_tokens=SPECIALS,
                                 limit_alphabet=500, show_progress=False)
        cls, sep = bert.token_to_id("[CLS]"), bert.token_to_id("[SEP]")
        if lowercase:  # one post-processor kind per file, both kinds covered
            bert.post_processor = BertProcessing(("[SEP]", sep), ("[CLS]", cls))
        else:
            bert.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                     special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        bert.save(str(d / "tokenizer.json"))
        bert.save_model(str(d))  # vocab.txt
        c.compare(f"bert tokenizer.json ({tag})", d / "tokenizer.json", [],
                  hf(Tokenizer.from_file(str(d / "tokenizer.json"))), texts)
        flags = ["--lowercase", str(lowercase).lower()]
        if strip is not None:
            flags += ["--strip-accents", str(strip).lower()]
        bert_fast = BertTokenizerFast(vocab_file=str(d / "vocab.txt"), do_lower_case=lowercase, strip_accents=strip)
        c.compare(f"bert vocab.txt ({tag}) vs BertTokenizerFast", d / "vocab.txt", flags, fast(bert_fast),
                  texts, argument_texts)
        no_special = [t for t in texts[:12]]
        c.compare(f"bert vocab.txt ({tag}) --no-special", d / "vocab.txt", flags + ["--no-special"],
                  lambda t: (lambda ids: (ids, bert_fast.convert_ids_to_tokens(ids)))(
                      bert_fast(t, add_special_tokens=False)["input_ids"]), no_special)

    # SentencePiece-style BPE in tokenizer.json (Llama 2, Mistral, TinyLlama): a model with byte fallback
    # trained here, converted by transformers as it converts Llama's tokenizer.model
    import sentencepiece as spm
    from transformers import LlamaTokenizerFast
    spm_corpus = work / "spm_corpus.txt"
    spm_corpus.write_text("\n".join(kjv.splitlines()[:6000] + CORPUS_EXTRA * 20) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(spm_corpus), model_prefix=str(work / "spm"), vocab_size=2000,
                                   model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   num_threads=1, minloglevel=2)
    for legacy, prefix in ((True, True), (False, True), (True, False)):
        llama = LlamaTokenizerFast(vocab_file=str(work / "spm.model"), legacy=legacy, add_prefix_space=prefix,
                                   from_slow=True)
        path = work / f"spm-legacy-{legacy}-prefix-{prefix}.json"
        llama.backend_tokenizer.save(str(path))
        c.compare(f"SentencePiece BPE tokenizer.json (legacy={legacy}, add_prefix_space={prefix})", path, [],
                  hf(Tokenizer.from_file(str(path))),
                  texts, argument_texts)
    doc = json.loads((work / "spm-legacy-False-prefix-True.json").read_text(encoding="utf-8"))
    if doc.get("pre_tokenizer") and doc["pre_tokenizer"].get("type") == "Metaspace":
        doc["pre_tokenizer"].update(split=True, prepend_scheme="always")
        split = work / "spm-metaspace-split.json"
        split.write_text(json.dumps(doc), encoding="utf-8")
        c.compare("SentencePiece BPE tokenizer.json (Metaspace, split, always)", split, [],
                  hf(Tokenizer.from_file(str(split))), texts)

    if MINILM.is_file():
        minilm = Tokenizer.from_file(str(MINILM))
        minilm.no_truncation()  # normlab applies neither (as transformers does not by default)
        minilm.no_padding()
        c.compare("all-MiniLM-L6-v2 tokenizer.json", MINILM, [], hf(minilm), texts)
    else:
        print(f"note: {MINILM} is not there; the MiniLM comparison is skipped")

    # Ill-formed UTF-8: one message naming the byte offset, exit 1.
    bad = work / "bad-utf8.txt"
    bad.write_bytes(b"valid text \xc3\x28 then more")
    c.expect_error("ill-formed UTF-8 file", ["tokenize", "--text-file", str(bad)], "invalid UTF-8 at byte offset 11")
    c.expect_error("ill-formed UTF-8 argument", ["tokenize", "--text", "ab\udcff".encode("utf-8", "surrogateescape")],
                   "invalid UTF-8 at byte offset 2")
    c.expect_error("surrogate in UTF-8", ["tokenize", "--tokenizer", str(work / "bert-True-None" / "vocab.txt"),
                                          "--text-file", str(_write(work / "surrogate.txt", b"x\xed\xa0\x80"))],
                   "invalid UTF-8 at byte offset 1")

    # --jsonl: every line one JSON string, checked whole before anything is printed
    c.expect_error("--jsonl with an object line", ["tokenize", "--jsonl", str(_write(work / "object.jsonl", b'"a"\n{"b": 1}\n'))],
                   "line 2: expected one JSON string per line, got a JSON object")
    c.expect_error("--jsonl with an empty line", ["tokenize", "--jsonl", str(_write(work / "blank.jsonl", b'"a"\n\n"b"\n'))],
                   "line 2: not valid JSON")
    c.expect_error("--jsonl with a lone surrogate", ["tokenize", "--jsonl", str(_write(work / "lone.jsonl", b'"\\ud800"\n'))],
                   "line 1: not valid JSON")
    c.expect_error("--jsonl with ill-formed UTF-8", ["tokenize", "--jsonl", str(_write(work / "bad.jsonl", b'"ok"\n"\xc3\x28"\n'))],
                   "invalid UTF-8 at byte offset 6")
    c.expect_error("--jsonl with --out", ["tokenize", "--jsonl", str(work / "texts00.jsonl"), "--out", str(work / "x.safetensors")],
                   "does not apply to the many texts of --jsonl")

    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


def _write(path, data):
    path.write_bytes(data)
    return path


if __name__ == "__main__":
    sys.exit(main())
