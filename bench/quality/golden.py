#!/usr/bin/env python3
"""Writes golden.json beside an exported model: the PyTorch model's greedy tokens and
logits on fixed prompts, which tests/quality checks the engine against in CI.

Per case: the prompt text and its ids (BOS + the Python encoder's ids: the test also
checks the engine's tokenizer gives the same), the replay mode, and for each generated
step the greedy token, its margin over the runner-up, the 8 best (id, logit) and the
logits of 32 fixed ids. Exact cases are the full forward; the bounded case clips the
decoder's local windows at s = N - R, as DESIGN.md 1.4 defines bounded replay.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Bpe  # noqa: E402
import ced_torch  # noqa: E402

PROMPTS = [
    ("exact", "The :mod:`json` module"),
    ("exact", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("exact", "Exceptions\n==========\n\nWhen an error occurs, Python raises an"),
]


def long_prompt():
    # A prompt longer than the replay window, so bounded replay starts after position 0.
    return ("The :mod:`os` module provides a portable way of using operating system "
            "dependent functionality. If you just want to read or write a file see "
            ":func:`open`, if you want to manipulate paths, see the :mod:`os.path` module, "
            "and if you want to read all the lines in all the files on the command line "
            "see the :mod:`fileinput` module. For creating temporary files and "
            "directories see the :mod:`tempfile` module, and for high-level file and "
            "directory handling see the :mod:`shutil` module. Notes on the availability "
            "of these functions: the design of all built-in operating system dependent "
            "modules of Python is such that as long as the same functionality is "
            "available, it uses the same interface; for example, the function "
            "``os.stat(path)`` returns stat information about *path* in the same format.")


@torch.no_grad()
def greedy(model, ids, steps, dec_lo):
    seq = list(ids)
    out = []
    for _ in range(steps):
        logits = model(torch.tensor([seq]), dec_lo=dec_lo)[0, -1]
        top = torch.topk(logits, 8)
        tok = int(top.indices[0])
        out.append({"token": tok, "margin": float(top.values[0] - top.values[1]),
                    "top": [[int(i), float(v)] for i, v in zip(top.indices, top.values)],
                    "logits": [float(logits[i]) for i in FIXED_IDS]})
        seq.append(tok)
    return out


FIXED_IDS = list(range(0, 4096, 128))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="exported model folder (with tokenizer)")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    model = ced_torch.load_exported(args.model).eval()
    bpe = Bpe(args.model)
    r = model.c["replay_window"]
    cases = []
    for replay, text in PROMPTS + [("bounded", long_prompt())]:
        ids = [bpe.bos] + bpe.encode(text)
        if len(ids) + args.steps > model.c["max_position"]:
            sys.exit(f"prompt of {len(ids)} tokens + {args.steps} steps exceeds max_position")
        dec_lo = max(0, len(ids) - r) if replay == "bounded" else 0
        steps = greedy(model, ids, args.steps, dec_lo)
        cases.append({"text": text, "ids": ids, "replay": replay, "s": dec_lo, "steps": steps,
                      "min_margin": min(s["margin"] for s in steps),
                      "completion": bpe.decode([s["token"] for s in steps])})
        print(f"[{replay}] N={len(ids)} s={dec_lo} margin>={cases[-1]['min_margin']:.3f}: "
              f"{text[-40:]!r} -> {cases[-1]['completion']!r}")
    with open(os.path.join(args.model, "golden.json"), "w") as f:
        json.dump({"fixed_ids": FIXED_IDS, "cases": cases,
                   "note": "written by bench/quality/golden.py from the PyTorch model "
                           "(float32 on these bf16 weights); checked by tests/quality"},
                  f, indent=None, separators=(",", ":"))


if __name__ == "__main__":
    main()
