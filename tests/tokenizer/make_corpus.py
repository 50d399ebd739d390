#!/usr/bin/env python3
"""Writes the tokenizer comparison corpus: documents of varied text, deterministic.

Sources (all offline): the seed texts in corpus_seed/ (written for this test:
prose in many scripts, code, emoji/ZWJ, digits, whitespace; "\\uXXXX" escapes
stand for invisible or combining characters), Debian's /usr/share/common-licenses,
C headers in /usr/include, Python's standard library and the native-script strings
of /usr/share/i18n/locales (<Uxxxx> sequences). Documents are cut, mixed and
decorated with a fixed seed: special-token strings inside text, runs of spaces,
tabs and newlines, CRLF, NFD-decomposed text, and a few ill-formed UTF-8 bytes.
Characters not assigned in Unicode 14 (the tables of Debian 12's Oniguruma) are
dropped, so both implementations classify every character alike.

Output format (read by reference_tokenize.mjs, the C++ test and the bench):
  "<document count>\\n" then, per document, "<byte length>\\n<bytes>\\n".
"""
import argparse
import glob
import os
import random
import re
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_STRINGS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
    "<|fim_prefix|>", "<|vision_pad|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
    "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜place▁holder▁no▁17｜>",
    "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n", "< |im_start| >", "<|im_",
]
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf",
                b"\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe\xfe"]


def read_text(path, limit=200_000):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def seed_texts():
    out = []
    for path in sorted(glob.glob(os.path.join(HERE, "corpus_seed", "*.txt"))):
        text = read_text(path)
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        out.append(text)
    return out


def locale_texts():
    out = []
    for path in sorted(glob.glob("/usr/share/i18n/locales/*")):
        text = read_text(path)
        chars = []
        for m in re.finditer(r"((?:<U[0-9A-Fa-f]{4,8}>)+)", text):
            s = "".join(chr(int(h, 16)) for h in re.findall(r"<U([0-9A-Fa-f]{4,8})>", m.group(1)))
            if len(s) >= 2:
                chars.append(s)
        if chars:
            out.append(" ".join(chars))
    return out


def file_texts(pattern, max_files):
    paths = sorted(glob.glob(pattern))
    return [t for t in (read_text(p) for p in paths[:max_files]) if t]


def assigned(ch):
    return unicodedata.category(ch) != "Cn" or ch in "\ufffe\uffff"


def clean(text):
    return "".join(ch for ch in text if assigned(ch) and not 0xD800 <= ord(ch) <= 0xDFFF)


def cut(rng, text, lo, hi):
    if len(text) <= lo:
        return text
    n = rng.randint(lo, min(hi, len(text)))
    start = rng.randint(0, len(text) - n)
    return text[start:start + n]


def decorate(rng, doc):
    r = rng.random()
    if r < 0.15:
        words = doc.split(" ")
        for _ in range(rng.randint(1, 4)):
            words.insert(rng.randint(0, len(words)), rng.choice(SPECIAL_STRINGS))
        doc = " ".join(words) if rng.random() < 0.5 else "".join(words)
    elif r < 0.25:
        doc = re.sub(r" ", lambda m: rng.choice([" ", "  ", "\t", " \t ", "   ", "\n", "\n\n\n", "\u3000"]), doc)
    elif r < 0.32:
        doc = doc.replace("\n", "\r\n")
    elif r < 0.38:
        doc = unicodedata.normalize("NFD", doc)
    elif r < 0.42:
        doc = doc.upper()
    return doc


def build(target_bytes, seed):
    rng = random.Random(seed)
    seeds = seed_texts()
    pools = [
        ("seed", seeds, 30, 3000),
        ("licenses", file_texts("/usr/share/common-licenses/*", 40), 200, 4000),
        ("headers", file_texts("/usr/include/*.h", 120), 200, 4000),
        ("python", file_texts("/usr/lib/python3*/*.py", 150), 200, 5000),
        ("locales", locale_texts(), 50, 2000),
    ]
    pools = [p for p in pools if p[1]]
    weights = {"seed": 4, "licenses": 2, "headers": 2, "python": 2, "locales": 2}
    docs = [s.encode("utf-8") for s in seeds]  # every seed text whole, first
    total = sum(len(d) for d in docs)
    while total < target_bytes:
        parts = []
        for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 4)):
            name, texts, lo, hi = rng.choices(pools, [weights[p[0]] for p in pools])[0]
            parts.append(cut(rng, rng.choice(texts), lo, hi))
        doc = decorate(rng, clean(rng.choice(["", " ", "\n"]).join(parts)))
        data = doc.encode("utf-8")
        if rng.random() < 0.03 and data:
            at = rng.randint(0, len(data))
            data = data[:at] + rng.choice(INVALID_UTF8) + data[at:]
        docs.append(data)
        total += len(data)
    # Edge cases, always present.
    docs += [b"", b" ", b"\n", b"   \n\t  ", "\u00a0".encode(), b"a", "😀".encode(),
             " ".join(SPECIAL_STRINGS).encode(), "".join(SPECIAL_STRINGS).encode(),
             b"x" * 3000, b" " * 2000 + b"y", ("ab" * 700).encode(), b"\xff\xfe\xfd", b"9" * 500,
             "'S 'T 'RE 'Ve 'LL 'ſ 'K 'D".encode(), "\u0085\u2028\ufeff end".encode()]
    return docs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--bytes", type=int, default=1_200_000)
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    docs = build(args.bytes, args.seed)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"%d\n" % len(docs))
        for d in docs:
            f.write(b"%d\n" % len(d) + d + b"\n")
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(docs)} documents, {sum(len(d) for d in docs)} bytes")


if __name__ == "__main__":
    main()
