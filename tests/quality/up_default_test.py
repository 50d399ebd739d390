"""`ced up` with no model flag serves the trained default model, and it speaks.

Starts `ced up --base-port 0 --metrics-base-port 0 --kv-format f32 --ready-file F` (no
--model, no --preset) as real processes on loopback, then asks the gateway's OpenAI
HTTP API for greedy completions of golden.json's prompts and checks:
  - GET /v1/models names the model `ced-pydocs` (the shipped folder, not a preset);
  - each completion's text equals the PyTorch model's greedy completion (golden.json),
    for replay on the prefill and on the decode worker (the cluster's router decides;
    both are asked through the ced.v1 `replay_on` hint of `ced client generate` too).
Exit 0 pass, 1 fail. Environment: CED_BINARY_DIR (bin/ced) or --ced PATH.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ced", default="")
    ap.add_argument("--golden", required=True, help="golden.json of the shipped model")
    args = ap.parse_args()
    ced = args.ced or os.path.join(os.environ["CED_BINARY_DIR"], "bin", "ced")
    with open(args.golden) as f:
        golden = json.load(f)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        env = dict(os.environ, HOME=tmp)  # no cached preset can stand in for the default
        env.pop("CED_DEFAULT_MODEL", None)
        log = open(os.path.join(tmp, "up.log"), "w")
        proc = subprocess.Popen([ced, "up", "--base-port", "0", "--metrics-base-port", "0",
                                 "--kv-format", "f32", "--ready-file", ready],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.time() + 120
            while not os.path.exists(ready) and proc.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            if not os.path.exists(ready):
                log.flush()
                print(open(os.path.join(tmp, "up.log")).read())
                print("FAIL: ced up did not become ready")
                return 1
            lines = open(ready).read().split("\n")
            gw = next(l for l in lines if l.startswith("gateway"))
            http = next(p[5:] for p in gw.split() if p.startswith("http="))
            grpc = next(p[5:] for p in gw.split() if p.startswith("grpc="))
            with urllib.request.urlopen(f"http://{http}/v1/models", timeout=30) as resp:
                models = json.loads(resp.read())
            names = [m["id"] for m in models["data"]]
            if names != ["ced-pydocs"]:
                print(f"FAIL: /v1/models lists {names}, want ['ced-pydocs']")
                failures += 1
            for case in golden["cases"]:
                want = case["completion"]
                n = len(case["steps"])
                got = post(f"http://{http}/v1/completions",
                           {"model": "ced-pydocs", "prompt": case["text"], "max_tokens": n,
                            "temperature": 0, "ignore_eos": True})
                text = got["choices"][0]["text"]
                ok = text == want
                failures += 0 if ok else 1
                print(f"{'ok  ' if ok else 'FAIL'} http  {case['text'][-30:]!r} -> {text!r}"
                      + ("" if ok else f" (golden {want!r})"))
                for placement in ("prefill", "decode"):
                    out = subprocess.run(
                        [ced, "client", "generate", "--gateway", grpc, "--prompt", case["text"],
                         "--max-tokens", str(n), "--replay-on", placement, "--ignore-eos"], capture_output=True, text=True, timeout=60)
                    ok = out.returncode == 0 and out.stdout.rstrip("\n") == want
                    failures += 0 if ok else 1
                    print(f"{'ok  ' if ok else 'FAIL'} grpc replay_on={placement}: "
                          f"{out.stdout.rstrip()!r}" + ("" if ok else f" {out.stderr}"))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("PASS" if not failures else f"FAIL ({failures})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
