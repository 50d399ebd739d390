#!/usr/bin/python3
"""The fidelity report of bench/sim/fidelity.sh: predicted (ced-sim) vs
measured (ced-loadgen on `ced cluster`) TTFT and TPOT p50 / p90.

Subcommands:
  capacity SIM.csv   the simulated cluster's completion rate (requests/s) over
                     a run offered far more than it can take: completed
                     requests / (last finish - first arrival).
  predict FLAGS --pred ITEM...
                     writes the predictions (before any load runs) to
                     --predictions and to --out.
  report FLAGS --pred ITEM... --meas ITEM...
                     rewrites --out: the predictions section as written before
                     the loads, then every run's measurements and errors and
                     the median error over the runs, per metric.

--pred ITEM: `run,seed,fraction,rate,requests,corrected.csv,calibrated.csv,
apart.csv,corrected.txt` (the simulator's per-request records with the
frozen profile colocated, with the calibrated profile alone colocated, with
the frozen profile not colocated; and the first one's summary output).
--meas ITEM: `run,load_index,measured.json,load_before,load_after,
decode_before.prom,decode_after.prom` (the decode worker's metrics scraped
around the run, empty files when the scrape failed).

Both sides' percentiles are computed here, the same way (linear
interpolation between closest ranks, as ced-loadgen does), over the requests
that completed. Nothing measured during a load changes a prediction.
"""
import argparse
import csv
import datetime
import hashlib
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
    every = list(csv.DictReader(open(path)))
    rows = [r for r in every if r["completed"] == "1"]
    ttft = [1e3 * float(r["ttft_s"]) for r in rows]
    tpot = [1e3 * float(r["tpot_s"]) for r in rows if int(r["output_tokens"]) > 1]
    prefill = [1e3 * float(r["prefill_s"]) for r in rows]
    arrivals = [float(r["arrival_s"]) for r in rows]
    finish = [float(r["arrival_s"]) + float(r["ttft_s"]) +
              float(r["tpot_s"]) * max(0, int(r["output_tokens"]) - 1) for r in rows]
    span = max(finish) - min(arrivals) if rows else float("nan")
    return {"requests": len(every), "ok": len(rows), "ttft": ttft, "tpot": tpot, "prefill": prefill, "span_s": span,
            "decoded": sum(max(0, int(r["output_tokens"]) - 1) for r in rows)}


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


def err(pred, meas):
    return (pred - meas) / meas if meas > 0 else float("nan")



METRICS = [("ttft", 50), ("ttft", 90), ("tpot", 50), ("tpot", 90)]
# The three predictions, all made before any load: (key, title).
KINDS = [("corrected", "calibrated + probe, colocated (the prediction judged)"),
         ("calibrated", "calibrated only, colocated (no probe correction)"),
         ("apart", "calibrated + probe, not colocated")]


def capacity(path):
    s = simulated(path)
    return s["ok"] / s["span_s"]


def sim_steps(path):
    m = re.search(r"\bsteps=(\d+)", open(path).read())
    return int(m.group(1)) if m else 0


def parse_preds(items):
    preds = []
    for item in items:
        run, seed, frac, rate, n, cpath, kpath, apath, summary = item.split(",")
        sims = {"corrected": simulated(cpath), "calibrated": simulated(kpath),
                "apart": simulated(apath)}
        steps = sim_steps(summary)
        preds.append({"run": int(run), "seed": int(seed), "frac": float(frac), "rate": rate,
                      "n": int(n), "csv": cpath, "sims": sims,
                      "batch": sims["corrected"]["decoded"] / steps if steps else float("nan")})
    return preds


def load_label(p):
    return f"{100 * p['frac']:.0f}% ({p['rate']} req/s)"


def scrub(text, work):
    """The run's temporary folder out of the committed text."""
    return re.sub(r"/tmp/tmp\.[A-Za-z0-9]+", "WORK", text.replace(work, "WORK"))


