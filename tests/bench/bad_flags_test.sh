#!/usr/bin/env bash
# Bad input to the CPU-variant benches is refused with the flag or variable
# named, before anything is measured.
# Usage: bad_flags_test.sh ENGINE_BENCH BLAS_COMPARE|"" GATEWAY_TTFT_SCRIPT TOKENIZER_BENCH|""
#                          ATTENTION_BENCH SESSION_TURNS_BENCH SERVICES_BENCH
set -u
engine=$1 blas=$2 gateway=$3 tokenizer=${4:-} attention=${5:?attention_bench}
turns=${6:?session_turns_bench} services=${7:?ced_services_bench}
fail=0
# expect CODE PATTERN -- COMMAND...
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output: $out"
    fail=1
  else
    echo "ok: $* -> exit $rc: $(grep -F -- "$pattern" <<<"$out" | head -1)"
  fi
}
expect 1 "--variants must be all or active" -- "$engine" --variants=some
expect 1 "--peers must be auto, on or off" -- "$engine" --peers=maybe
expect 1 "--ced_model and --dec_model go together" -- "$engine" --ced_model=/nonexistent
expect 2 "CED_CPU_ISA=avx3: unknown kernel variant" -- env CED_CPU_ISA=avx3 "$engine"
expect 2 "CED_CPU_PREFETCH=t9: unknown prefetch hint" -- env CED_CPU_PREFETCH=t9 "$engine"
expect 2 "CED_CPU_ISA=avx512: this CPU cannot run the avx512 kernels" -- \
  env CED_CPU_HIDE=avx512 CED_CPU_ISA=avx512 "$engine"
if [[ -n $blas ]]; then
  expect 2 "CED_CPU_ISA=avx3: unknown kernel variant" -- env CED_CPU_ISA=avx3 "$blas"
  expect 2 "--variants=avx3: expected a comma list of variants this CPU supports" -- \
    "$blas" --variants=avx3
  expect 2 "--shapes=1x2: expected NxINxOUT[,NxINxOUT...]" -- "$blas" --shapes=1x2
  expect 2 "--shapes=0x2x2: expected NxINxOUT[,NxINxOUT...]" -- "$blas" --shapes=0x2x2
  expect 2 "unknown flag --bogus" -- "$blas" --bogus
fi
if [[ -n $tokenizer ]]; then
  expect 2 "--corpus and --tokenizer are required" -- "$tokenizer" --corpus x
  expect 2 "--passes and --reference-passes at least 1" -- \
    "$tokenizer" --corpus x --tokenizer y --passes=0
  expect 2 "--passes: bad value 'x' (expected an integer)" -- "$tokenizer" --passes=x
  expect 2 "unexpected argument 'stray'" -- "$tokenizer" stray
fi
expect 2 "CED_CPU_ISA=avx3: unknown kernel variant" -- env CED_CPU_ISA=avx3 "$attention"
expect 2 "--variants: unknown kernel variant 'neon'" -- "$attention" --variants=neon
expect 2 "--variants: empty item in 'avx2,,generic'" -- "$attention" --variants=avx2,,generic
expect 2 "--variants: this CPU does not support 'avx512'" -- \
  env CED_CPU_HIDE=avx512 "$attention" --variants=avx512
expect 2 "--contexts: '1x' is not a positive integer" -- "$attention" --contexts=1x
expect 2 "--rows: must be >= 1" -- "$attention" --rows=0
expect 2 "--kv-format: expected f32, bf16, fp8_e4m3 or fp4_e2m1, got 'f16'" -- \
  "$attention" --kv-format=f16
expect 2 "unknown flag --bogus" -- "$attention" --bogus
expect 2 "unknown argument --bogus" -- bash "$gateway" --bogus
expect 2 "--turns, --tool, --reps and --chunk must be >= 1, --first >= 2" -- "$turns" --turns=0
expect 2 "--turns, --tool, --reps and --chunk must be >= 1, --first >= 2" -- "$turns" --first=1
expect 2 "--threads: must be >= 0" -- "$turns" --threads=-1
expect 2 "unknown flag --bogus" -- "$turns" --bogus
expect 2 "past tiny's max_position" -- "$turns" --presets=tiny --first=100000
expect 2 "CED_CPU_ISA=avx3: unknown kernel variant" -- env CED_CPU_ISA=avx3 "$turns"
# The services bench refuses before it starts anything (and writes no report:
# --markdown / --json point into a folder that the test checks stays empty).
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
for flag in threads mib_per_sample transport_reps ttft_prompt_tokens ttft_max_tokens ttft_reps \
  gateway_prompt_tokens gateway_max_tokens gateway_reps stream_tokens throughput_reps \
  kv_short_prompt kv_long_prompt; do
  expect 1 "--$flag=0: must be at least 1" -- "$services" --$flag=0 \
    --markdown="$reports/r.md" --json="$reports/r.json"
done
expect 1 "--sections: unknown section 'bogus'" -- "$services" --sections=bogus
touch "$reports/a_file"
expect 1 "--scratch_dir: $reports/a_file/x cannot be made a folder" -- "$services" \
  --sections=kvbytes --scratch_dir="$reports/a_file/x" --markdown="$reports/r.md" \
  --json="$reports/r.json"
expect 2 "unknown flag --bogus" -- "$services" --bogus
expect 1 "--json: cannot write '$reports': it is a folder" -- "$services" --json="$reports" \
  --markdown="$reports/r.md"
if [[ -e $reports/r.md || -e $reports/r.json ]]; then
  echo "FAIL: a refused ced_services_bench wrote a report"
  fail=1
fi
# A short session on tiny: turn 2 reuses the first prompt's 2 full blocks
# (32 tokens) from blocks, all 40 held.
expect 0 "| 2 | 86 | 32 / 40 | " -- "$turns" --presets=tiny --turns=3 --first=40 --tool=30 --reps=1
exit $fail
