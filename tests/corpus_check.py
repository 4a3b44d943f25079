#!/usr/bin/env python3
"""corpus_check.py: `normlab corpus bible` on the real SWORD modules (Debian's sword-text-kjv,
-web, -sparv; scripts/setup.sh installs them), built into the work directory, checked by an
independent reading of what it wrote:

    corpus_check.py --normlab build/normlab --workdir DIR

  - every pair has {train,valid,test}.{src,tgt,ref} of equal line counts, the counts of info.json,
    validation and test sets of 1,000 to 1,500 verses;
  - no line is empty, none has markup left (< > &entity; \\usfm ¶), none has doubled or edge
    spaces, all are UTF-8;
  - the split is the documented rule, recomputed here from the .ref files (FNV-1a 64 and
    splitmix64 written out in Python), the same for both pairs, and no validation or test source
    occurs in train;
  - known verses read exactly as the modules' text with the notes, Strong's tags, subscriptions and
    USFM markers removed; verses of the shifted Reina-Valera chapters are not in es-en;
  - a second build (--force) is byte-identical; a third (no --force) keeps the files and says so;
  - an unwritable --out is one message and exit 1.
Prints the build time. Exit 1 on any failure.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PAIRS = ["es-en", "web-kjv"]
SPLITS = ["train", "valid", "test"]
MASK = (1 << 64) - 1

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & MASK
    return h


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def split_of(ref):
    bucket = splitmix64(fnv1a64(ref)) % 1000
    return "valid" if bucket < 40 else "test" if bucket < 80 else "train"


def read_lines(path):
    data = path.read_bytes()
    text = data.decode("utf-8")  # raises on invalid UTF-8
    check(text.endswith("\n"), f"{path}: no final newline")
    return text[:-1].split("\n") if text else []


def run(nl, *args):
    return subprocess.run([nl, *args], capture_output=True, text=True, timeout=300)


def load_pair(root, pair):
    out = {}
    for split in SPLITS:
        out[split] = {kind: read_lines(root / pair / f"{split}.{kind}") for kind in ("src", "tgt", "ref")}
    return out


def check_pair(root, pair, data):
    info = json.loads((root / pair / "info.json").read_text())
    for split in SPLITS:
        d = data[split]
        n = len(d["ref"])
        check(len(d["src"]) == n and len(d["tgt"]) == n, f"{pair}/{split}: .src/.tgt/.ref line counts differ")
        check(info["counts"][split] == n, f"{pair}/{split}: info.json says {info['counts'][split]}, files {n}")
        if split != "train":
            check(1000 <= n <= 1500, f"{pair}/{split}: {n} verses, not 1,000 to 1,500")
        else:
            check(n > 25000, f"{pair}/train: only {n} verses")
        for kind in ("src", "tgt"):
            for k, line in enumerate(d[kind]):
                where = f"{pair}/{split}.{kind} line {k + 1} ({d['ref'][k]})"
                bad = [c for c in ("<", ">", "\\", "\u00b6", "  ", "\t") if c in line]
                if not line or line != line.strip() or bad or ("&" in line and ";" in line):
                    check(False, f"{where}: {line[:80]!r}")
                    break
        for ref in d["ref"]:
            if split_of(ref) != split:
                check(False, f"{pair}: {ref} is in {split}, the rule puts it in {split_of(ref)}")
                break
    train_src = set(data["train"]["src"])
    for split in ("valid", "test"):
        dup = [s for s in data[split]["src"] if s in train_src]
        check(not dup, f"{pair}/{split}: {len(dup)} sources also in train, e.g. {dup[:1]}")
    for key in ("source", "target"):
        check(info[key]["license"].lower() == "public domain", f"{pair}: {key} licence {info[key]['license']}")
        check(bool(info[key]["version"]), f"{pair}: {key} has no version")
    check("splitmix64(fnv1a64(reference)) % 1000" in info["split_rule"], f"{pair}: split rule not stated")
    return info


def by_ref(data):
    out = {}
    for split in SPLITS:
        d = data[split]
        for r, s, t in zip(d["ref"], d["src"], d["tgt"]):
            out[r] = (s, t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    nl = os.path.abspath(args.normlab)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    root = work / "bible"

    t0 = time.monotonic()
    r = run(nl, "corpus", "bible", "--out", str(root), "--force")
    seconds = time.monotonic() - t0
    check(r.returncode == 0, f"corpus bible exited {r.returncode}: {r.stderr.strip()}")
    if r.returncode != 0:
        return 1
    print(r.stdout.strip())
    print(f"build: {seconds:.1f} s wall (mod2imp on three modules, markup, alignment, split, write)")

    data = {p: load_pair(root, p) for p in PAIRS}
    infos = {p: check_pair(root, p, data[p]) for p in PAIRS}

    # the split is the same for both pairs: a reference held out in one is never trained on in the other
    train = {p: set(data[p]["train"]["ref"]) for p in PAIRS}
    for p, q in (("es-en", "web-kjv"), ("web-kjv", "es-en")):
        held = set(data[p]["valid"]["ref"]) | set(data[p]["test"]["ref"])
        check(not (held & train[q]), f"held-out verses of {p} are in the training set of {q}")

    es, wk = by_ref(data["es-en"]), by_ref(data["web-kjv"])
    want = {
        # (pair, ref): (source, target)
        ("web-kjv", "Genesis 1:1"): ("In the beginning, God created the heavens and the earth.",
                                     "In the beginning God created the heaven and the earth."),
        ("es-en", "Genesis 1:1"): ("EN el principio crió Dios los cielos y la tierra.",
                                   "In the beginning, God created the heavens and the earth."),
        # KJV footnote ("Heb. between the light ...") removed
        ("web-kjv", "Genesis 1:4"): ("God saw the light, and saw that it was good. God divided the light from the darkness.",
                                     "And God saw the light, that it was good: and God divided the light from the darkness."),
        # WEB: "Yahweh</w><note>...</note><w>called" -> a space; KJV: the added words kept
        ("web-kjv", "Leviticus 1:1"): ("Yahweh called to Moses, and spoke to him from the Tent of Meeting, saying,",
                                       "And the LORD called unto Moses, and spake unto him out of the tabernacle of the congregation, saying,"),
        # KJV: "\nd JEHOVAH" (a USFM marker left by the module's converter) -> "JEHOVAH"
        ("web-kjv", "Exodus 6:3"): ("I appeared to Abraham, to Isaac, and to Jacob, as God Almighty; but by my name Yahweh I was not known to them.",
                                    "And I appeared unto Abraham, unto Isaac, and unto Jacob, by the name of God Almighty, but by my name JEHOVAH was I not known to them."),
        # psalm superscriptions are verse text
        ("web-kjv", "Psalms 3:1"): ("A Psalm by David, when he fled from Absalom his son. Yahweh, how my adversaries have increased! Many are those who rise up against me.",
                                    "A Psalm of David, when he fled from Absalom his son. LORD, how are they increased that trouble me! many are they that rise up against me."),
        # the KJV's subscription after the chapter's end is not verse text
        ("web-kjv", "Galatians 6:18"): ("The grace of our Lord Jesus Christ be with your spirit, brothers. Amen.",
                                        "Brethren, the grace of our Lord Jesus Christ be with your spirit. Amen."),
        ("es-en", "John 11:35"): ("Y lloró Jesús.", "Jesus wept."),
    }
    for (pair, ref), pair_text in want.items():
        got = (es if pair == "es-en" else wk).get(ref)
        check(got == pair_text, f"{pair} {ref}: got {got}, want {pair_text}")
    # Reina-Valera words glued by the module: separated, except enclitic pronouns after a verb
    check("Júramelo" in es.get("Genesis 47:31", ("",))[0], "es-en Genesis 47:31: 'Júramelo' not joined")
    # the Reina-Valera's shifted chapters are left out of es-en (guard: Numbers 13; Strong's: 1 Kings 22)
    for ref in ("Numbers 13:1", "Numbers 13:33", "I Kings 22:45", "I Chronicles 21:5", "Job 39:1"):
        check(ref not in es, f"es-en has {ref}, a verse of a chapter the Reina-Valera numbers differently")
        check(ref in wk or split_of(ref) != "train", f"web-kjv lacks {ref}, which WEB and KJV number alike")

    # a forced rebuild is byte-identical; an unforced one keeps the files
    root2 = work / "bible2"
    r = run(nl, "corpus", "bible", "--out", str(root2), "--force")
    check(r.returncode == 0, f"second build exited {r.returncode}: {r.stderr.strip()}")
    for p in PAIRS:
        for f in sorted((root / p).iterdir()):
            check(f.read_bytes() == (root2 / p / f.name).read_bytes(), f"{p}/{f.name} differs between two builds")
    before = {f: f.stat().st_mtime_ns for p in PAIRS for f in (root / p).iterdir()}
    t0 = time.monotonic()
    r = run(nl, "corpus", "bible", "--out", str(root))
    up_to_date_s = time.monotonic() - t0
    check(r.returncode == 0 and "up to date" in r.stdout, f"third build did not say 'up to date': {r.stdout} {r.stderr}")
    check(all(f.stat().st_mtime_ns == t for f, t in before.items()), "an up-to-date corpus was rewritten")
    print(f"up-to-date check: {up_to_date_s:.2f} s")

    r = run(nl, "corpus", "bible", "--out", "/proc/normlab-no-such-dir")
    check(r.returncode == 1 and r.stderr.count("normlab: error:") == 1, f"unwritable --out: exit {r.returncode}, {r.stderr!r}")

    for p in PAIRS:
        n = {s: infos[p]["counts"][s] for s in SPLITS}
        words = sum(len(line.split()) for line in data[p]["train"]["tgt"])
        print(f"{p}: train {n['train']}, valid {n['valid']}, test {n['test']} verses; "
              f"{words} target words in train; dropped {infos[p]['dropped']}")
    print("corpus_check:", "FAILED" if failures else "all checks passed", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
