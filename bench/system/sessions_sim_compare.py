#!/usr/bin/env python3
"""The simulator's prediction of an agent trace against the measured run.

Usage: sessions_sim_compare.py [--md OUT.md] MEASURED.json:TARGET=SIM.json ...

MEASURED.json is a ced-loadgen --workload agent report (bench/system/sessions.sh),
TARGET one of its targets (its `label`), SIM.json the `ced-sim --workload agent
--json-out` of the same trace (same seed and flags) on a calibrated device
profile. Prints, per pair, TTFT p50 per turn measured and predicted with the
error (predicted - measured) / measured, and how many turns are within 15%;
then the errors of every pair in one table. Both sides compute percentiles the
same way (linear interpolation). Standard library only.
"""
import argparse
import json
import sys

TOLERANCE = 0.15


def turns_of_target(report, target):
    for run in report["runs"]:
        if run.get("label") == target:
            return {t["turn"]: t for t in run["turns"]}
    raise SystemExit(f"sessions_sim_compare.py: no target '{target}' in the report")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--md", help="also write the tables here")
    ap.add_argument("pairs", nargs="+", help="MEASURED.json:TARGET=SIM.json")
    args = ap.parse_args()
    out = []
    summary = []
    for pair in args.pairs:
        try:
            left, sim_path = pair.rsplit("=", 1)
            measured_path, target = left.rsplit(":", 1)
        except ValueError:
            raise SystemExit(f"sessions_sim_compare.py: expected MEASURED.json:TARGET=SIM.json, got '{pair}'")
        with open(measured_path) as f:
            measured = turns_of_target(json.load(f), target)
        with open(sim_path) as f:
            sim = {t["turn"]: t for t in json.load(f)["turns"]}
        # The prediction's file names the run, the kind and the target.
        name = sim_path.rsplit("/", 1)[-1].removesuffix(".json")
        out.append(f"#### {name}: measured {measured_path.rsplit('/', 1)[-1]}, target {target}\n")
        out.append("| turn | measured TTFT p50 ms | predicted | error | measured p90 | predicted | error |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|")
        within = 0
        errors = []
        for k in sorted(measured):
            m, s = measured[k], sim.get(k)
            if s is None or m["ok"] == 0 or s["ok"] == 0:
                out.append(f"| {k} | - | - | - | - | - | - |")
                continue
            e50 = (s["ttft_ms"]["p50"] - m["ttft_ms"]["p50"]) / m["ttft_ms"]["p50"]
            e90 = (s["ttft_ms"]["p90"] - m["ttft_ms"]["p90"]) / m["ttft_ms"]["p90"]
            errors.append(e50)
            within += abs(e50) <= TOLERANCE
            out.append(f"| {k} | {m['ttft_ms']['p50']:.0f} | {s['ttft_ms']['p50']:.0f} | {100 * e50:+.1f}% "
                       f"| {m['ttft_ms']['p90']:.0f} | {s['ttft_ms']['p90']:.0f} | {100 * e90:+.1f}% |")
        out.append(f"\nTurns with the p50 within {100 * TOLERANCE:.0f}%: {within} of {len(errors)}.\n")
        summary.append((name, target, errors, within))
    out.append("| prediction | target | p50 error per turn | within 15% |")
    out.append("|---|---|---|---:|")
    for name, target, errors, within in summary:
        cells = " ".join(f"{100 * e:+.0f}%" for e in errors)
        out.append(f"| {name} | {target} | {cells} | {within} of {len(errors)} |")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
