#!/usr/bin/env bash
# Checks the object code of the kernel variants (kernels/cpu/variant.h):
#  - every symbol a variant object defines for others (global or weak) is
#    either in its own namespace (ced::kernels::<variant>) or compiled for the
#    baseline: the linker keeps one copy of a weak symbol (e.g. an
#    std::vector member) for the whole program, and an AVX-512 copy would
#    crash every CPU without AVX-512;
#  - baseline objects (the dispatcher, and the generic variant) contain no
#    VEX/EVEX instruction at all, when the build is portable.
# Usage: variant_isolation_test.sh --baseline OBJ... --variant NAME OBJ... [--variant NAME OBJ...]
set -euo pipefail
fail=0
mode=""
variant=""
declare -a baseline=()
declare -A variant_objs=()
# CTest hands each generator-expression list over as one argument: split at ';'.
declare -a args=()
for a in "$@"; do
  IFS=';' read -r -a parts <<<"$a"
  args+=("${parts[@]}")
done
for arg in "${args[@]}"; do
  if [[ $arg != --* && $mode != variant_name && ! -f $arg ]]; then
    echo "FAIL: no object file $arg"
    exit 1
  fi
  case "$arg" in
    --baseline) mode=baseline ;;
    --variant) mode=variant_name ;;
    *)
      if [[ $mode == baseline ]]; then
        baseline+=("$arg")
      elif [[ $mode == variant_name ]]; then
        variant=$arg
        mode=variant
      else
        variant_objs[$variant]+="$arg "
      fi
      ;;
  esac
done
vex='^\s*[0-9a-f]+:\s+(v[a-z0-9]+|kmov[a-z]*|kor[a-z]*|kand[a-z]*)\s'
checked=0
for obj in "${baseline[@]}"; do
  dis=$(objdump -d --no-show-raw-insn "$obj")
  n=$(grep -cE "$vex" <<<"$dis" || true)
  checked=$((checked + 1))
  if [[ $n -ne 0 ]]; then
    echo "FAIL: $obj (baseline) has $n VEX/EVEX instructions:"
    objdump -d --no-show-raw-insn "$obj" | grep -E "$vex" | head -5
    fail=1
  fi
done
for v in "${!variant_objs[@]}"; do
  for obj in ${variant_objs[$v]}; do
    # Mangled namespace prefix of the variant: _ZN3ced7kernels<len><name>
    ns="3ced7kernels${#v}${v}"
    while read -r _ kind sym; do
      checked=$((checked + 1))
      if [[ $sym == *"$ns"* ]]; then continue; fi
      if [[ $kind == T ]]; then
        echo "FAIL: $obj defines global $sym outside ced::kernels::$v"
        fail=1
        continue
      fi
      dis=$(objdump -d --no-show-raw-insn --disassemble="$sym" "$obj")
      n=$(grep -cE "$vex" <<<"$dis" || true)
      if [[ $n -ne 0 ]]; then
        echo "FAIL: weak symbol $(echo "$sym" | c++filt) in $obj uses $v instructions ($n)"
        fail=1
      fi
    done < <(nm "$obj" | awk '$2 ~ /^[TWV]$/ {print $1, $2, $3}')
  done
done
if [[ $checked -eq 0 ]]; then
  echo "FAIL: nothing checked (no objects given?)"
  exit 1
fi
if [[ $fail -ne 0 ]]; then exit 1; fi
echo "ok: $checked objects and symbols checked"
