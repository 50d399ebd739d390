#!/usr/bin/python3
"""Writes the fidelity table of bench/sim/fidelity.sh: predicted (ced-sim)
vs measured (ced-loadgen on `ced cluster`) TTFT and TPOT p50 / p90.

Both sides' percentiles are computed here, the same way (linear
interpolation between closest ranks, as ced-loadgen does), over the requests
that completed. Arguments after the flags: one `rate,requests,measured.json,
sim.csv,sim_adjusted.csv,f,load_before,load_after,decode_before.prom,
decode_after.prom,sim_apart.csv` per load (the decode worker's metrics
scraped around the run, empty files when the scrape failed; the simulation
without --colocated).
"""
import argparse
import csv
import datetime
import json
import re
import statistics
import sys

TOLERANCE = 0.15


def percentile(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def measured(path):
    run = json.load(open(path))["runs"][0]
    ok = [r for r in run["requests"] if r["outcome"] == "OK"]
    ttft = [r["ttft_ms"] for r in ok if "ttft_ms" in r]
    tpot = [r["tpot_ms"] for r in ok if "tpot_ms" in r]
    prefill = [r["server_ms"]["prefill"] for r in ok if "server_ms" in r]
    queue = [r["server_ms"]["queue"] for r in ok if "server_ms" in r]
    return {"issued": run["issued"], "ok": len(ok), "ttft": ttft, "tpot": tpot,
            "prefill": prefill, "queue": queue, "errors": run.get("errors", {}),
            "replays_on_decode": run.get("replays_on_decode", 0)}


def simulated(path):
    rows = [r for r in csv.DictReader(open(path)) if r["completed"] == "1"]
    ttft = [1e3 * float(r["ttft_s"]) for r in rows]
    tpot = [1e3 * float(r["tpot_s"]) for r in rows if int(r["output_tokens"]) > 1]
    return {"ok": len(rows), "ttft": ttft, "tpot": tpot}


def slowdown(mpath, spath):
    """Median over requests of the prefill worker's measured compute time over
    the simulator's prefill step for the same request: how much slower the
    worker ran than the calibrated profile says (other load on the machine)."""
    sim = {int(r["index"]): float(r["prefill_s"]) for r in csv.DictReader(open(spath))}
    run = json.load(open(mpath))["runs"][0]
    ratios = [r["server_ms"]["prefill"] / (1e3 * sim[r["index"]]) for r in run["requests"]
              if r["outcome"] == "OK" and "server_ms" in r and sim.get(r["index"], 0) > 0]
    return statistics.median(ratios) if ratios else 1.0


def scrape_values(path):
    """Unlabelled sums and counts of a Prometheus text scrape."""
    out = {}
    try:
        for line in open(path):
            m = re.match(r"^([a-z_]+(?:_sum|_count))\s+(\S+)$", line.strip())
            if m:
                out[m.group(1)] = float(m.group(2))
    except OSError:
        pass
    return out


def decode_worker(before, after):
    """(steps, mean step ms, mean batch) of the decode worker over the run."""
    b, a = scrape_values(before), scrape_values(after)
    def delta(k):
        return a.get(k, float("nan")) - b.get(k, 0.0)
    steps = delta("ced_decode_step_seconds_count")
    if not steps > 0:
        return None
    return (steps, 1e3 * delta("ced_decode_step_seconds_sum") / steps,
            delta("ced_decode_batch_size_sum") / steps)


def covered(intervals, lo, hi):
    """Seconds of [lo, hi] covered by the union of `intervals` (sorted by start)."""
    total, at = 0.0, lo
    for s, e in intervals:
        s, e = max(s, at), min(e, hi)
        if e > s:
            total += e - s
            at = e
    return total


def breakdown(mpath, spath, request_s):
    """Where each request's TTFT went, measured against simulated.

    Measured, from the load generator's per-request records and the final
    response's timings: wait (gateway receipt until the prefill compute
    starts: routing, the decode worker's Reserve, the prefill worker's
    queue), split into the part during which the prefill worker was computing
    other prompts (their measured compute intervals) and the rest; compute;
    and after (the first token's way back to the client). Simulated: wait
    (TTFT minus the prefill step minus the path latency request_s) and the
    prefill step. For the requests whose wait outside the prefill compute
    exceeds 10 ms: how many of those waits ended within 5 ms of the decode
    worker going idle (every earlier request's decode finished: measured by
    the records' first-token and end times)."""
    run = json.load(open(mpath))["runs"][0]
    sim = {int(r["index"]): r for r in csv.DictReader(open(spath))}
    recs = [r for r in run["requests"]
            if r["outcome"] == "OK" and "server_ms" in r and "ttft_ms" in r]
    computes = sorted((r["sent_s"] + r["server_ms"]["queue"] / 1e3,
                       r["sent_s"] + (r["server_ms"]["queue"] + r["server_ms"]["prefill"]) / 1e3,
                       r["index"]) for r in recs)
    decoding = [(r["sent_s"] + r["ttft_ms"] / 1e3, r["sent_s"] + r["e2e_ms"] / 1e3)
                for r in recs]

    def decode_idle_after(t):
        while True:
            ends = [e for s, e in decoding if s <= t < e]
            if not ends:
                return t
            t = max(ends)

    out = {k: [] for k in ["wait", "busy", "other", "compute", "after", "swait", "scompute",
                           "dwait", "dcompute", "dafter", "dttft"]}
    stalls = at_idle = 0
    for r in recs:
        q, c = r["server_ms"]["queue"], r["server_ms"]["prefill"]
        start = r["sent_s"] + q / 1e3
        busy = 1e3 * covered([(s, e) for s, e, i in computes if i != r["index"]], r["sent_s"],
                             start)
        other = max(0.0, q - busy)
        after = r["ttft_ms"] - q - c
        sr = sim.get(r["index"])
        if sr is None:
            continue
        sc = 1e3 * float(sr["prefill_s"])
        sw = 1e3 * float(sr["ttft_s"]) - sc - 1e3 * request_s
        for k, v in [("wait", q), ("busy", busy), ("other", other), ("compute", c),
                     ("after", after), ("swait", sw), ("scompute", sc), ("dwait", q - sw),
                     ("dcompute", c - sc), ("dafter", after - 1e3 * request_s),
                     ("dttft", r["ttft_ms"] - 1e3 * float(sr["ttft_s"]))]:
            out[k].append(v)
        if other > 10:
            stalls += 1
            idle = decode_idle_after(r["sent_s"])
            if abs(r["sent_s"] + other / 1e3 - idle) < 0.005:
                at_idle += 1
    out["stalls"], out["at_idle"], out["n"] = stalls, at_idle, len(recs)
    return out


# The profile's speeds: key -> (side, rate or per-step cost).
SPEED_KEYS = {
    "peak_flops": ("prefill", "rate"),
    "prefill_step_s": ("prefill", "cost"),
    "prefill_token_s": ("prefill", "cost"),
    "hbm_bytes_per_s": ("decode", "rate"),
    "decode_step_s": ("decode", "cost"),
    "decode_seq_s": ("decode", "cost"),
}


def scale_speeds(src, dst, f_prefill, f_decode, header):
    """The profile with its prefill rates divided by f_prefill (its per-step
    prefill costs multiplied by it) and its decode ones by f_decode."""
    f = {"prefill": f_prefill, "decode": f_decode}
    out = [header]
    for line in open(src):
        parts = line.split("#")[0].split()
        if len(parts) == 2 and parts[0] in SPEED_KEYS:
            side, kind = SPEED_KEYS[parts[0]]
            v = float(parts[1])
            v = v / f[side] if kind == "rate" else v * f[side]
            line = f"{parts[0]} {v:.9g}\n"
        out.append(line.rstrip("\n"))
    open(dst, "w").write("\n".join(out) + "\n")


def scale_profile(src, dst, f):
    """The run's slowdown f on every speed (the "slowed by f" diagnostic)."""
    scale_speeds(src, dst, f, f,
                 f"# scaled by fidelity_report.py: rates / {f:.4f}, per-step costs x {f:.4f}")


def scale_drift(src, dst, f_prefill, f_decode):
    """The machine's speed drift since calibration, as a probe measured it."""
    scale_speeds(src, dst, f_prefill, f_decode,
                 f"# drift applied by fidelity_report.py: prefill x {f_prefill:.4f}, "
                 f"decode x {f_decode:.4f} (rates divided, per-step costs multiplied)")


def err(pred, meas):
    return (pred - meas) / meas if meas > 0 else float("nan")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "scale-drift":
        # scale-drift PROFILE_IN PROFILE_OUT F_PREFILL F_DECODE
        scale_drift(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "scale":
        # scale MEASURED_JSON SIM_CSV PROFILE_IN PROFILE_OUT: prints the factor.
        f = slowdown(sys.argv[2], sys.argv[3])
        scale_profile(sys.argv[4], sys.argv[5], f)
        print(f"{f:.4f}")
        return
    ap = argparse.ArgumentParser()
    for flag in ["out", "profile", "preset", "input-mean", "output-mean", "seed", "cores",
                 "threads", "request-ms", "load-start", "load-end", "sim-command"]:
        ap.add_argument("--" + flag, required=True)
    ap.add_argument("loads", nargs="+")
    a = ap.parse_args()
    profile = open(a.profile).read()
    request_s = 0.0
    for line in profile.splitlines():
        parts = line.split("#")[0].split()
        if len(parts) == 2 and parts[0] == "request_s":
            request_s = float(parts[1])  # the last one (fidelity.sh appends the probe's)
    rows, misses, detail, where = [], [], [], []
    for item in a.loads:
        (rate, n, mpath, spath, apath, factor, before, after, dbefore, dafter,
         ppath) = item.split(",")
        apart = simulated(ppath)
        dw = decode_worker(dbefore, dafter)
        dcell = f"{int(dw[0])} / {dw[1]:.2f} / {dw[2]:.2f}" if dw else "n/a"
        m, s, adj = measured(mpath), simulated(spath), simulated(apath)
        cells = []
        for metric in ["ttft", "tpot"]:
            for p in [50, 90]:
                mv, pv = percentile(m[metric], p), percentile(s[metric], p)
                av = percentile(adj[metric], p)
                xv = percentile(apart[metric], p)
                e = err(pv, mv)
                cells.append((metric.upper(), p, mv, pv, e, av, err(av, mv), factor, xv,
                              err(xv, mv)))
                if not abs(e) <= TOLERANCE:
                    misses.append(f"{metric.upper()} p{p} at {rate} req/s: predicted {pv:.1f} ms, "
                                  f"measured {mv:.1f} ms ({100 * e:+.0f}%)")
        rows.append((rate, n, m, s, cells, before, after))
        errors = ", ".join(f"{k} {v}" for k, v in sorted(m["errors"].items())) or "none"
        detail.append(
            f"| {rate}/s | {m['issued']} | {m['ok']} / {s['ok']} | "
            f"{statistics.median(m['prefill']) if m['prefill'] else float('nan'):.1f} | "
            f"{percentile(m['queue'], 50):.1f} / {percentile(m['queue'], 90):.1f} | "
            f"{m['replays_on_decode']} | {dcell} | {errors} | {before} -> {after} |")
        b = breakdown(mpath, spath, request_s)
        pp = lambda k: f"{percentile(b[k], 50):.1f} / {percentile(b[k], 90):.1f}"
        mean = lambda k: statistics.mean(b[k]) if b[k] else float("nan")
        where.append(
            f"| {rate}/s | {pp('wait')} | {pp('busy')} | {pp('other')} | {pp('swait')} | "
            f"{pp('compute')} | {pp('scompute')} | {pp('after')} | "
            f"{mean('dttft'):+.1f} = {mean('dwait'):+.1f} {mean('dcompute'):+.1f} "
            f"{mean('dafter'):+.1f} | {b['stalls']} of {b['n']} ({b['at_idle']}) |")

    out = []
    w = out.append
    w("# Simulator fidelity: ced-sim vs the real cluster (CPU)")
    w("")
    w(f"Generated by `bench/sim/fidelity.sh` on {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC. "
      f"Model preset `{a.preset}`; prompts lognormal mean {a.input_mean}, outputs mean "
      f"{a.output_mean} (cv 0.5), Poisson arrivals, seed {a.seed}: the load generator and the "
      "simulator draw the same trace (same arrival times and lengths).")
    w("")
    w(f"Cluster: `ced cluster` with 1 prefill and 1 decode worker on this machine ({a.cores} "
      f"cores, {a.threads} OpenMP thread(s) per worker, passive waits), router `--replay-on "
      "auto`, K/V over UCX on loopback. Simulator: the same topology (two 1-\"GPU\" "
      "instances) on the measured device profile below, the router's policy library, the "
      "engine's block allocator for decode admission, 1 s load reports (the router's "
      "heartbeat), max batch 64, the decode worker's start-then-join iteration, and the two "
      "instances colocated (`--colocated`): while the prefill instance computes, the decode "
      "instance's step runs slower by the profile's measured `decode_colocated_slowdown`, and "
      "while the decode instance steps, the prefill runs slower by "
      "`prefill_colocated_slowdown` (applied to the overlapping part of each step).")
    w("")
    w(f"Load average (1/5/15 min) at the start: {a.load_start}; at the end: {a.load_end}.")
    w("")
    w("## Predicted vs measured")
    w("")
    w("| load | requests | metric | measured (ms) | predicted (ms) | error | "
      "predicted, slowed by f (ms) | error | f | predicted apart (ms) | error |")
    w("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rate, n, m, s, cells, _, _ in rows:
        for name, p, mv, pv, e, av, ae, factor, xv, xe in cells:
            mark = "" if abs(e) <= TOLERANCE else "**"
            amark = "" if abs(ae) <= TOLERANCE else "**"
            xmark = "" if abs(xe) <= TOLERANCE else "**"
            w(f"| {rate} req/s | {n} | {name} p{p} | {mv:.1f} | {pv:.1f} | "
              f"{mark}{100 * e:+.1f}%{mark} | {av:.1f} | {amark}{100 * ae:+.1f}%{amark} | "
              f"{float(factor):.2f} | {xv:.1f} | {xmark}{100 * xe:+.1f}%{xmark} |")
    w("")
    within = sum(1 for r in rows for c in r[4] if abs(c[4]) <= TOLERANCE)
    total = sum(len(r[4]) for r in rows)
    awithin = sum(1 for r in rows for c in r[4] if abs(c[6]) <= TOLERANCE)
    xwithin = sum(1 for r in rows for c in r[4] if abs(c[9]) <= TOLERANCE)
    w(f"Calibrated profile: {within} of {total} figures within {100 * TOLERANCE:.0f}%. "
      f"With the run's slowdown f: {awithin} of {total}. Without colocation: {xwithin} of "
      f"{total}.")
    if misses:
        w("")
        w("Outside the tolerance (calibrated profile): " + "; ".join(misses) + ".")
    w("")
    w("*Predicted* uses the profile as calibrated before the cluster started. *Slowed by f* "
      "is a diagnostic: f is the median, over the run's requests, of the prefill worker's "
      "measured compute time over the simulator's prefill step for the same request; the "
      "profile's rates are divided by f and its per-step costs multiplied by f, and the "
      "simulation is run again. f near 1 means the workers ran as fast as calibrated; well "
      "above 1, that other processes took the cores during the run (the load average "
      "below), which no model of this cluster alone can predict. *Predicted apart* is the "
      "calibrated profile without `--colocated` (the two instances as if on separate "
      "machines): what the colocation model changes on the same run.")
    w("")
    w("## Measured detail")
    w("")
    w("Per load: requests issued, completed (measured / simulated), the prefill worker's "
      "compute per request (median, ms; the simulator's is the profile's prefill step), "
      "the wait before compute p50 / p90 (ms: gateway receipt to prefill start), replays placed on the decode worker, the "
      "decode worker's steps / mean step time (ms) / mean batch over the run (its "
      "`ced_decode_step_seconds` and `ced_decode_batch_size` histograms), errors, "
      "and the load average before -> after the run.")
    w("")
    w("| load | issued | completed (meas. / sim.) | prefill compute p50 | wait p50 / p90 | "
      "replays on decode | decode steps / step ms / batch | errors | load average |")
    w("|---|---:|---|---:|---|---:|---|---|---|")
    for d in detail:
        w(d)
    w("")
    w("## Where the TTFT goes")
    w("")
    w("Per request, then p50 / p90 over the requests (ms). Measured: *wait* from the "
      "gateway's receipt until the prefill compute starts (routing, the decode worker's "
      "`Reserve`, the prefill worker's queue: the final response's `queue_ms`), split into "
      "the part while the prefill worker was computing other prompts (their measured compute "
      "intervals) and the *rest*; *compute*, the prefill worker's; *after*, TTFT minus both "
      "(the first token's way to the client; the simulator's is the probe's path latency "
      "`request_s`). Simulated: wait = TTFT - prefill step - `request_s`. *Excess*: the mean "
      "over requests of measured minus simulated TTFT, = wait + compute + after excesses. "
      "*Stalls*: requests whose wait outside the prefill compute exceeded 10 ms (in "
      "parentheses, those whose stall ended within 5 ms of the decode worker going idle, "
      "i.e. the last running sequence finishing).")
    w("")
    w("| load | wait | of it, prefill busy | rest | simulated wait | compute | simulated "
      "compute | after | excess: TTFT = wait + compute + after | stalls (at decode idle) |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for d in where:
        w(d)
    w("")
    w("## Device profile")
    w("")
    w("Measured by `ced-sim-calibrate` (GEMM rate of the engine's GEMM over one layer's "
      "shapes and memory read bandwidth, each raised to what the engine's own prefill of the "
      "longest prompt / decode of the smallest batch reaches when that is higher, and the "
      "engine's real prefill and decode steps, whose "
      "excess over the roofline of those two rates is fitted as fixed + per-token and fixed + "
      "per-sequence costs; and the colocation slowdowns: the decode step of one sequence "
      "while a second engine with its own weights prefills on another thread, and that "
      "prefill while the second engine decodes, each over the same measurement alone; "
      "the prefill's raised to the same measured in the running cluster when that is "
      "higher: prefill compute of six mean-length prompts beside a 300-token decode stream "
      "over alone, medians of three rounds — in the cluster the workers also share the "
      "cores with the K/V transfer and the token relays; the stream's TPOT beside them is "
      "recorded, not used: its estimate is within this machine's noise), "
      f"plus `request_s`: the median of TTFT minus the prefill worker's "
      f"compute over a probe of 16-token prompts sent one at a time ({float(a.request_ms):.2f} ms), "
      "and an addition to `decode_step_s`: the TPOT of a second probe, 10 prompts of the mean "
      "length (16 output tokens each, one at a time, so the workers never overlap), minus the "
      "simulator's for the same probe: the real decode loop's cost per step beyond the "
      "engine's step as calibrated in-process. That probe runs right before each load (this "
      "shared machine's speed drifts by 10-20% over minutes), and each load is simulated with "
      "its own correction (the lines at the end of the profile, with the decode worker's own "
      "mean step over that probe): the profile's prefill rates scaled by the probe's prefill "
      "compute over the profile's for the same prompts; and when the probe's TPOT is below "
      "the simulator's (the machine runs faster than when calibrated: the real decode loop "
      "cannot beat the engine step it runs), its decode rates scaled by that ratio instead of "
      "an addition to `decode_step_s`.")
    w("")
    w("```")
    w(profile.rstrip())
    w("```")
    w("")
    w("Simulator command per load (PROFILE = the file above, with its load's `decode_step_s`):")
    w("")
    w("```")
    w(a.sim_command + " --rate RATE --requests N")
    w("```")
    open(a.out, "w").write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
