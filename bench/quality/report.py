#!/usr/bin/env python3
"""Markdown tables and PNG plots of a bench/quality/run.sh work folder (stdout: markdown)."""
import argparse
import csv
import json
import math
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def log_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def mean_spread(values):
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", default="1 2")
    ap.add_argument("--plots", required=True, help="folder for quality_*.png")
    args = ap.parse_args()
    seeds = [s for s in args.seeds.split() if os.path.exists(
        os.path.join(args.work, f"ced_s{s}", "result.json"))]
    os.makedirs(args.plots, exist_ok=True)
    w = args.work
    res = {(m, s): load(os.path.join(w, f"{m}_s{s}", "result.json"))
           for m in ("ced", "dec") for s in seeds}
    out = []
    out.append("### Validation perplexity (bf16 weights, every validation window of 256)\n")
    out.append("| model | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd | "
               "train tokens | train time (s) |")
    out.append("|---|" + "---|" * (len(seeds) + 3))
    for m, name in (("ced", "CED (E=4)"), ("dec", "decoder-only (E=8)")):
        ppl = [res[(m, s)]["valid_ppl_bf16"] for s in seeds]
        out.append(f"| {name} | " + " | ".join(f"{p:.3f}" for p in ppl) +
                   f" | {mean_spread(ppl)} | {res[(m, seeds[0])]['train_tokens']} | " +
                   ", ".join(f"{res[(m, s)]['train_seconds']:.0f}" for s in seeds) + " |")
    ratio = [res[("ced", s)]["valid_ppl_bf16"] / res[("dec", s)]["valid_ppl_bf16"] for s in seeds]
    out.append(f"\nCED / decoder-only perplexity, per seed: "
               + ", ".join(f"{r:.4f}" for r in ratio) + "\n")

    fig, ax = plt.subplots(figsize=(7, 4))
    for (m, s), color in zip([(m, s) for s in seeds for m in ("ced", "dec")],
                             ["C0", "C1", "C2", "C3", "C4", "C5"]):
        rows = log_rows(os.path.join(w, f"{m}_s{s}", "log.csv"))
        x = [int(r["tokens"]) / 1e6 for r in rows]
        ax.plot(x, [float(r["train_loss"]) for r in rows], color=color, alpha=0.5, lw=1)
        v = [(int(r["tokens"]) / 1e6, float(r["valid_loss"])) for r in rows if r["valid_loss"]]
        ax.plot([a for a, _ in v], [b for _, b in v], "o-", color=color,
                label=f"{'CED' if m == 'ced' else 'decoder-only'} seed {s} (valid)")
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_ylim(top=6)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Training (thin) and validation (dots) loss")
    fig.tight_layout()
    fig.savefig(os.path.join(args.plots, "quality_loss.png"), dpi=110)
    out.append("![loss curves](plots/quality_loss.png)\n")

    meas = {s: load(os.path.join(w, f"measure_s{s}.json")) for s in seeds}
    s0 = seeds[0]
    out.append(f"### Bounded vs exact replay (CED seed {s0}; mean over "
               f"{meas[s0]['windows']} validation windows x (1 + 32 teacher-forced steps))\n")
    out.append("| N | R | s | KL first (nats) | KL mean | KL max | top-1 agree | ppl | "
               "ppl full forward |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in meas[s0]["replay"]:
        out.append(f"| {r['N']} | {r['R']}{' (exact)' if r['exact'] else ''} | {r['s']} | "
                   f"{r['kl_first']:.2e} | {r['kl_mean']:.2e} | {r['kl_max']:.2e} | "
                   f"{r['top1']:.4f} | {r['ppl']:.3f} | {r['ppl_full']:.3f} |")
    if len(seeds) > 1:
        out.append("\nThe same, KL mean and top-1 at R = 64 (the configured window), per seed:\n")
        out.append("| N | " + " | ".join(f"seed {s} KL / top-1" for s in seeds) + " |")
        out.append("|---|" + "---|" * len(seeds))
        for n in sorted({r["N"] for r in meas[s0]["replay"]}):
            cells = []
            for s in seeds:
                r = next(x for x in meas[s]["replay"] if x["N"] == n and x["R"] == 64)
                cells.append(f"{r['kl_mean']:.2e} / {r['top1']:.4f}")
            out.append(f"| {n} | " + " | ".join(cells) + " |")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for n in sorted({r["N"] for r in meas[s0]["replay"]}):
        rows = [r for r in meas[s0]["replay"] if r["N"] == n and not r["exact"]]
        axes[0].plot([r["R"] for r in rows], [max(r["kl_mean"], 1e-12) for r in rows], "o-",
                     label=f"N={n}")
        axes[1].plot([r["R"] for r in rows], [r["top1"] for r in rows], "o-", label=f"N={n}")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("replay window R (tokens)")
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("KL(full || bounded), nats")
    axes[1].set_ylabel("top-1 agreement with the full forward")
    axes[0].legend()
    fig.suptitle(f"Bounded replay error on the trained CED (seed {s0})")
    fig.tight_layout()
    fig.savefig(os.path.join(args.plots, "quality_replay.png"), dpi=110)
    out.append("\n![replay error](plots/quality_replay.png)\n")

    out.append(f"### Long-range probe: recall of a text span seen d tokens earlier "
               f"({meas[s0]['copy']['ced'][0]['trials']} windows per point)\n")
    out.append("Top-1 accuracy on the span's tokens 3..8 once its first two are seen again; "
               "control: the same windows without the earlier copy.\n")
    out.append("| d | " + " | ".join(f"CED s{s} | dec s{s}" for s in seeds) + " | " +
               " | ".join(f"control CED s{s} | control dec s{s}" for s in seeds) + " |")
    out.append("|---|" + "---|" * (4 * len(seeds)))
    for i, row in enumerate(meas[s0]["copy"]["ced"]):
        cells = []
        for s in seeds:
            cells += [f"{meas[s]['copy']['ced'][i]['recall']:.3f}",
                      f"{meas[s]['copy']['dec'][i]['recall']:.3f}"]
        for s in seeds:
            cells += [f"{meas[s]['copy']['ced'][i]['control']:.3f}",
                      f"{meas[s]['copy']['dec'][i]['control']:.3f}"]
        out.append(f"| {row['d']} | " + " | ".join(cells) + " |")
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in seeds:
        for m, style in (("ced", "o-"), ("dec", "s--")):
            rows = meas[s]["copy"][m]
            ax.plot([r["d"] for r in rows], [r["recall"] for r in rows], style,
                    label=f"{'CED' if m == 'ced' else 'decoder-only'} seed {s}")
    ctl = [statistics.mean(meas[s]["copy"][m][i]["control"] for s in seeds for m in ("ced", "dec"))
           for i in range(len(meas[s0]["copy"]["ced"]))]
    ax.plot([r["d"] for r in meas[s0]["copy"]["ced"]], ctl, ":", color="gray",
            label="control (no earlier copy), mean")
    ax.axvline(64, color="gray", lw=0.8, ls=":")
    ax.text(65, 0.02, "W = 64", color="gray")
    ax.set_xlabel("distance d to the earlier copy (tokens)")
    ax.set_ylabel("top-1 accuracy on the repeated span")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.plots, "quality_probe.png"), dpi=110)
    out.append("\n![long-range probe](plots/quality_probe.png)\n")
    if "probe" in meas[s0]:
        out.append("Random-key probe (a random two-token key and value planted, the key "
                   "repeated d tokens later; top-1 recall of the value / its mean log-prob):\n")
        out.append("| d | " + " | ".join(f"CED s{s} | dec s{s}" for s in seeds) + " |")
        out.append("|---|" + "---|" * (2 * len(seeds)))
        for i, row in enumerate(meas[s0]["probe"]["ced"]):
            cells = []
            for s in seeds:
                for m in ("ced", "dec"):
                    r = meas[s]["probe"][m][i]
                    cells.append(f"{r['top1']:.3f} / {r['logprob']:.2f}")
            out.append(f"| {row['d']} | " + " | ".join(cells) + " |")
        out.append("")

    out.append(f"### Session resume, bounded (DESIGN.md 1.6; CED seed {s0})\n")
    out.append("| N | P cached | a | s | KL vs fresh bounded prefill | top-1 vs fresh | "
               "KL vs full forward | top-1 vs full | ppl resumed | ppl full |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in meas[s0]["resume"]:
        out.append(f"| {r['N']} | {r['P']} | {r['a']} | {r['s']} | {r['kl_vs_fresh']:.2e} | "
                   f"{r['top1_vs_fresh']:.4f} | {r['kl_vs_full']:.2e} | {r['top1_vs_full']:.4f} | "
                   f"{r['ppl_resumed']:.3f} | {r['ppl_full']:.3f} |")
    pre = os.path.join(w, "prefill.json")
    if os.path.exists(pre):
        out.append("\n### Engine prefill on the trained shapes\n")
        out.append(f"See `{pre}` / `prefill.md` (copied below by hand).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
