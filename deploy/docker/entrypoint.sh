#!/usr/bin/env bash
# ced container entrypoint: one image, every role, every setting by flag or
# environment variable.
#
#   ced-entrypoint ROLE [FLAGS...]    ROLE = gateway | router | prefill | decode
#                                     (or set CED_ROLE and pass only flags)
#   ced-entrypoint healthcheck PORT   exit 0 when http://127.0.0.1:PORT/healthz
#                                     answers 200 (container healthchecks; the
#                                     image has no curl)
#   ced-entrypoint model make ...     any other ced command runs as is
#
# Environment:
#   CED_ROLE                role when the first argument is not one
#   CED_FLAG_<NAME>=VALUE   becomes --<name>=VALUE for the serve roles (NAME in
#                           upper case, '_' for '-'): CED_FLAG_KV_CACHE_MB=512
#                           -> --kv-cache-mb=512. Flags on the command line win.
#   CED_ADVERTISE_HOST      prefill/decode: the host (name or IP) to register
#                           with the router; "auto" = this container's address.
#                           Adds --advertise-address=HOST:<listen port> (and for
#                           decode --advertise-kv-address=HOST:<kv port>) unless
#                           those flags are given.
#   CED_WORKER_ID_FROM_HOSTNAME=1  prefill/decode: --worker-id=$(hostname) unless
#                           given, so replicas started with --scale stay unique.
#   CED_TLS_CERT, CED_TLS_KEY, CED_TLS_CA, CED_TLS_SERVER_NAME, CED_HEALTH_LISTEN,
#   CED_AUTH_TOKENS(_FILE)  read by `ced serve` itself (TLS / tokens; see
#                           deploy/README.md "TLS and tokens"): paths to mounted
#                           secrets, never files in the image.
set -euo pipefail

CED_BIN=${CED_BIN:-/usr/local/bin/ced}

if [[ "${1:-}" == healthcheck ]]; then
  port=${2:?usage: ced-entrypoint healthcheck PORT}
  exec 3<>"/dev/tcp/127.0.0.1/${port}"
  printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  read -r -t 5 _ status _ <&3
  [[ "$status" == 200 ]]
  exit
fi

role=${CED_ROLE:-}
case "${1:-}" in
  gateway|router|prefill|decode) role=$1; shift ;;
esac
if [[ -z "$role" ]]; then
  exec "$CED_BIN" "$@"
fi

args=()
# Settings from the environment first: later flags override earlier ones.
while IFS='=' read -r name value; do
  [[ "$name" == CED_FLAG_* ]] || continue
  flag=${name#CED_FLAG_}
  flag=${flag,,}
  args+=("--${flag//_/-}=${value}")
done < <(env | LC_ALL=C sort)
args+=("$@")

# The value the serve command will see for --NAME (last one wins), else $2.
flag_value() {
  local want=$1 result=$2 i=0 a
  while ((i < ${#args[@]})); do
    a=${args[i]}
    if [[ "$a" == "--$want="* ]]; then
      result=${a#--"$want"=}
    elif [[ "$a" == "--$want" && $((i + 1)) -lt ${#args[@]} ]]; then
      i=$((i + 1))
      result=${args[i]}
    fi
    i=$((i + 1))
  done
  printf '%s' "$result"
}

has_flag() {
  local a
  for a in "${args[@]}"; do
    [[ "$a" == "--$1" || "$a" == "--$1="* ]] && return 0
  done
  return 1
}

if [[ "$role" == prefill || "$role" == decode ]]; then
  if [[ -n "${CED_ADVERTISE_HOST:-}" ]]; then
    host=$CED_ADVERTISE_HOST
    if [[ "$host" == auto ]]; then
      host=$(getent hosts "$(hostname)" | awk '{print $1; exit}')
      [[ -n "$host" ]] || { echo "ced-entrypoint: cannot resolve $(hostname)" >&2; exit 2; }
    fi
    if [[ "$role" == prefill ]]; then
      listen=$(flag_value listen 127.0.0.1:50060)
    else
      listen=$(flag_value listen 127.0.0.1:50070)
      if ! has_flag advertise-kv-address; then
        kv=$(flag_value kv-listen 127.0.0.1:50080)
        args+=("--advertise-kv-address=${host}:${kv##*:}")
      fi
    fi
    has_flag advertise-address || args+=("--advertise-address=${host}:${listen##*:}")
  fi
  if [[ "${CED_WORKER_ID_FROM_HOSTNAME:-0}" == 1 ]] && ! has_flag worker-id; then
    args+=("--worker-id=$(hostname)")
  fi
fi

exec "$CED_BIN" serve "--role=${role}" "${args[@]}"
