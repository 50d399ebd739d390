#!/usr/bin/python3
"""Plots of the simulator study (bench/results/sim.md) as PNG.

Reads the study's markdown (the output of bench/sim/run_study.sh, the part
after "# Full output"): each table follows the `ced-sim ...` command that
made it, so figures are looked up by their command's flags. Writes PNGs into
--out-dir (default bench/results/plots).

Usage: /usr/bin/python3 bench/sim/plot_study.py [--study bench/results/sim.md]
                                                [--fidelity bench/results/fidelity.md]
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import os
import re
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_study.py: needs matplotlib for /usr/bin/python3 "
             "(Debian: apt-get install -y python3-matplotlib)")

RATIOS = ["1024:1024", "4096:256", "8192:128", "32768:64"]
COMMON = "--requests 300 --duration 120 --max-requests 8000 --bisection-steps 8 --seed 1"


def parse_tables(text):
    """{command: [row cells...]} for every `ced-sim ...` line followed by a table."""
    tables, cmd, rows = {}, None, None
    for line in text.splitlines():
        m = re.match(r"^`ced-sim (.*)`\s*$", line)
        if m:
            cmd, rows = " ".join(m.group(1).split()), []
            tables[cmd] = rows
            continue
        if cmd is not None and line.startswith("|"):
            cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
            if cells and not set(cells[0]) <= set("-") and not cells[0].startswith(
                    ("prefill:decode", "instance", "prompt tokens")):
                rows.append(cells)
    return tables


def plan(tables, flags):
    key = " ".join(f"--plan {COMMON} {flags}".split())
    if key not in tables:
        raise KeyError(f"study table missing: ced-sim {key}")
    splits = [r[0] for r in tables[key]]
    rates = [float(r[1]) for r in tables[key]]
    return splits, rates


def ratio_flags(r):
    i, o = r.split(":")
    return f"--input-mean {i} --output-mean {o}"


def save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", path)


def capacity_per_split(tables, out_dir, gpu_flag="", name="capacity_per_split.png",
                       title="six 4xH100 instances"):
    ratios = RATIOS
    fig, axes = plt.subplots(1, len(ratios), figsize=(4 * len(ratios), 3.6))
    for ax, r in zip(axes, ratios):
        f = f"{gpu_flag} {ratio_flags(r)}".strip()
        series = [("CED, replay on prefill", f, "o-"),
                  ("CED, replay on decode", f"{f} --ced-replay-on decode", "s--"),
                  ("decoder-only", f"{f} --ced-encoder-layers 80", "^-")]
        for label, flags, style in series:
            try:
                splits, rates = plan(tables, flags)
            except KeyError:
                if "replay-on" in flags:
                    continue  # not every H200 ratio has a replay-on-decode sweep
                raise
            ax.plot(splits, rates, style, label=label)
        ax.set_title(r)
        ax.set_xlabel("prefill:decode instances")
        ax.set_ylabel("max rate at 90% SLO (req/s)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Capacity of every split, {title}")
    save(fig, out_dir, name)


def best_ced_vs_dec(tables, out_dir):
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.2
    groups = [("H100 CED", "", "", "tab:blue"), ("H100 decoder-only", "", "--ced-encoder-layers 80", "tab:orange"),
              ("H200 CED", "--gpu h200", "", "tab:cyan"), ("H200 decoder-only", "--gpu h200", "--ced-encoder-layers 80", "tab:red")]
    for gi, (label, gpu, extra, color) in enumerate(groups):
        xs, ys = [], []
        for ri, r in enumerate(RATIOS):
            try:
                _, rates = plan(tables, f"{gpu} {ratio_flags(r)} {extra}".strip())
            except KeyError:
                continue
            xs.append(ri + (gi - 1.5) * width)
            ys.append(max(rates))
        bars = ax.bar(xs, ys, width, label=label, color=color)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(RATIOS)), RATIOS)
    ax.set_xlabel("input:output tokens")
    ax.set_ylabel("best split's max rate (req/s)")
    ax.set_title("CED vs decoder-only, best split, six 4-GPU instances")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, out_dir, "ced_vs_decoder_only.png")


def replay_placement(tables, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (gpu, name) in zip(axes, [("", "H100"), ("--gpu h200", "H200")]):
        base = (f"{gpu} {ratio_flags('8192:128')} --prefill-gpus 2 --total-gpus 24 "
                "--ttft-slo-ms 1528.7")
        for label, extra, style in [("CED, replay on prefill", "--ced-replay-on prefill", "o-"),
                                    ("CED, replay on decode", "--ced-replay-on decode", "s--"),
                                    ("decoder-only", "--ced-encoder-layers 80", "^-")]:
            splits, rates = plan(tables, f"{base} {extra}")
            ax.plot(splits, rates, style, label=label)
        ax.set_xlabel(f"prefill (2x{name}) : decode (4x{name}) instances, 24 GPUs")
        ax.set_ylabel("max rate at 90% SLO (req/s)")
        ax.set_title(f"{name}, 8192:128, 2-GPU prefill instances")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Where the replay runs")
    save(fig, out_dir, "replay_placement_2gpu_prefill.png")


def router_inflight(tables, out_dir):
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    r = ratio_flags("4096:256")
    for label, flags, style in [("in-flight, 50 ms reports", r, "o-"),
                                ("naive, 50 ms reports", f"{r} --naive-router", "o--"),
                                ("in-flight, 250 ms reports", f"{r} --heartbeat-ms 250", "s-"),
                                ("naive, 250 ms reports", f"{r} --heartbeat-ms 250 --naive-router", "s--")]:
        splits, rates = plan(tables, flags)
        ax.plot(splits, rates, style, label=label)
    ax.set_xlabel("prefill:decode instances")
    ax.set_ylabel("max rate at 90% SLO (req/s)")
    ax.set_title("Router: counting work in flight vs reported queues only (CED, 4096:256)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, out_dir, "router_inflight.png")


def prefill_step(tables, out_dir):
    rows = tables.get("--info")
    if not rows:
        raise KeyError("study table missing: ced-sim --info")
    rows = [r for r in rows if len(r) == 5 and r[0].isdigit()]
    n = [int(r[0]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for idx, label, style in [(1, "decoder-only", "^-"), (2, "CED + replay", "o-"),
                              (3, "CED encoder-only (replay on decode)", "s--")]:
        ax.plot(n, [float(r[idx]) for r in rows], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("one prefill step (ms), 4xH100")
    ax.set_title("One prefill step for one prompt")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    save(fig, out_dir, "prefill_step.png")


def instance_memory(tables, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    for ax, (key, title) in zip(axes, [("--info --prefill-gpus 2", "2xH100"),
                                       ("--info --gpu h200 --prefill-gpus 2", "2xH200")]):
        rows = [r for r in tables.get(key, []) if len(r) == 5 and not r[0].isdigit()]
        if not rows:
            raise KeyError(f"study table missing: ced-sim {key}")
        names = [r[0].replace("prefill, ", "").replace("CED, ", "CED\n") for r in rows]
        weights = [float(r[2]) for r in rows]
        room = [max(0.0, float(r[3])) for r in rows]
        ax.bar(names, weights, label="weights (GB)", color="tab:gray")
        ax.bar(names, room, bottom=weights, label="KV room (GB)", color="tab:green")
        for i, r in enumerate(rows):
            ax.text(i, weights[i] + room[i], f"{int(r[4]) / 1000:.0f}k tok", ha="center",
                    va="bottom", fontsize=8)
        ax.set_title(f"What a prefill instance holds: {title}")
        ax.set_ylabel("GB")
        ax.set_ylim(0, 1.25 * max(w + k for w, k in zip(weights, room)))
        ax.tick_params(axis="x", labelsize=8)
    axes[0].legend(fontsize=8, ncol=2, loc="upper left")
    save(fig, out_dir, "instance_memory.png")


def fidelity(path, out_dir):
    """Measured against predicted, every run, from the table of the prediction
    judged ("| 50% | TTFT p50 | 270.6 / 261.4 (-3.4%) | ... | median |")."""
    if not os.path.exists(path):
        return
    pts = []  # (load, metric, percentile, measured, predicted)
    in_judged = False
    for line in open(path):
        if line.startswith("### "):
            in_judged = line.startswith("### The prediction judged")
            continue
        m = re.match(r"^\| (\d+%) \| (TTFT|TPOT) (p\d+) \|(.*)\|[^|]*\|\s*$", line)
        if not (in_judged and m):
            continue
        for cell in m.group(4).split("|"):
            v = re.match(r"\s*([\d.]+) / ([\d.]+)", cell)
            if v:
                pts.append((m.group(1), m.group(2), m.group(3), float(v.group(1)),
                            float(v.group(2))))
    if not pts:
        return
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    marks = {"p50": "o", "p90": "s"}
    colors = {}
    for ax, metric in zip(axes, ["TTFT", "TPOT"]):
        sel = [p for p in pts if p[1] == metric]
        lim = max(max(p[3], p[4]) for p in sel) * 1.15
        ax.plot([0, lim], [0, lim], "k-", lw=0.8)
        ax.fill_between([0, lim], [0, lim * 0.85], [0, lim * 1.15], color="tab:green", alpha=0.15,
                        label="within 15%")
        seen = set()
        for load, _, pct, meas, pred in sel:
            color = colors.setdefault(load, f"C{len(colors)}")
            label = f"{load} load, {pct}"
            ax.plot(meas, pred, marks.get(pct, "^"), color=color,
                    label=None if label in seen else label)
            seen.add(label)
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_xlabel(f"measured {metric} (ms)")
        ax.set_ylabel(f"predicted {metric} (ms)")
        ax.set_title(f"{metric}: ced-sim vs the real cluster, every run")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    save(fig, out_dir, "fidelity.png")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", default="bench/results/sim.md")
    ap.add_argument("--fidelity", default="bench/results/fidelity.md")
    ap.add_argument("--out-dir", default="bench/results/plots")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    tables = parse_tables(open(a.study).read())
    capacity_per_split(tables, a.out_dir)
    capacity_per_split(tables, a.out_dir, "--gpu h200", "capacity_per_split_h200.png",
                       "six 4xH200 instances")
    best_ced_vs_dec(tables, a.out_dir)
    replay_placement(tables, a.out_dir)
    router_inflight(tables, a.out_dir)
    prefill_step(tables, a.out_dir)
    instance_memory(tables, a.out_dir)
    fidelity(a.fidelity, a.out_dir)


if __name__ == "__main__":
    main()
