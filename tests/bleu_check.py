#!/usr/bin/env python3
"""bleu_check.py: `normlab bleu` against sacrebleu 2.6.0 (PyPI, in build/pyenv), the reference
implementation it transcribes. Every comparison needs the same score to 1e-6 BLEU (the requirement
is 0.01; in practice they agree to the last bits) and identical n-gram counts, totals, lengths and
brevity penalty.

    bleu_check.py --normlab build/normlab --workdir DIR [--corpus DIR]

  (a) real text: the first 400 validation lines of each set of the Bible corpus (built into DIR,
      or --corpus), Spanish, modern English and King James English, as references, against seeded
      corruptions of themselves: dropped, swapped, duplicated and replaced words, punctuation removed, added and
      swapped for Unicode punctuation, case changes, truncated and extended lines, shuffled lines,
      empty lines; corpus BLEU through the Python API and, for some, the sacrebleu command line on
      the same files (the printed line must match up to the version field); sentence BLEU
      (--sentence) against sacrebleu.sentence_bleu;
  (b) edge cases: all and some empty hypotheses, empty references, shorter and longer hypotheses,
      no match at some n-gram orders or at all, a single line, identical text, Unicode white space
      and punctuation, entities, <skipped>, numbers with . , and -, tokenized-looking text, a very
      long line;
  (c) bad input: files of different line counts, a missing file, an empty file, invalid UTF-8 ->
      exit 1 with one message naming the problem.
Exit 1 on any failure.
"""

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import sacrebleu
from sacrebleu.metrics import BLEU

TOL = 1e-6
LINES = 400  # of each validation set (about 1,200): sacrebleu itself took 20 s over all of them
failures = []
compared = 0
worst = 0.0


def fail(what):
    failures.append(what)
    print("FAIL:", what)


class Runner:
    def __init__(self, nl, work):
        self.nl, self.work, self.n = nl, work, 0

    def files(self, hyps, refs):
        self.n += 1
        h, r = self.work / f"hyp{self.n}.txt", self.work / f"ref{self.n}.txt"
        h.write_text("".join(x + "\n" for x in hyps), encoding="utf-8")
        r.write_text("".join(x + "\n" for x in refs), encoding="utf-8")
        return h, r

    def bleu(self, h, r, *extra):
        p = subprocess.run([self.nl, "bleu", "--hyp", str(h), "--ref", str(r), *extra],
                           capture_output=True, text=True, timeout=300)
        return p


def compare(run, name, hyps, refs, cli=False, sentences=False):
    """normlab bleu --json on files of these lines against sacrebleu's corpus_score on the lines."""
    global compared, worst
    h, r = run.files(hyps, refs)
    p = run.bleu(h, r, "--json", *(["--sentence"] if sentences else []))
    if p.returncode != 0:
        fail(f"{name}: normlab bleu exited {p.returncode}: {p.stderr.strip()}")
        return
    ours = json.loads(p.stdout)
    ref = BLEU().corpus_score(hyps, [refs])
    compared += 1
    diff = abs(ours["score"] - ref.score)
    worst = max(worst, diff)
    same = (diff <= TOL and ours["counts"] == list(ref.counts) and ours["totals"] == list(ref.totals)
            and ours["hyp_len"] == ref.sys_len and ours["ref_len"] == ref.ref_len
            and abs(ours["bp"] - ref.bp) <= 1e-12
            and all(abs(a - b) <= 1e-9 for a, b in zip(ours["precisions"], ref.precisions)))
    if not same:
        fail(f"{name}: normlab {ours['score']!r} {ours['counts']} {ours['totals']} bp {ours['bp']} "
             f"len {ours['hyp_len']}/{ours['ref_len']}; sacrebleu {ref.score!r} {ref.counts} {ref.totals} "
             f"bp {ref.bp} len {ref.sys_len}/{ref.ref_len}")
    if sentences:
        for k, (hy, rf) in enumerate(zip(hyps, refs)):
            want = sacrebleu.sentence_bleu(hy, [rf]).score
            got = ours["sentences"][k]["score"]
            worst = max(worst, abs(got - want))
            if abs(got - want) > TOL:
                fail(f"{name}: sentence {k + 1}: normlab {got!r}, sacrebleu {want!r} ({hy!r} vs {rf!r})")
                break
    if cli:  # the sacrebleu command on the same files: the printed line, but for the version field
        s = subprocess.run([sys.executable, "-m", "sacrebleu", str(r), "-i", str(h), "-f", "text", "-w", "2"],
                           capture_output=True, text=True, timeout=300)
        theirs = s.stdout.strip().replace("version:" + sacrebleu.__version__, "version:normlab")
        mine = run.bleu(h, r).stdout.strip()
        if s.returncode != 0 or theirs != mine:
            fail(f"{name}: printed lines differ:\n  normlab:   {mine}\n  sacrebleu: {theirs} {s.stderr.strip()}")


