#!/usr/bin/env python3
"""Plot and summarize ced-loadgen agent runs (bench/system/sessions.sh).

Usage: sessions_plot.py --svg OUT.svg [--part cache|tiers|routing] RUN1.json [RUN2.json ...]

Draws TTFT p50 per turn (log scale) for every target of every run as an SVG
written by hand (no matplotlib needed), and prints a markdown summary: per run
and target TTFT of turn 1 and of turns >= 2, hit rate, bytes at rest per
session; then the ratios the issue asks for (without / with the prefix cache,
decoder-only / CED). --part tiers / routing summarize sessions_tiers.sh's runs
instead (each RUN.json beside its RUN_metrics.json: the workers' counter
deltas). Standard library only.
"""
import argparse
import json
import math
import sys

COLORS = {"ced-cache": "#1f77b4", "ced-nocache": "#9ecae1", "dec-cache": "#d62728",
          "dec-nocache": "#fc9272", "recompute": "#9ecae1", "hot": "#1f77b4",
          "hostdisk": "#2ca02c", "redis": "#d62728", "redis_t": "#9467bd", "cache_aware": "#1f77b4", "load": "#ff7f0e"}
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


def metrics_of(path):
    try:
        with open(path[:-5] + "_metrics.json") as f:
            return json.load(f)
    except OSError:
        return {}


def counter(vals, name, **labels):
    """Sum of `name` over the series whose labels include `labels`."""
    total = 0.0
    for key, v in vals.items():
        base, _, lab = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{x}"' in lab for k, x in labels.items()):
            total += v
    return total


def later_sum(run, key):
    """Sum over turns >= 2 of (per-turn mean of `key`) x requests that turn."""
    tot = 0.0
    for t in run["turns"][1:]:
        n = t["ttft_ms"]["count"]
        if n == 0:
            continue
        tot += (t["ttft_ms"]["mean"] if key == "ttft" else t["server_ms"][key]) * n
    return tot


def pct(values, q):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    f = int(k)
    return v[f] + (v[min(f + 1, len(v) - 1)] - v[f]) * (k - f)


def ttfts(run, first_turn):
    """Client TTFT of the successful requests of turns >= first_turn (needs records)."""
    return [r["ttft_ms"] for r in run.get("records", [])
            if r["turn"] >= first_turn and r["outcome"] == "OK"]


def server(run, first_turn, key):
    """The gateway's `key` timing (ms) of the successful requests of turns >= first_turn."""
    return [r["server_ms"][key] for r in run.get("records", [])
            if r["turn"] >= first_turn and r["outcome"] == "OK" and "server_ms" in r]


def summary_tiers_server(runs):
    print("TTFT split by the gateway's timings, turns >= 2 (p50 over the requests, ms): queue "
          "(before the prefill starts: behind other sessions' turns and waiting for room in the decode "
          "worker's KV cache) and "
          "prefill (reservation + tier reads + compute); recompute / target on prefill p50.\n")
    print("| run | target | queue p50 | prefill p50 / p90 | recompute / target (prefill p50) |")
    print("|---|---|---:|---:|---:|")
    for path, doc in runs:
        by = {r["label"]: r for r in doc["runs"]}
        rec = by.get("recompute")
        rp = pct(server(rec, 2, "prefill"), 0.5) if rec else float("nan")
        for label in ("recompute", "hot", "hostdisk", "redis", "redis_t"):
            run = by.get(label)
            if run is None:
                continue
            pre = server(run, 2, "prefill")
            print(f"| {run_name(path)} | {label} | {pct(server(run, 2, 'queue'), 0.5):.0f} | "
                  f"{pct(pre, 0.5):.0f} / {pct(pre, 0.9):.0f} | {rp / pct(pre, 0.5):.2f}x |")
    print()


