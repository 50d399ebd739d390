#!/usr/bin/env bash
# Installs everything ced-serve needs to build, test and run on Debian 12.
# Idempotent: packages already present are skipped without touching apt.
# Run as root (or with sudo available). Set CED_WITH_PROMETHEUS=0 to skip the
# Prometheus server (only the integration tests need it).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenblas-dev
  # oneDNN: only for the BLAS comparison benchmark (bench/blas).
  libdnnl-dev
  libabsl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libucx-dev ucx-utils
  libcivetweb-dev
  # The gateway's OpenAI-compatible HTTP API (built with OpenSSL for TLS).
  libcpp-httplib-dev
  nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 curl
  # TLS: OpenSSL for the services' certificate checks and scripts/make_test_ca.sh.
  libssl-dev openssl
  # A second gRPC implementation for the gateway's client tests (Debian's python3).
  python3-grpcio python3-protobuf
  # The independent NumPy reference forward (tests/reference), run by /usr/bin/python3.
  python3-numpy
  # Tokenizers (engine/tokenizer): Oniguruma runs tokenizer.json's Split regexes
  # verbatim; utf8proc gives NFC. Python's Jinja2 is the reference the chat
  # template engine is checked against (tests/chat).
  libonig-dev libutf8proc-dev python3-jinja2
  # The shared KV tier (services/kv_store): hiredis to talk to Redis, and
  # redis-server for `ced cluster --kv-store local` and the tier's tests.
  libhiredis-dev redis-server
  # libFuzzer + ASan/UBSan runtimes for tests/fuzz (run_fuzzers.sh builds with clang++).
  clang libclang-rt-14-dev
)
if [[ "${CED_WITH_PROMETHEUS:-1}" == "1" ]]; then
  PACKAGES+=(prometheus)
fi
# Deploy checks (tests/deploy): compose validation, the consistency test,
# kubectl for `kubectl kustomize` (Debian 12's kubernetes-client, unless a
# kubectl is already installed; deploy/k8s keeps to syntax its kustomize v2
# reads), and node/npm for the Kubernetes schema validator.
PACKAGES+=(docker-compose python3)
if ! command -v kubectl >/dev/null; then
  PACKAGES+=(kubernetes-client)
fi
# The compose-in-network-namespaces test (tests/deploy): dnsmasq stands in for
# Docker's embedded DNS (service names, one A record per replica).
PACKAGES+=(dnsmasq-base)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

install_node_packages() {
  # The JavaScript references and clients the tests run against (reference
  # tokenizer, the official openai client, grpc-js), pinned by
  # tests/node/package-lock.json; installed once per checkout.
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/node"
  if [[ -f "$dir/package-lock.json" && ! -f "$dir/node_modules/.package-lock.json" ]] &&
     command -v npm >/dev/null; then
    echo "[install] npm packages for the tests (tests/node)" >&2
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
  fi
}

if ((${#missing[@]} == 0)); then
  install_node_packages
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi
echo "[install] installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
install_node_packages
