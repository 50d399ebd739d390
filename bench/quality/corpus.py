#!/usr/bin/env python3
"""Builds the training corpus from the Python documentation Debian ships.

Source: the reStructuredText sources of the Python 3.11 documentation in Debian's
`python3.11-doc` package (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt),
licensed under the PSF License Agreement (see /usr/share/doc/python3.11-doc/copyright;
code examples also under the Zero-Clause BSD licence). Each file is one document;
documents are split train/validation by a hash of their path (about 1 in 20 go
to validation), so no page is in both.

Writes OUT/train.jsonl and OUT/valid.jsonl, one {"path", "text"} per line, and
OUT/corpus.json with counts and the source's version.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

DEFAULT_SOURCE = "/usr/share/doc/python3.11/html/_sources"


def is_validation(rel_path, every):
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") % every == 0


def package_version(name):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE,
                    help="folder of .rst.txt sources (default: %(default)s)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--valid-every", type=int, default=20,
                    help="about one document in N goes to validation (default: %(default)s)")
    args = ap.parse_args()
    if not os.path.isdir(args.source):
        sys.exit(f"--source: {args.source} is not a folder; install Debian's python3.11-doc "
                 "(apt-get install python3.11-doc)")
    paths = []
    for root, _, files in os.walk(args.source):
        for name in files:
            if name.endswith(".rst.txt"):
                paths.append(os.path.relpath(os.path.join(root, name), args.source))
    paths.sort()
    if not paths:
        sys.exit(f"--source: no .rst.txt files under {args.source}")
    os.makedirs(args.out, exist_ok=True)
    counts = {"train": [0, 0], "valid": [0, 0]}
    with open(os.path.join(args.out, "train.jsonl"), "w", encoding="utf-8") as train, \
         open(os.path.join(args.out, "valid.jsonl"), "w", encoding="utf-8") as valid:
        for rel in paths:
            with open(os.path.join(args.source, rel), encoding="utf-8", errors="replace") as f:
                text = f.read().replace("\r\n", "\n")
            split = "valid" if is_validation(rel, args.valid_every) else "train"
            (valid if split == "valid" else train).write(
                json.dumps({"path": rel, "text": text}, ensure_ascii=False) + "\n")
            counts[split][0] += 1
            counts[split][1] += len(text.encode("utf-8"))
    info = {
        "source": "Python 3.11 documentation (reStructuredText sources), Debian package "
                  "python3.11-doc " + package_version("python3.11-doc"),
        "licence": "PSF License Agreement (examples also Zero-Clause BSD)",
        "split": f"by document: sha256(path) mod {args.valid_every} == 0 -> validation",
        "train_documents": counts["train"][0], "train_bytes": counts["train"][1],
        "valid_documents": counts["valid"][0], "valid_bytes": counts["valid"][1],
    }
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