def summary_tiers(runs):
    summary_tiers_server(runs)
    print("| run | target | turns ok | TTFT turns >= 2 p50 / p90 ms | recompute / target (p50, "
          "turns >= 2) | >= 3x | TTFT turns >= 4 p50 ms | recompute / target (p50, turns >= 4) "
          "| cached / reusable turns >= 2 | decode worker: prefix hit tokens, of them from the "
          "tiers | tier reads, both workers |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|")
    bw = []
    for path, doc in runs:
        met = metrics_of(path)
        by = {r["label"]: r for r in doc["runs"]}
        rec = by.get("recompute")
        r2 = pct(ttfts(rec, 2), 0.5) if rec else float("nan")
        r4 = pct(ttfts(rec, 4), 0.5) if rec else float("nan")
        for label in ("recompute", "hot", "hostdisk", "redis", "redis_t"):
            run = by.get(label)
            if run is None:
                continue
            t2, t4 = ttfts(run, 2), ttfts(run, 4)
            p2, p4 = pct(t2, 0.5), pct(t4, 0.5)
            reads = []
            total_bytes = prefill_bytes = 0.0
            tier_tokens_decode = 0.0
            for tier in ("host", "disk", "redis"):
                for role in ("prefill-0", "decode-0"):
                    vals = met.get(f"{label}/{role}", {})
                    b = counter(vals, "ced_kv_tier_read_bytes_total", tier=tier)
                    blocks = counter(vals, "ced_kv_tier_hit_blocks_total", tier=tier)
                    if role == "decode-0":
                        tier_tokens_decode += 16 * blocks
                    if b or blocks:
                        reads.append(f"{tier} {role.split('-')[0]}: {b / 2**20:.0f} MiB")
                    total_bytes += b
                    if role == "prefill-0":
                        prefill_bytes += b
            errs = sum(counter(v, "ced_kv_tier_errors_total") + counter(v, "ced_kv_tier_dropped_writes_total")
                       + counter(v, "ced_kv_tier_rejected_blocks_total")
                       for k, v in met.items() if k.startswith(label + "/"))
            if errs:
                reads.append(f"errors + dropped + rejected: {errs:.0f}")
            dec = met.get(f"{label}/decode-0", {})
            hits = counter(dec, "ced_prefix_cache_hit_tokens_total")
            share = f"{hits:.0f}, {tier_tokens_decode:.0f} ({100 * tier_tokens_decode / hits:.0f}%)" if hits else "-"
            goal = "" if label in ("recompute", "hot") else ("yes" if r2 / p2 >= 3 else "**no**")
            print(f"| {run_name(path)} | {label} | {run['succeeded']}/{run['planned_turns']} | "
                  f"{p2:.0f} / {pct(t2, 0.9):.0f} | {r2 / p2:.2f}x | {goal} | {p4:.0f} | {r4 / p4:.2f}x | "
                  f"{100 * run['hit_rate_later_turns']:.1f}% | {share} | {'; '.join(reads) or '-'} |")
            hot = by.get("hot")
            if label in ("hostdisk", "redis", "redis_t") and hot is not None and total_bytes > 0:
                extra_ms = later_sum(run, "ttft") - later_sum(hot, "ttft")
                pre_ms = later_sum(run, "prefill")
                bw.append((run_name(path), label, total_bytes, extra_ms, prefill_bytes, pre_ms))
    print()
    print("Tier bandwidth (the tier counters give bytes, not time): (a) bytes read by both "
          "workers / the TTFT of turns >= 2 beyond the hot-cache cluster's on the same trace "
          "(sums over the requests; an estimate of the load time, noisy, and it counts any extra "
          "queueing too); (b) bytes the prefill worker read / the gateway's prefill time of those "
          "turns (which also holds the compute: a lower bound for that worker).\n")
    print("| run | target | MiB read, both | extra TTFT vs hot, s | (a) MiB/s | MiB read, prefill worker "
          "| prefill time, s | (b) MiB/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, label, b, extra, pb, pre in bw:
        a = f"{b / 2**20 / (extra / 1e3):.0f}" if extra > 0 else "n/a (not slower than hot)"
        print(f"| {name} | {label} | {b / 2**20:.0f} | {extra / 1e3:.1f} | {a} | {pb / 2**20:.0f} | "
              f"{pre / 1e3:.1f} | {pb / 2**20 / (pre / 1e3):.0f} |")


def summary_routing(runs):
    print("| run | routing | turns ok | TTFT turns >= 2 p50 / p90 ms | hit rate turns >= 2 (loadgen) "
          "| cache-aware >= 90% | prefill workers: hit / query tokens (each) | decode workers: hit / query tokens (each) |")
    print("|---|---|---:|---:|---:|---|---|---|")
    for path, doc in runs:
        met = metrics_of(path)
        for run in doc["runs"]:
            label = run["label"]
            lt = run["ttft_later_turns_ms"]
            cols = []
            for role in ("prefill", "decode"):
                parts = []
                for w in sorted(k for k in met if k.startswith(f"{label}/{role}-")):
                    h = counter(met[w], "ced_prefix_cache_hit_tokens_total")
                    q = counter(met[w], "ced_prefix_cache_query_tokens_total")
                    parts.append(f"{h:.0f} / {q:.0f}")
                cols.append("; ".join(parts) or "-")
            hr = run["hit_rate_later_turns"]
            print(f"| {run_name(path)} | {label} | {run['succeeded']}/{run['planned_turns']} | "
                  f"{lt['p50']:.0f} / {lt['p90']:.0f} | {100 * hr:.1f}% | "
                  f"{('yes' if hr >= 0.9 else '**no**') if label == 'cache_aware' else '(comparison)'} | "
                  f"{cols[0]} | {cols[1]} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--svg", required=True)
    ap.add_argument("--part", choices=("cache", "tiers", "routing"), default="cache")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = load(a.runs)
    svg(runs, a.svg)
    {"cache": summary, "tiers": summary_tiers, "routing": summary_routing}[a.part](runs)
    print(f"\nPlot: {a.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
