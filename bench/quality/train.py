#!/usr/bin/env python3
"""Trains a CED (or its decoder-only twin, --encoder-layers = --layers) on the corpus,
logs training and validation loss, and exports DESIGN.md 1.2 files (bf16).

Both twins of a seed see the same batches in the same order (the batch sampler is
seeded by --seed alone), the same initial weights for every shared tensor, the same
schedule and step count: the only difference is where the upper layers' global K/V
come from.
"""
import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Bpe, read_documents  # noqa: E402
import ced_torch  # noqa: E402


def token_file(corpus, tokenizer, split):
    """The split's documents as one uint16 array, each document BOS ... EOS (cached)."""
    path = os.path.join(corpus, f"{split}.tokens.npy")
    tok_path = os.path.join(tokenizer, "tokenizer.json")
    if os.path.exists(path) and os.path.getmtime(path) > os.path.getmtime(tok_path):
        return np.load(path)
    bpe = Bpe(tokenizer)
    ids = []
    for text in read_documents(os.path.join(corpus, f"{split}.jsonl")):
        ids.append(bpe.bos)
        ids.extend(bpe.encode(text))
        ids.append(bpe.eos)
    arr = np.asarray(ids, dtype=np.uint16)
    np.save(path, arr)
    return arr


def batches(data, batch, seq, steps, seed):
    g = torch.Generator().manual_seed(seed)
    n = len(data) - seq - 1
    data_t = torch.from_numpy(data.astype(np.int64))
    for _ in range(steps):
        starts = torch.randint(0, n, (batch,), generator=g)
        rows = torch.stack([data_t[s:s + seq + 1] for s in starts.tolist()])
        yield rows[:, :-1], rows[:, 1:]


@torch.no_grad()
def evaluate(model, data, seq, max_windows=None, batch=16):
    """Mean NLL (nats/token) over non-overlapping windows of the validation tokens."""
    model.eval()
    n = (len(data) - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    data_t = torch.from_numpy(data.astype(np.int64))
    total, count = 0.0, 0
    for i in range(0, n, batch):
        rows = torch.stack([data_t[j * seq:j * seq + seq + 1] for j in range(i, min(n, i + batch))])
        logits = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 rows[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += rows[:, 1:].numel()
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True, help="run folder: log.csv, model/, result.json")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--encoder-layers", type=int, default=4, help="= --layers: decoder-only")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=640)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--replay", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="bf16 autocast for training steps (fp32 master weights; evaluation "
                         "is fp32)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    else:
        torch.set_num_threads(os.cpu_count() or 1)
    os.makedirs(args.out, exist_ok=True)
    train = token_file(args.corpus, args.tokenizer, "train")
    valid = token_file(args.corpus, args.tokenizer, "valid")
    with open(os.path.join(args.tokenizer, "tokenizer.json")) as f:
        tj = json.load(f)
    vocab = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    c = ced_torch.default_config(vocab_size=vocab, hidden_size=args.hidden,
                                 num_layers=args.layers, num_encoder_layers=args.encoder_layers,
                                 intermediate_size=args.ffn, sliding_window=args.window,
                                 replay_window=args.replay, max_position=args.seq,
                                 head_dim=64, num_heads=args.hidden // 64,
                                 num_kv_heads=max(1, args.hidden // 128))
    torch.manual_seed(args.seed)
    model = ced_torch.Ced(c)
    model.init_weights(torch.Generator().manual_seed(args.seed))
    nparams = sum(p.numel() for p in model.parameters())
    print(f"{nparams / 1e6:.2f}M parameters; train {len(train)} tokens, valid {len(valid)}",
          flush=True)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    log = open(os.path.join(args.out, "log.csv"), "w", newline="")
    w = csv.writer(log)
    w.writerow(["step", "tokens", "seconds", "lr", "train_loss", "valid_loss"])
    t0 = time.time()
    run_loss, run_n = 0.0, 0
    for step, (x, y) in enumerate(batches(train, args.batch, args.seq, args.steps, args.seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        run_n += 1
        last = step + 1 == args.steps
        if (step + 1) % 25 == 0 or last:
            valid_loss = ""
            if (step + 1) % args.eval_every == 0 or last:
                valid_loss = f"{evaluate(model, valid, args.seq, max_windows=128):.4f}"
            el = time.time() - t0
            w.writerow([step + 1, (step + 1) * args.batch * args.seq, f"{el:.1f}",
                        f"{lr_at(step):.6f}", f"{run_loss / run_n:.4f}", valid_loss])
            log.flush()
            print(f"step {step + 1}/{args.steps} loss {run_loss / run_n:.3f} "
                  f"valid {valid_loss or '-'} {el:.0f}s "
                  f"({(step + 1) * args.batch * args.seq / el:.0f} tok/s)", flush=True)
            run_loss, run_n = 0.0, 0
    train_s = time.time() - t0
    # Final validation on every window, with the bf16 weights the engine serves.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(ced_torch.bf16_round(p))
    valid_nll = evaluate(model, valid, args.seq)
    result = {"config": c, "parameters": nparams, "seed": args.seed, "steps": args.steps,
              "batch": args.batch, "seq": args.seq, "lr": args.lr, "bf16_autocast": args.bf16,
              "train_tokens": args.steps * args.batch * args.seq,
              "train_seconds": round(train_s, 1), "threads": torch.get_num_threads(),
              "valid_nll_bf16": valid_nll, "valid_ppl_bf16": math.exp(valid_nll)}
    ced_torch.export(model, os.path.join(args.out, "model"),
                     metadata={"seed": args.seed, "steps": args.steps})
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "config"}), flush=True)


if __name__ == "__main__":
    main()
