#!/usr/bin/env bash
# Makes TLS material for tests and local trials (never for production):
#
#   scripts/make_test_ca.sh OUTDIR [EXTRA_SAN...]
#
# OUTDIR/
#   ca.crt, ca.key            a test CA
#   server.crt, server.key    signed by the CA; SANs localhost, ced-internal (the
#                             --tls-server-name of deploy/), 127.0.0.1, ::1 and
#                             every EXTRA_SAN (DNS name, *.wildcard or IP), usable
#                             as server and as client certificate (the identity
#                             every ced service presents)
#   client.crt, client.key    signed by the CA; client certificate only
#   expired.crt, expired.key  signed by the CA, same SANs, validity ended in 2001
#   other-ca.crt              a second CA nobody trusts ...
#   untrusted.crt, untrusted.key  ... and a server/client cert it signed (same SANs)
#
# Needs only openssl (apt: openssl). Keys are unencrypted EC P-256.
set -euo pipefail

out=${1:?usage: make_test_ca.sh OUTDIR [EXTRA_SAN...]}
shift
mkdir -p "$out"
cd "$out"

san="DNS:localhost,DNS:ced-internal,IP:127.0.0.1,IP:::1"
for extra in "$@"; do
  if [[ "$extra" =~ ^[0-9.]+$ || "$extra" == *:* ]]; then
    san+=",IP:${extra}"
  else
    san+=",DNS:${extra}"
  fi
done

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

make_ca() {  # NAME SUBJECT
  newkey "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$1.crt"
}

# openssl ca (not x509 -req) so that validity dates can be set: the expired cert.
ca_config() {  # CA_NAME
  mkdir -p "db-$1"
  : >"db-$1/index.txt"
  [[ -f "db-$1/serial" ]] || echo 1000 >"db-$1/serial"
  cat >"db-$1/ca.cnf" <<EOF
[ca]
default_ca = test_ca
[test_ca]
dir = db-$1
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
certificate = $1.crt
private_key = $1.key
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
commonName = supplied
[server_client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = ${san}
[client_only]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
EOF
}

sign() {  # CA_NAME NAME CN EXTENSIONS [START END]
  newkey "$2.key"
  openssl req -new -key "$2.key" -subj "/CN=$3" -out "$2.csr"
  # Valid from an hour ago: no surprise from a clock a little behind.
  local dates=(-startdate "$(date -u -d '-1 hour' +%Y%m%d%H%M%SZ)" -days 825)
  if (($# > 4)); then dates=(-startdate "$5" -enddate "$6"); fi
  openssl ca -batch -notext -config "db-$1/ca.cnf" -extensions "$4" "${dates[@]}" \
    -in "$2.csr" -out "$2.crt" 2>/dev/null
  rm -f "$2.csr"
}

make_ca ca "/CN=ced test CA"
ca_config ca
sign ca server "ced-internal" server_client
sign ca client "ced-client" client_only
sign ca expired "ced-expired" server_client 20000101000000Z 20010101000000Z

make_ca other-ca "/CN=ced untrusted CA"
ca_config other-ca
sign other-ca untrusted "ced-untrusted" server_client

rm -rf db-ca db-other-ca other-ca.key
chmod 600 ./*.key
echo "test CA and certificates written to $(pwd)"
