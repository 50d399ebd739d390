#!/usr/bin/env python3
"""The quality measurements of bench/results/quality.md on trained, exported models.

  replay   bounded vs exact replay of the trained CED (DESIGN.md 1.4): per prompt length N
           and replay window R, KL(full || bounded), top-1 agreement and perplexity of the
           true next tokens, over the prompt's last position and K teacher-forced steps
  probe    long-range recall: a random two-token key and a value token planted in
           validation text, the key repeated d tokens later; is the value the top-1
           prediction (and its mean log-probability), CED vs decoder-only
  copy     long-range recall of real text: a span of the window copied d tokens before
           its end; top-1 accuracy on the span's tokens after its first two, against the
           same window without the copy
  resume   session resume (DESIGN.md 1.6, bounded): a prompt whose first P tokens' global
           K/V are cached, computed from a = max(0, min(P, N-R_d) - R_e); KL and top-1
           against a fresh bounded prefill and against the full forward

Every figure is computed by the PyTorch model of ced_torch.py (float32) on the exported
bf16 weights; the engine's equality with that model is checked in CI (tests/quality).
Writes JSON to --out.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ced_torch  # noqa: E402


def windows(data, seq, count, seed):
    g = np.random.default_rng(seed)
    starts = g.integers(0, len(data) - seq - 1, size=count)
    return torch.from_numpy(np.stack([data[s:s + seq] for s in starts]).astype(np.int64))


def kl_top1_nll(ref_logits, logits, targets):
    """Per-position KL(ref || q), top-1 agreement and NLL of targets under q and ref."""
    lp_ref = F.log_softmax(ref_logits.double(), -1)
    lp = F.log_softmax(logits.double(), -1)
    kl = (lp_ref.exp() * (lp_ref - lp)).sum(-1).clamp_min(0)
    top1 = (ref_logits.argmax(-1) == logits.argmax(-1)).double()
    nll = -lp.gather(-1, targets[..., None])[..., 0]
    nll_ref = -lp_ref.gather(-1, targets[..., None])[..., 0]
    return kl, top1, nll, nll_ref


@torch.no_grad()
def replay(model, data, lengths, windows_r, steps, count, seed):
    c = model.c
    exact_r = (c["num_layers"] - c["num_encoder_layers"]) * (c["sliding_window"] - 1) + 1
    rows = []
    for n in lengths:
        seq = n + steps
        x = windows(data, seq + 1, count, seed + n)
        inp, tgt = x[:, :seq], x[:, 1:seq + 1]
        full = model(inp)[:, n - 1:]
        t = tgt[:, n - 1:]
        for r in windows_r + [exact_r]:
            s = max(0, n - r)
            out = model(inp, dec_lo=s)[:, n - 1:]
            kl, top1, nll, nll_ref = kl_top1_nll(full, out, t)
            rows.append({"N": n, "R": r, "exact": r == exact_r, "s": s, "windows": count,
                         "steps": steps + 1,
                         "kl_first": kl[:, 0].mean().item(), "kl_mean": kl.mean().item(),
                         "kl_max": kl.max().item(), "top1": top1.mean().item(),
                         "ppl": math.exp(nll.mean().item()),
                         "ppl_full": math.exp(nll_ref.mean().item())})
            print(f"replay N={n} R={r}: KL {rows[-1]['kl_mean']:.4g} top1 "
                  f"{rows[-1]['top1']:.3f} ppl {rows[-1]['ppl']:.3f} (full "
                  f"{rows[-1]['ppl_full']:.3f})", flush=True)
    return rows


@torch.no_grad()
def probe(model, data, distances, count, seed, vocab_lo, vocab_hi, seq):
    """Recall of a planted value d tokens after its key (key = 2 random tokens)."""
    rows = []
    g = np.random.default_rng(seed)
    for d in distances:
        x = windows(data, seq, count, seed + 1000 + d).clone()
        q = seq - 2  # the query key sits at [q-1, q], the model predicts the value at q+1
        p = q - d     # the planted key at [p-1, p], its value at p+1
        if p < 1:
            continue
        keys = torch.from_numpy(g.integers(vocab_lo, vocab_hi, size=(count, 3)))
        x[:, p - 1], x[:, p], x[:, p + 1] = keys[:, 0], keys[:, 1], keys[:, 2]
        x[:, q - 1], x[:, q] = keys[:, 0], keys[:, 1]
        logits = model(x[:, :q + 1])[:, q]
        lp = F.log_softmax(logits.double(), -1)
        hit = (logits.argmax(-1) == keys[:, 2]).double().mean().item()
        rows.append({"d": d, "trials": count, "top1": hit,
                     "logprob": lp.gather(-1, keys[:, 2:3]).mean().item()})
        print(f"probe d={d}: top1 {hit:.3f} logprob {rows[-1]['logprob']:.3f}", flush=True)
    return rows


@torch.no_grad()
def copy_probe(model, data, distances, count, seed, seq, span=8, seen=2):
    """Recall of a real text span seen d tokens earlier.

    A validation window's last `span` tokens are copied to `d` tokens before them; after
    seeing the span's first `seen` tokens again, how often is each next token of the span
    the top-1 prediction? `control` is the same window without the earlier copy, so
    recall - control is what the earlier occurrence contributes.
    """
    rows = []
    for d in distances:
        q = seq - span  # the span's second occurrence
        p = q - d
        if p < 1 or d < span:
            continue
        x = windows(data, seq, count, seed + 2000 + d)
        planted = x.clone()
        planted[:, p:p + span] = x[:, q:q + span]
        pos = slice(q + seen - 1, seq - 1)  # logits that predict span tokens seen..span-1
        target = x[:, q + seen:seq]
        hit = (model(planted)[:, pos].argmax(-1) == target).double().mean().item()
        ctl = (model(x)[:, pos].argmax(-1) == target).double().mean().item()
        rows.append({"d": d, "trials": count, "span": span, "seen": seen, "recall": hit,
                     "control": ctl})
        print(f"copy probe d={d}: recall {hit:.3f} control {ctl:.3f}", flush=True)
    return rows


@torch.no_grad()
def resume(model, data, cases, steps, count, seed, block):
    c = model.c
    r = c["replay_window"]
    rows = []
    for n, frac in cases:
        p = (int(frac * (n - 1)) // block) * block
        seq = n + steps
        x = windows(data, seq + 1, count, seed + 7 * n + p)
        inp, tgt = x[:, :seq], x[:, 1:seq + 1]
        full, cached = model(inp, want_global=True)
        s = max(0, n - r)
        a = max(0, min(p, n - r) - r)
        fresh = model(inp, dec_lo=s)
        resumed = model(inp, enc_lo=a, dec_lo=s, cached=cached, cached_len=p)
        sl = slice(n - 1, None)
        kl_f, top1_f, nll, _ = kl_top1_nll(fresh[:, sl], resumed[:, sl], tgt[:, sl])
        kl_x, top1_x, _, nll_full = kl_top1_nll(full[:, sl], resumed[:, sl], tgt[:, sl])
        rows.append({"N": n, "P": p, "a": a, "s": s, "windows": count, "steps": steps + 1,
                     "kl_vs_fresh": kl_f.mean().item(), "top1_vs_fresh": top1_f.mean().item(),
                     "kl_vs_full": kl_x.mean().item(), "top1_vs_full": top1_x.mean().item(),
                     "ppl_resumed": math.exp(nll.mean().item()),
                     "ppl_full": math.exp(nll_full.mean().item())})
        print(f"resume N={n} P={p} a={a}: KL vs fresh {rows[-1]['kl_vs_fresh']:.4g} "
              f"top1 {rows[-1]['top1_vs_fresh']:.3f}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, help="folder with valid.tokens.npy (train.py)")
    ap.add_argument("--ced", required=True, help="exported CED model folder")
    ap.add_argument("--dec", default="", help="exported decoder-only twin (probe)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--sections", default="replay,resume,probe,copy",
                    help="comma list of replay, resume, probe, copy; results are merged into "
                         "--out when it exists")
    args = ap.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    data = np.load(os.path.join(args.corpus, "valid.tokens.npy"))
    ced = ced_torch.load_exported(args.ced).eval()
    dec = ced_torch.load_exported(args.dec).eval() if args.dec else None
    seq = ced.c["max_position"]
    sections = set(args.sections.split(","))
    t0 = time.time()
    out = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            out = json.load(f)
    out.update({"model": args.ced, "twin": args.dec, "windows": args.windows})
    steps = 32
    if "replay" in sections:
        lengths = [n for n in (64, 96, 128, 160, 192, 224) if n + steps <= seq]
        out["replay"] = replay(ced, data, lengths, [1, 8, 16, 32, 64, 128], steps,
                               args.windows, args.seed)
    if "resume" in sections:
        out["resume"] = resume(ced, data, [(n, f) for n in (128, 192, 224) if n + steps <= seq
                                           for f in (0.25, 0.5, 0.9)],
                               steps, args.windows, args.seed, block=16)
    distances = [d for d in (8, 16, 32, 48, 64, 96, 128, 192, 247) if d < seq - 8]
    vocab = ced.c["vocab_size"]
    if "probe" in sections:
        few = [8, 32, 128]
        out["probe"] = {"ced": probe(ced, data, few, args.windows, args.seed, 300, vocab - 2,
                                     seq)}
        if dec is not None:
            out["probe"]["dec"] = probe(dec, data, few, args.windows, args.seed, 300, vocab - 2,
                                        seq)
    if "copy" in sections:
        out["copy"] = {"ced": copy_probe(ced, data, distances, args.windows, args.seed, seq)}
        if dec is not None:
            out["copy"]["dec"] = copy_probe(dec, data, distances, args.windows, args.seed, seq)
    out["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
