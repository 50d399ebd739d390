"""The engine on the shipped default model against the PyTorch model it was trained as.

bench/quality/golden.py wrote golden.json beside the weights: for fixed prompts, the
PyTorch model's (float32, on the same bf16 weights) greedy tokens, its 8 best logits and
the logits of 32 fixed ids at every step, with exact replay (the full forward) and with
bounded replay (decoder windows clipped at s = N - R). Per case this test checks:
  - tokenizer: `ced tokenize --add-bos` of the prompt text gives the ids the model was
    fed (the Python BPE encoder that made the training data, bench/quality/bpe.py);
  - tokens: `ced generate --prompt-ids ... --temperature 0` emits the same greedy tokens
    (a step whose golden top-2 margin is under the tolerance would be a near-tie; the
    shipped cases have none, golden.json records each case's smallest margin);
  - logits: the served logits at the fixed ids and at the 8 best ids within
    RTOL * max(1, max |golden logit|) of the golden ones;
  - text: `ced generate --prompt TEXT` (the model's own tokenizer) prints the golden
    completion.

Tolerance: both sides compute in float32 from the same bf16 weights with the K/V cache
in f32; they differ only by summation order. Measured on the shipped model: see RTOL.
Exit 0 pass, 1 fail. Environment: CED_BINARY_DIR (bin/ced) or --ced PATH.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Measured max |engine - torch| / max(1, max|logit|) on the shipped model, every case:
# 1.2e-6 (avx512 kernels), 1.1e-6 (avx2), 1.1e-6 (generic); bench/results/quality.md,
# "Setup". 1e-4 is an ~80x margin and far below the effect of a real fault: a golden
# logit moved by 0.01 fails (relative error 6.4e-4), and clipping a decoder window
# wrongly moves logits by ~1e-1.
RTOL = 1e-4


def run(cmd, text_input=None):
    res = subprocess.run(cmd, input=text_input, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr}")
    return res.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ced", default="")
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    ced = args.ced or os.path.join(os.environ["CED_BINARY_DIR"], "bin", "ced")
    golden_path = os.path.join(args.model, "golden.json")
    with open(golden_path) as f:
        golden = json.load(f)
    fixed = golden["fixed_ids"]
    failures = 0
    worst = 0.0
    if not golden["cases"]:
        print("FAIL: golden.json has no cases", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for n, case in enumerate(golden["cases"]):
            name = f"case {n} ({case['replay']}, N={len(case['ids'])})"
            ids = json.loads(run([ced, "tokenize", "--tokenizer", args.model, "--json",
                                  "--add-bos", "--text", case["text"]]))
            if ids != case["ids"]:
                print(f"FAIL {name}: tokenizer gave {ids[:12]}..., golden {case['ids'][:12]}...")
                failures += 1
            dump = os.path.join(tmp, f"{n}.json")
            steps = case["steps"]
            run([ced, "generate", "--model", args.model, "--prompt-ids",
                 ",".join(map(str, case["ids"])), "--max-tokens", str(len(steps)),
                 "--temperature", "0", "--replay", case["replay"], "--kv-format", "f32",
                 "--ignore-eos", "--quiet", "--dump-logits", dump])
            with open(dump) as f:
                got = json.load(f)
            want_tokens = [s["token"] for s in steps]
            if got["tokens"] != want_tokens:
                print(f"FAIL {name}: tokens {got['tokens']} != golden {want_tokens}")
                failures += 1
            if len(got["logits"]) != len(steps):
                print(f"FAIL {name}: {len(got['logits'])} logit rows for {len(steps)} steps")
                failures += 1
                continue
            for i, s in enumerate(steps):
                row = got["logits"][i]
                scale = max(1.0, max(abs(v) for _, v in s["top"]))
                pairs = list(zip(fixed, s["logits"])) + [(t, v) for t, v in s["top"]]
                err = max(abs(row[t] - v) for t, v in pairs) / scale
                worst = max(worst, err)
                if err > RTOL:
                    print(f"FAIL {name} step {i}: relative logit error {err:.3g} > {RTOL}")
                    failures += 1
            text = run([ced, "generate", "--model", args.model, "--prompt", case["text"],
                        "--max-tokens", str(len(steps)), "--temperature", "0", "--replay",
                        case["replay"], "--kv-format", "f32", "--ignore-eos", "--quiet"])
            if text.rstrip("\n") != case["completion"].rstrip("\n"):
                print(f"FAIL {name}: text {text!r} != golden {case['completion']!r}")
                failures += 1
            print(f"{name}: {len(steps)} steps, min golden margin {case['min_margin']:.3f}, "
                  f"completion {case['completion']!r}")
    print(f"max relative logit error {worst:.3g} (tolerance {RTOL}); "
          f"{'FAIL' if failures else 'PASS'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