# ---- (a) corruptions of real lines ----

UNICODE_PUNCT = ["“", "”", "‘", "’", "—", "–", "…", "¿", "¡", "«", "»", "·"]


def corrupt(line, rng, strength):
    words = line.split()
    out = []
    for w in words:
        x = rng.random()
        if x < 0.5 * strength:
            continue  # dropped
        if x < 0.6 * strength:
            w = rng.choice(["the", "and", "de", "y", "LORD", "Jehová", "unto", "á", "él"])  # replaced
        elif x < 0.7 * strength:
            w = w.upper() if rng.random() < 0.5 else w.lower()
        elif x < 0.8 * strength:
            w = w.strip(".,;:!?¿¡“”‘’\"'()")  # punctuation removed
        elif x < 0.9 * strength:
            w = w + rng.choice([",", ".", ";", ":", "?", "!", " .", " ,"] + UNICODE_PUNCT)
        out.append(w)
        if rng.random() < 0.05 * strength:
            out.append(w)  # duplicated
    for _ in range(int(len(out) * 0.1 * strength)):  # swapped neighbours
        if len(out) > 1:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


def read_lines(path):
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")[:LINES]


def real_text(run, corpus):
    sets = {
        "es (Reina-Valera) valid": corpus / "es-en" / "valid.src",
        "en (WEB) valid": corpus / "es-en" / "valid.tgt",
        "en (KJV) valid": corpus / "web-kjv" / "valid.tgt",
    }
    for name, path in sets.items():
        refs = read_lines(path)
        for seed, strength in ((1, 0.1), (2, 0.4), (3, 0.8), (4, 1.5)):
            rng = random.Random(seed)
            hyps = [corrupt(line, rng, strength) for line in refs]
            compare(run, f"{name}, corruption {strength}", hyps, refs, cli=seed == 2, sentences=seed == 3)
        rng = random.Random(5)
        hyps = [line[: max(0, len(line) * 2 // 3)] for line in refs]  # truncated: BP < 1
        compare(run, f"{name}, truncated", hyps, refs, cli=True)
        hyps = [line + " " + refs[(k + 1) % len(refs)] for k, line in enumerate(refs)]  # longer
        compare(run, f"{name}, extended", hyps, refs)
        shuffled = refs[:]
        rng.shuffle(shuffled)
        compare(run, f"{name}, shuffled lines", shuffled, refs)
        hyps = ["" if k % 7 == 0 else line for k, line in enumerate(refs)]
        compare(run, f"{name}, every 7th line empty", hyps, refs)
        compare(run, f"{name}, identical", refs, refs, cli=True)
    # one language against another: es-en source vs target (few matches, mostly names)
    src = read_lines(corpus / "es-en" / "valid.src")
    tgt = read_lines(corpus / "es-en" / "valid.tgt")
    compare(run, "Spanish against English", src, tgt, cli=True)
    web = read_lines(corpus / "web-kjv" / "valid.src")
    kjv = read_lines(corpus / "web-kjv" / "valid.tgt")
    compare(run, "WEB against KJV (the web-kjv copy baseline)", web, kjv, cli=True, sentences=True)


# ---- (b) edge cases ----

EDGE = {
    "all hypotheses empty": (["", "", ""], ["a b c", "d e", "f"]),
    "some hypotheses empty": (["a b c d", "", "e f g h"], ["a b c d", "x y", "e f g h"]),
    "empty reference lines": (["a b c d e", "x"], ["", "a b c d e"]),
    "hypotheses shorter": (["the cat sat"], ["the cat sat on the mat today"]),
    "hypotheses longer": (["the cat sat on the mat today and yesterday"], ["the cat sat on the mat"]),
    "no 4-gram matches": (["a b c x d e f"], ["a b c d e f"]),
    "no 3- or 4-gram matches": (["a b x c d y e f"], ["a b c d e f"]),
    "no matches at all": (["one two three four five"], ["six seven eight nine ten"]),
    "unigrams only match": (["d c b a"], ["a b c d"]),
    "single line": (["Jesus wept."], ["Jesus wept."]),
    "single short line": (["wept"], ["Jesus wept."]),
    "no 4-grams in the corpus": (["a b c", "d e"], ["a b c", "d e f g"]),
    "Unicode punctuation": (["¿Qué dijo? «Nada» — dijo… ‘no’ y “sí”!", "¡Oh Jehová!"],
                            ["¿Qué dijo? «Nada», dijo… “no” y ‘sí’!", "¡OH Jehová!"]),
    "Unicode white space": (["a\u00a0b\u2003c\u3000d\u205fe\u2009f \x1cg\x1fh\x85i\u2028j",
                             "zero\u200bwidth\u200bspace  tabs\tand\vfeeds\f"],
                            ["a b c d e f g h i j", "zero\u200bwidth space tabs and feeds"]),
    "entities and <skipped>": (["&quot;Hi&quot; &amp; &lt;b&gt; &amp;lt; <skipped> x", "a &amp b"],
                               ['"Hi" & <b> < x', "a & b"]),
    "numbers": (["In 1,000 years 3.14 was 2-3 times -4 and 5- 6 .7 8. 9,x ,10"],
                ["In 1 , 000 years 3.14 was 2 - 3 times -4 and 5 - 6 . 7 8 . 9 , x , 10"]),
    "tokenized-looking text": (["Hello , world ! It is ( so ) ."], ["Hello, world! It is (so)."]),
    "trailing white space": (["a b c d   ", "e f g h\t"], ["a b c d", "e f g h"]),
    "symbols": (["a/b {c} [d] ~e^ `f` @g #h $i %j &k *l +m =n |o \\p"],
                ["a / b { c } [ d ] ~ e ^ ` f ` @ g # h $ i % j & k * l + m = n | o \\ p"]),
    "apostrophes and hyphens": (["don't won't rock'n'roll self-made 3-d x-2"],
                                ["don ' t won't rock'n'roll self - made 3 - d x-2"]),
    "repeated words": (["the the the the the the"], ["the cat the dog the end"]),
}


def edge_cases(run):
    for name, (hyps, refs) in EDGE.items():
        compare(run, f"edge: {name}", hyps, refs, cli=True, sentences=True)
    rng = random.Random(7)
    long_ref = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "eps", ",", "."]) for _ in range(5000))
    long_hyp = " ".join(w for w in long_ref.split() if rng.random() > 0.1)
    compare(run, "edge: a 5000-word line", [long_hyp], [long_ref], cli=True)


