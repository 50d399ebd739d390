#!/usr/bin/env python3
"""Checks that `ced tokenize` (the engine's tokenizer.json BPE) gives, on the whole
validation split, the ids the training encoder (bpe.py) gives. Exit 1 on a difference."""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Bpe, read_documents  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ced", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True)
    args = ap.parse_args()
    bpe = Bpe(args.tokenizer)
    text = "\n".join(read_documents(os.path.join(args.corpus, "valid.jsonl")))
    want = bpe.encode(text)
    out = subprocess.run([args.ced, "tokenize", "--tokenizer", args.tokenizer, "--json"],
                         input=text.encode("utf-8"), capture_output=True, check=True)
    got = json.loads(out.stdout)
    nbytes = len(text.encode("utf-8"))
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
        print(f"tokenizer MISMATCH at token {first}: engine {got[first:first + 5]}, "
              f"training encoder {want[first:first + 5]}")
        return 1
    print(f"tokenizer: engine == training encoder on the validation split "
          f"({nbytes} bytes, {len(want)} tokens, {nbytes / len(want):.2f} bytes/token)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
