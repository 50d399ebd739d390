#!/usr/bin/env python3
"""Deploy files agree with the `ced` binary: every flag they pass to a role (as
an argument or as CED_FLAG_<NAME>) exists in `ced serve --role=ROLE --help`,
and every port they use is the role's default port.

Flags come from the built binary ($CED_BINARY_DIR/bin/ced) when it has the
serve roles, else from the FlagSpec tables in the sources.
"""
import os
import re
import subprocess
import sys

SRC = os.environ.get("CED_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(os.environ.get("CED_BINARY_DIR", os.path.join(SRC, "build")), "bin", "ced")
ROLES = ["router", "gateway", "prefill", "decode"]
# Flags the entrypoint adds on its own (deploy/docker/entrypoint.sh).
ENTRYPOINT_ADDS = {"prefill": {"advertise-address", "worker-id"},
                   "decode": {"advertise-address", "advertise-kv-address", "worker-id"}}
SPEC = re.compile(r'\{"([a-z0-9-]+)",\s*"([^"]*)"')


def read(rel):
  with open(os.path.join(SRC, rel)) as f:
    return f.read()


def flags_from_binary(role):
  if not os.access(BIN, os.X_OK):
    return None
  r = subprocess.run([BIN, "serve", "--role=" + role, "--help"], capture_output=True, text=True)
  if r.returncode != 0:
    return None
  out = {}
  for m in re.finditer(r"^  --([a-z0-9-]+)(?:=(\S*))?", r.stdout, re.M):
    out[m.group(1)] = (m.group(2) or "").strip('"')
  return out


def flags_from_source(role):
  if role == "router":
    text = read("services/router/router_command.cc")
  elif role == "gateway":
    text = read("services/gateway/gateway_command.cc")
  else:
    src = read("services/cli/worker_commands.cc")
    engine = src[src.index("EngineFlags()"):src.index("absl::Status FillEngine")]
    start = src.index("int ServeDecode" if role == "decode" else "int ServePrefill")
    end = src.index("int ServePrefill" if role == "decode" else "}  // namespace", start)
    text = engine + src[start:end]
  # TLS / auth flags every role takes (`ced serve` handles them for all roles).
  text += read("services/cli/security_flags.cc")
  return {m.group(1): m.group(2) for m in SPEC.finditer(text)}


def split_compose_services(text):
  """{service: block text} of the top-level services of a compose file."""
  body = text.split("\nservices:\n", 1)[1].split("\nnetworks:", 1)[0]
  parts = re.split(r"^  ([a-z][a-z0-9-]*):\s*$", body, flags=re.M)
  return dict(zip(parts[1::2], parts[2::2]))


def used_flags(block):
  """(flags, {flag: value}) a compose/k8s block passes: args and CED_FLAG_ env."""
  flags = {}
  for m in re.finditer(r'["\s]--([a-z0-9-]+)(?:[="\s,]+([^"\s,\]]*))?', block):
    flags[m.group(1)] = m.group(2) or ""
  for m in re.finditer(r"CED_FLAG_([A-Z0-9_]+)", block):
    flags.setdefault(m.group(1).lower().replace("_", "-"), "")
  x_anchor = re.search(r"<<: \*worker-env", block)
  return flags, x_anchor is not None


def main():
  errors, notes = [], []
  specs = {}
  for role in ROLES:
    f = flags_from_binary(role)
    if f is None:
      notes.append(f"{role}: `ced serve` not built here; flags read from the sources")
      f = flags_from_source(role)
    if "listen" not in f:
      errors.append(f"{role}: could not read its flags")
    specs[role] = f

  def check(where, role, flags):
    for name, value in flags.items():
      if name == "role":
        continue
      if name not in specs[role]:
        errors.append(f"{where}: --{name} is not a flag of `ced serve --role={role}`")
        continue
      if name in ("listen", "metrics-listen", "kv-listen") and value:
        want = specs[role][name].rsplit(":", 1)[-1]
        if value.rsplit(":", 1)[-1] != want:
          errors.append(f"{where}: --{name}={value} does not use the default port {want}")

  # docker-compose: flags in each service's command plus the shared worker env.
  compose = read("deploy/compose/docker-compose.yml")
  worker_env = re.search(r"x-worker-env: &worker-env\n((?:  .*\n)+)", compose).group(1)
  for svc, block in split_compose_services(compose).items():
    if svc not in ROLES:
      continue
    flags, has_env = used_flags(block)
    if has_env:
      flags.update(used_flags(worker_env)[0])
    if svc in ENTRYPOINT_ADDS and "CED_ADVERTISE_HOST" in worker_env:
      flags.update({n: "" for n in ENTRYPOINT_ADDS[svc]})
    check(f"docker-compose.yml {svc}", svc, flags)
  gpu = read("deploy/compose/docker-compose.gpu.yml")
  for svc, block in split_compose_services(gpu).items():
    if svc in ROLES:
      check(f"docker-compose.gpu.yml {svc}", svc, used_flags(block)[0])

  # Kubernetes: each Deployment file and the GPU patch.
  for role in ROLES:
    block = read(f"deploy/k8s/base/deployment-{role}.yaml")
    container = block.split("      containers:", 1)[1]
    check(f"k8s deployment-{role}.yaml", role, used_flags(container)[0])
    for port_flag, label in (("listen", "grpc"), ("metrics-listen", "metrics"), ("kv-listen", "kv")):
      if port_flag not in specs[role]:
        continue
      want = specs[role][port_flag].rsplit(":", 1)[-1]
      m = re.search(rf"- name: {label}\n\s+containerPort: (\d+)", container)
      if not m or m.group(1) != want:
        errors.append(f"k8s deployment-{role}.yaml: containerPort {label} is not {want}")
  for doc in read("deploy/k8s/overlays/gpu/gpu-workers.yaml").split("\n---\n"):
    role = re.search(r"name: ced-([a-z]+)", doc).group(1)
    check(f"k8s gpu-workers.yaml {role}", role, used_flags(doc)[0])

  # Images expose, and Prometheus scrapes, the default ports.
  defaults = {(r, n): specs[r][n].rsplit(":", 1)[-1]
              for r in ROLES for n in ("listen", "metrics-listen", "kv-listen") if n in specs[r]}
  for dockerfile in ("deploy/docker/Dockerfile.cpu", "deploy/docker/Dockerfile.cuda"):
    exposed = set(re.search(r"^EXPOSE (.*)$", read(dockerfile), re.M).group(1).split())
    for (role, name), port in defaults.items():
      if port not in exposed:
        errors.append(f"{dockerfile}: EXPOSE lacks {port} ({role} --{name})")
  prom = read("deploy/prometheus/prometheus.yml")
  for role in ROLES:
    port = defaults[(role, "metrics-listen")]
    if not re.search(rf'(\b{role}:{port}\b|names: \["{role}"\]\s+type: A\s+port: {port}\b)', prom):
      errors.append(f"prometheus.yml: {role} is not scraped on its metrics port {port}")

  # The model-making step and the entrypoint use real flags.
  if os.access(BIN, os.X_OK):
    r = subprocess.run([BIN, "model", "make", "--help"], capture_output=True, text=True)
    for name in ("preset", "seed", "out"):
      if f"--{name}" not in r.stdout:
        errors.append(f"`ced model make` has no --{name}")

  for n in notes:
    print("NOTE:", n)
  for e in errors:
    print("FAIL:", e)
  print(f"{0 if errors else 1} passed, {1 if errors else 0} failed")
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