# ---- (c) bad input ----

def bad_input(run):
    w = run.work
    good = w / "good.txt"
    good.write_text("a b\nc d\n", encoding="utf-8")
    three = w / "three.txt"
    three.write_text("a\nb\nc\n", encoding="utf-8")
    empty = w / "empty.txt"
    empty.write_text("", encoding="utf-8")
    badutf = w / "bad_utf8.txt"
    badutf.write_bytes(b"fine\nbad \xff byte\n")
    missing = w / "missing.txt"
    cases = [
        ("different line counts", good, three, [f"'{good}' has 2 lines but --ref '{three}' has 3"]),
        ("missing hypothesis file", missing, good, [f"'{missing}': no such file"]),
        ("missing reference file", good, missing, [f"'{missing}': no such file"]),
        ("empty hypothesis file", empty, good, [f"'{empty}' is empty"]),
        ("invalid UTF-8", badutf, good, [f"'{badutf}' line 2: invalid UTF-8 at byte offset 4"]),
        ("a directory", w, good, ["is a directory"]),
    ]
    for name, h, r, needles in cases:
        p = run.bleu(h, r)
        lines = [x for x in p.stderr.strip().split("\n") if x]
        ok = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("normlab: error:")
              and all(n in lines[0] for n in needles) and not p.stdout)
        if not ok:
            fail(f"bad input, {name}: exit {p.returncode}, stderr {p.stderr!r}, wanted {needles}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--corpus", help="a built Bible corpus root (default: build one in --workdir)")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    nl = os.path.abspath(args.normlab)
    run = Runner(nl, work)
    corpus = Path(args.corpus) if args.corpus else work / "bible"
    if not args.corpus:
        p = subprocess.run([nl, "corpus", "bible", "--out", str(corpus)], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            fail(f"normlab corpus bible: exit {p.returncode}: {p.stderr.strip()}")
            return 1
    real_text(run, corpus)
    edge_cases(run)
    bad_input(run)
    print(f"bleu_check: {compared} corpus comparisons with sacrebleu {sacrebleu.__version__}, "
          f"largest score difference {worst:.3g} BLEU (tolerance {TOL})")
    print("bleu_check:", "FAILED" if failures else "all checks passed", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
