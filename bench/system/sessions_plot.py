#!/usr/bin/env python3
"""Plot and summarize ced-loadgen agent runs (bench/system/sessions.sh).

Usage: sessions_plot.py --svg OUT.svg RUN1.json [RUN2.json ...]

Draws TTFT p50 per turn (log scale) for every target of every run as an SVG
written by hand (no matplotlib needed), and prints a markdown summary: per run
and target TTFT of turn 1 and of turns >= 2, hit rate, bytes at rest per
session; then the ratios the issue asks for (without / with the prefix cache,
decoder-only / CED). Standard library only.
"""
import argparse
import json
import math
import sys

COLORS = {"ced-cache": "#1f77b4", "ced-nocache": "#9ecae1", "dec-cache": "#d62728",
          "dec-nocache": "#fc9272"}
FALLBACK = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
DASHES = ["", "6,4", "2,3", "8,3,2,3", "14,4", "4,2,1,2"]


def run_name(path):
    """'.../sessions_B_run2.json' -> 'B_run2'."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".json"):
        name = name[:-5]
    return name[len("sessions_"):] if name.startswith("sessions_") else name


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append((p, json.load(f)))
    return runs


def svg(runs, out):
    w, h, left, right, top, bottom = 760, 440, 70, 170, 40, 50
    series = []  # (label, run index, [(turn, ms)])
    for ri, (_, doc) in enumerate(runs):
        for run in doc["runs"]:
            pts = [(t["turn"], t["ttft_ms"]["p50"]) for t in run["turns"] if t["ttft_ms"]["count"]]
            series.append((run["label"], ri, pts))
    allv = [v for _, _, pts in series for _, v in pts if v > 0]
    turns = [t for _, _, pts in series for t, _ in pts]
    if not allv:
        raise SystemExit("sessions_plot.py: no TTFT in the runs")
    steps = [m * 10 ** e for e in range(-1, 8) for m in (1, 2, 5)]
    lo = max(v for v in steps if v <= min(allv))
    hi = min(v for v in steps if v >= max(allv))
    tmax = max(turns)
    pw, ph = w - left - right, h - top - bottom

    def x(t):
        return left + (t - 1) / max(1, tmax - 1) * pw

    def y(v):
        return top + ph - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{left}" y="22" font-size="14">TTFT p50 per turn, agent sessions on small '
         f'(log scale)</text>']
    for v in steps:
        if lo <= v <= hi:
            o.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#ddd"/>')
            o.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for t in range(1, tmax + 1):
        o.append(f'<text x="{x(t):.1f}" y="{top + ph + 18}" text-anchor="middle">{t}</text>')
    o.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">turn</text>')
    o.append(f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" '
             f'text-anchor="middle">TTFT p50, ms</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    labels = []
    for label, ri, pts in series:
        if label not in labels:
            labels.append(label)
        color = COLORS.get(label, FALLBACK[labels.index(label) % len(FALLBACK)])
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts if v > 0)
        dash = DASHES[ri % len(DASHES)]
        o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"'
                 + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        for t, v in pts:
            if v > 0:
                o.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}"/>')
    ly = top + 10
    for label in labels:
        color = COLORS.get(label, FALLBACK[labels.index(label) % len(FALLBACK)])
        o.append(f'<line x1="{left + pw + 15}" x2="{left + pw + 40}" y1="{ly}" y2="{ly}" '
                 f'stroke="{color}" stroke-width="2"/>')
        o.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{label}</text>')
        ly += 18
    for ri in range(len(runs)):
        dash = DASHES[ri % len(DASHES)]
        o.append(f'<line x1="{left + pw + 15}" x2="{left + pw + 40}" y1="{ly}" y2="{ly}" '
                 f'stroke="#444" stroke-width="2"' + (f' stroke-dasharray="{dash}"' if dash else "")
                 + "/>")
        o.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{run_name(runs[ri][0])}</text>')
        ly += 18
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


def summary(runs):
    print("| run | target | model | KV | turns ok | TTFT turn 1 p50 ms | TTFT turns >= 2 "
          "p50 / p90 ms | hit rate turns >= 2 | bytes at rest / session |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    ratios = []
    for ri, (_, doc) in enumerate(runs):
        by = {}
        for run in doc["runs"]:
            by[run["label"]] = run
            m = run["model"]
            kind = "decoder-only" if m["decoder_only"] else "CED"
            t1 = run["turns"][0]["ttft_ms"]["p50"] if run["turns"] else 0
            later = run["ttft_later_turns_ms"]
            print(f"| {run_name(runs[ri][0])} | {run['label']} | {m['name']} ({kind}) | {m['kv_cache_dtype']} | "
                  f"{run['succeeded']}/{run['planned_turns']} | {t1:.0f} | "
                  f"{later['p50']:.0f} / {later['p90']:.0f} | "
                  f"{100 * run['hit_rate_later_turns']:.1f}% | "
                  f"{run['bytes_per_session_mean'] / 2**20:.1f} MiB |")

        def later(label, stat):
            r = by.get(label)
            return r["ttft_later_turns_ms"][stat] if r and r["ttft_later_turns_ms"]["count"] else None

        for stat in ("p50", "mean"):
            ratios.append((run_name(runs[ri][0]), stat, later("ced-cache", stat), later("ced-nocache", stat),
                           later("dec-cache", stat), later("dec-nocache", stat)))
    print()
    print("TTFT of turns >= 2 (p50, and the mean over those turns), ratios:\n")
    print("| run | statistic | CED: without / with cache | decoder-only: without / with cache | "
          "with cache: decoder-only / CED | without cache: decoder-only / CED | target: CED "
          "with cache >= 4x lower |")
    print("|---|---|---:|---:|---:|---:|---|")

    def ratio(a, b):
        return a / b if a and b else float("nan")

    for run, stat, cc, cn, dc, dn in ratios:
        ced = ratio(cn, cc)
        dec = ratio(dn, dc)
        met = "yes" if ced >= 4 else "**no**"
        print(f"| {run} | {stat} | {ced:.2f}x | {dec:.2f}x | {ratio(dc, cc):.2f}x | "
              f"{ratio(dn, cn):.2f}x | {met} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--svg", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = load(a.runs)
    svg(runs, a.svg)
    summary(runs)
    print(f"\nPlot: {a.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