def predictions_section(a, preds):
    out = []
    w = out.append
    w("## Predictions (written before the first load started)")
    w("")
    w(f"Written {datetime.datetime.utcnow():%Y-%m-%d %H:%M:%S} UTC; the probe phase ended "
      f"{a.probe_done} UTC; no load had run. Predicted capacity of the cluster: "
      f"{float(a.capacity):.2f} req/s (the simulator on the frozen profile, colocated, offered "
      "100 req/s for 400 requests: completed requests over first arrival to last finish, each "
      "waiting for decode room when there is none; the predictions below refuse such "
      "requests instead, `--refuse-when-full`, as the gateway refuses them). "
      f"Declared runs: {a.runs}; each run has its own seed (the load generator and the "
      "simulator draw the same trace from it: arrival times and lengths).")
    w("")
    w("| run (seed) | load | requests | kind | TTFT p50 | TTFT p90 | TPOT p50 | TPOT p90 | prefill busy | "
      "decode batch |")
    w("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for p in preds:
        for kind, _ in KINDS:
            s = p["sims"][kind]
            vals = " | ".join(f"{percentile(s[m], q):.1f}" for m, q in METRICS)
            extra = (f"{100 * sum(s['prefill']) / 1e3 / s['span_s']:.0f}% | {p['batch']:.2f}"
                     if kind == "corrected" else " | ")
            w(f"| {p['run']} ({p['seed']}) | {load_label(p)} | {p['n']} | {kind} | {vals} | "
              f"{extra} |")
    w("")
    w("Times in ms. *Prefill busy*: the simulated prefill instance's compute over the run's "
      "span; *decode batch*: simulated decoded tokens per decode step.")
    return "\n".join(out)


def header(a):
    out = []
    w = out.append
    w("# Simulator fidelity: ced-sim vs the real cluster (CPU)")
    w("")
    w("Reproduce (from the repository root; the last argument is the build folder, which "
      "needs `ced ced-loadgen ced-sim ced-sim-calibrate` built):")
    w("")
    w("```")
    w(a.command)
    w("```")
    w("")
    w(f"Method, declared before any result: **{a.runs} run{'s' if a.runs != 1 else ''}**, each of two loads at 50% and 85% "
      "of the capacity the simulator predicts; target: every metric's (TTFT p50 / p90, TPOT "
      "p50 / p90 at each load) prediction error within 15% as the median over the "
      f"{a.runs} runs. The device profile is calibrated once (`ced-sim-calibrate`, before the "
      "cluster starts), completed by one probe phase on the idle cluster before any load "
      "(path latency, the prefill's colocation slowdown and speed in the cluster, the decode "
      "loop's cost per step and per sequence), then frozen; every prediction below is written to this file before "
      "the first load starts, and nothing measured during a load changes any prediction "
      "(no per-load probe, no rescaling by the judged run).")
    w("")
    w(f"Model preset `{a.preset}`; prompts lognormal mean {a.input_mean}, outputs mean "
      f"{a.output_mean} (cv 0.5), Poisson arrivals. Cluster: `ced cluster` with 1 prefill and "
      f"1 decode worker on this machine ({a.cores} cores, {a.threads} OpenMP thread(s) per "
      "worker, passive waits), router `--replay-on auto`, K/V over UCX on loopback. "
      "Simulator: the same topology (two 1-\"GPU\" instances) on the device profile below, "
      "the router's policy library, the engine's block allocator for decode admission, 1 s "
      "load reports, max batch 64, and the two instances colocated (`--colocated`): each "
      "runs slower by the profile's measured slowdown over the part of its step that "
      "overlaps the other's.")
    return "\n".join(out)


def predict(a, preds):
    text = predictions_section(a, preds)
    open(a.predictions, "w").write(text + "\n")
    out = [header(a), "", text, "",
           "## Measured", "", "Pending: the loads run after this file is written."]
    open(a.out, "w").write("\n".join(out) + "\n")
    print(text)


def report(a, preds, meas_items):
    profile = open(a.profile).read()
    request_s = 0.0
    for line in profile.splitlines():
        parts = line.split("#")[0].split()
        if len(parts) == 2 and parts[0] == "request_s":
            request_s = float(parts[1])  # the last one (the probe's)
    by_key = {(p["run"], i % (len(preds) // a.runs)): p for i, p in enumerate(preds)}
    loads = sorted({k[1] for k in by_key})
    runs = list(range(1, a.runs + 1))
    # errors[kind][(load, metric index)][run] and the measured / predicted values.
    errors = {k: {} for k, _ in KINDS}
    values = {}
    detail, where, rejected = [], [], []
    for item in meas_items:
        run, li, mpath, before, after, dbefore, dafter = item.split(",")
        run, li = int(run), int(li)
        p = by_key[(run, li)]
        m = measured(mpath)
        for j, (metric, q) in enumerate(METRICS):
            mv = percentile(m[metric], q)
            for kind, _ in KINDS:
                pv = percentile(p["sims"][kind][metric], q)
                errors[kind].setdefault((li, j), {})[run] = err(pv, mv)
                if kind == "corrected":
                    values[(li, j, run)] = (mv, pv)
        s = p["sims"]["corrected"]
        if m["ok"] < m["issued"] or s["ok"] < s["requests"]:
            rejected.append(f"run {run} at {load_label(p)}: {m['issued'] - m['ok']} of "
                            f"{m['issued']} measured, {s['requests'] - s['ok']} of "
                            f"{s['requests']} predicted")
        dw = decode_worker(dbefore, dafter)
        dcell = f"{int(dw[0])} / {dw[1]:.2f} / {dw[2]:.2f}" if dw else "n/a"
        errs = ", ".join(f"{k} {v}" for k, v in sorted(m["errors"].items())) or "none"
        mpf = statistics.median(m["prefill"]) if m["prefill"] else float("nan")
        detail.append(
            f"| {run} | {load_label(p)} | {m['issued']} | {m['ok']} / {s['ok']} | "
            f"{mpf:.1f} / {statistics.median(s['prefill']):.1f} | "
            f"{percentile(m['queue'], 50):.1f} / {percentile(m['queue'], 90):.1f} | "
            f"{m['replays_on_decode']} | {dcell} | {p['batch']:.2f} | {errs} | "
            f"{before} -> {after} |")
        b = breakdown(mpath, p["csv"], request_s)
        pp = lambda k: f"{percentile(b[k], 50):.1f} / {percentile(b[k], 90):.1f}"
        mean = lambda k: statistics.mean(b[k]) if b[k] else float("nan")
        where.append(
            f"| {run} | {load_label(p)} | {pp('wait')} | {pp('busy')} | {pp('other')} | "
            f"{pp('swait')} | {pp('compute')} | {pp('scompute')} | {pp('after')} | "
            f"{mean('dttft'):+.1f} = {mean('dwait'):+.1f} {mean('dcompute'):+.1f} "
            f"{mean('dafter'):+.1f} | {b['stalls']} of {b['n']} ({b['at_idle']}) |")

    def med(d):
        v = [d[r] for r in runs if r in d]
        return statistics.median(v) if len(v) == len(runs) else float("nan")

    def pct(e, bold=False):
        mark = "**" if bold and not abs(e) <= TOLERANCE else ""
        return f"{mark}{100 * e:+.1f}%{mark}"

    out = [header(a), "", open(a.predictions).read().rstrip(), ""]
    w = out.append
    w(f"## Measured: every run, and the median over the {a.runs} runs")
    w("")
    w(f"Load average (1/5/15 min) at the start of the script: {a.load_start}; at the end: "
      f"{a.load_end} (this machine's 2 cores are shared with other work).")
    w("")
    verdict = {}
    for kind, title in KINDS:
        within = sum(1 for k in errors[kind] if abs(med(errors[kind][k])) <= TOLERANCE)
        verdict[kind] = (within, len(errors[kind]))
    cw, ct = verdict["corrected"]
    w(f"**Target (median error within {100 * TOLERANCE:.0f}% on every metric): "
      f"{'met' if cw == ct else 'not met'}** for the prediction judged ({cw} of {ct} median "
      f"errors within {100 * TOLERANCE:.0f}%). Calibrated only, no probe correction: "
      f"{verdict['calibrated'][0]} of {verdict['calibrated'][1]}. Not colocated: "
      f"{verdict['apart'][0]} of {verdict['apart'][1]}.")
    w("")
    if rejected:
        w("Requests that did not complete (see the errors in the detail below; the "
          "simulator refuses a request no decode instance has K/V room for, as the gateway "
          "does with RESOURCE_EXHAUSTED): " + "; ".join(rejected) + ". Both sides' "
          "percentiles are over their completed requests.")
        w("")
    w("### The prediction judged: calibrated + probe, colocated")
    w("")
    w("Per run: measured / predicted (ms), error = (predicted - measured) / measured.")
    w("")
    w("| load | metric | " + " | ".join(f"run {r}" for r in runs) + " | median error |")
    w("|---|---|" + "---|" * len(runs) + "---:|")
    for li in loads:
        p = by_key[(1, li)]
        for j, (metric, q) in enumerate(METRICS):
            cells = []
            for r in runs:
                if (li, j, r) in values:
                    mv, pv = values[(li, j, r)]
                    cells.append(f"{mv:.1f} / {pv:.1f} ({pct(errors['corrected'][(li, j)][r])})")
                else:
                    cells.append("n/a")
            w(f"| {100 * p['frac']:.0f}% | {metric.upper()} p{q} | " + " | ".join(cells) +
              f" | {pct(med(errors['corrected'][(li, j)]), True)} |")
    for kind, title in KINDS[1:]:
        w("")
        w(f"### Errors of the other predictions: {title}")
        w("")
        w("| load | metric | " + " | ".join(f"run {r}" for r in runs) + " | median error |")
        w("|---|---|" + "---:|" * len(runs) + "---:|")
        for li in loads:
            p = by_key[(1, li)]
            for j, (metric, q) in enumerate(METRICS):
                e = errors[kind][(li, j)]
                w(f"| {100 * p['frac']:.0f}% | {metric.upper()} p{q} | " +
                  " | ".join(pct(e[r]) if r in e else "n/a" for r in runs) +
                  f" | {pct(med(e), True)} |")
    w("")
    w("## Measured detail")
    w("")
    w("Per run and load: requests issued, completed (measured / predicted), the prefill "
      "worker's compute per request p50 (measured / predicted, ms), the wait before compute "
      "p50 / p90 (ms: gateway receipt to prefill start), replays placed on the decode worker, "
      "the decode worker's steps / mean step time (ms) / mean batch over the run (its "
      "`ced_decode_step_seconds` and `ced_decode_batch_size` histograms), the predicted mean "
      "batch, request errors, and the load average before -> after the run.")
    w("")
    w("| run | load | issued | completed | prefill compute p50 | wait p50 / p90 | replays on "
      "decode | decode steps / step ms / batch | predicted batch | errors | load average |")
    w("|---:|---|---:|---|---|---|---:|---|---:|---|---|")
    out.extend(detail)
    w("")
    w("## Where the TTFT goes")
    w("")
    w("Per request, then p50 / p90 over the requests (ms), against the prediction judged. "
      "Measured: *wait* from the gateway's receipt until the prefill compute starts (the final "
      "response's `queue_ms`), split into the part while the prefill worker was computing "
      "other prompts and the *rest*; *compute*, the prefill worker's; *after*, TTFT minus "
      "both. Simulated: wait = TTFT - prefill step - `request_s`. *Excess*: the mean over "
      "requests of measured minus predicted TTFT, = wait + compute + after excesses. "
      "*Stalls*: requests whose wait outside the prefill compute exceeded 10 ms (in "
      "parentheses, those whose stall ended within 5 ms of the decode worker going idle).")
    w("")
    w("| run | load | wait | of it, prefill busy | rest | simulated wait | compute | simulated "
      "compute | after | excess: TTFT = wait + compute + after | stalls (at decode idle) |")
    w("|---:|---|---|---|---|---|---|---|---|---|---|")
    out.extend(where)
    w("")
    w("## Device profile (frozen before the predictions)")
    w("")
    w("Measured by `ced-sim-calibrate` before the cluster started (the engine's GEMM rate and "
      "memory read bandwidth, each raised to what the engine's own prefill / decode reaches "
      "when higher; the excess of the engine's real prefill and decode steps over that "
      "roofline fitted as fixed + per-token and fixed + per-sequence costs; the colocation "
      "slowdowns of two engines on two threads of one process). The lines marked `probe:` "
      "come from the one probe phase on the idle cluster before any load: `request_s`, the "
      "median TTFT minus prefill compute of 16-token prompts sent one at a time; "
      "`prefill_colocated_slowdown` raised to the prefill worker's mean compute beside three "
      "concurrent decode streams over alone when higher (medians of three rounds); "
      "`prefill_scale`, the median compute of the eighteen prompts the prefill worker "
      "computed alone in those rounds over the simulator's prefill of the same prompts; "
      "`decode_step_s` plus the "
      "TPOT of ten mean-length prompts sent one at a time minus the simulator's for them "
      "(when positive); `decode_seq_s` plus the median over three rounds of the TPOT of "
      "four mean-length prompts sent at once (160 output tokens) minus the simulator's for "
      "them, over the decode worker's mean batch in that round minus one (and "
      "`decode_step_s` minus the same, so that batch 1 keeps the first probe's figure). "
      "*Calibrated only* uses the file as `ced-sim-calibrate` wrote it "
      f"(sha256 {hashlib.sha256(open(a.calibrated, 'rb').read()).hexdigest()[:16]}); the "
      f"file below has sha256 {hashlib.sha256(open(a.profile, 'rb').read()).hexdigest()[:16]}. "
      "WORK is the run's temporary folder.")
    w("")
    w("```")
    w(profile.rstrip())
    w("```")
    w("")
    w("Simulator command (PROFILE = the file above; the capacity run: `--colocated --seed 1 "
      "--rate 100 --requests 400`; the predictions: `--refuse-when-full`):")
    w("")
    w("```")
    w(f"ced-sim --preset {a.preset} --device-profile PROFILE --instances 2 --prefill-instances 1 "
      "--prefill-gpus 1 --decode-gpus 1 --ced-replay-on auto --heartbeat-ms 1000 "
      f"--max-batch 64 --input-mean {a.input_mean} --output-mean {a.output_mean} "
      "--ttft-slo-ms 1000 --tpot-slo-ms 50 --colocated --seed SEED --rate RATE --requests N")
    w("```")
    text = scrub("\n".join(out) + "\n", a.work)
    open(a.out, "w").write(text)
    print(text)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "capacity":
        print(f"{capacity(sys.argv[2]):.4f}")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["predict", "report"])
    for flag in ["out", "work", "command", "preset", "input-mean", "output-mean", "cores",
                 "threads", "capacity", "profile", "calibrated", "predictions", "probe-done"]:
        ap.add_argument("--" + flag, required=True)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--load-start", default="")
    ap.add_argument("--load-end", default="")
    ap.add_argument("--pred", action="append", default=[])
    ap.add_argument("--meas", action="append", default=[])
    a = ap.parse_args()
    preds = parse_preds(a.pred)
    if a.mode == "predict":
        predict(a, preds)
    else:
        report(a, preds, a.meas)


if __name__ == "__main__":
    main()
