#!/usr/bin/python3
"""Runs the docker-compose topology without a container engine.

Every replica of every compose service gets its own network namespace
(`ip netns`), a veth pair into a private bridge and its own address; each is
started with the command, environment, user, healthcheck and depends_on order
the compose file gives it, through the image's entrypoint
(deploy/docker/entrypoint.sh). Name resolution works as on a compose network:
a dnsmasq in its own namespace plays Docker's embedded DNS (one A record per
replica under the service name, plus each container's hostname), and each
namespace gets its own /etc/hosts and /etc/resolv.conf (`ip netns exec`
bind-mounts /etc/netns/NS/*) and its own hostname (UTS namespace).

What differs from Docker: no images or filesystem isolation. The image's files
are mapped to this tree (/usr/local/bin/ced-entrypoint -> the entrypoint
script, /usr/local/bin/ced -> --ced), volumes become host folders and their
container paths are rewritten in commands and environment; healthchecks are
polled more often than `interval` says so the run stays short.

  compose_netns.py --ced build/bin/ced --scale prefill=2 --scale decode=2 --check
  compose_netns.py --ced build/bin/ced --hold        # keep it up until Ctrl-C

--check: from a client namespace, asks the gateway (by address) for model
info, generates greedy completions and compares them with `ced generate` run
locally on the same model, checks that every worker registered with the router
under its own namespace address, that K/V crossed namespaces over UCX, and that
Prometheus reports every scrape target up. Exit 0 = all good, 1 = a check
failed, 77 = cannot run here (not root, no `ip netns`, a tool missing).
Everything (processes, namespaces, /etc/netns entries, temp files) is removed
on exit; namespaces of an earlier run that was killed are removed at start.
"""

import argparse
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

SKIP = 77
NS_PREFIX = "cednet"  # namespaces are named cednet<pid>-<what>
SUBNET = "10.89.0"  # private: the bridge lives in its own namespace
DNS_IP = SUBNET + ".2"
CLIENT_IP = SUBNET + ".3"
PROMETHEUS_IMAGES = ("prom/prometheus", "quay.io/prometheus/prometheus")
PROMETHEUS_UID = 65534  # the prom/prometheus image runs as nobody
REDIS_IMAGES = ("redis:", "redis/", "docker.io/library/redis:")


class Failure(Exception):
  pass


class Skip(Exception):
  pass


_T0 = time.monotonic()


def log(msg):
  print(f"[netns {time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


def run(cmd, check=True, **kw):
  r = subprocess.run(cmd, capture_output=True, text=True, **kw)
  if check and r.returncode != 0:
    raise Failure(f"{shlex.join(cmd)} failed ({r.returncode}): "
                  f"{r.stderr.strip() or r.stdout.strip()}")
  return r


def pid_alive(pid):
  try:
    os.kill(pid, 0)
    return True
  except ProcessLookupError:
    return False
  except PermissionError:
    return True


_libc = ctypes.CDLL("libc.so.6", use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
  # A service outlives nothing: if this script is killed (e.g. by a test
  # timeout), the kernel kills the services too.
  _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
  os.setpgrp()


# ---------------------------------------------------------------- compose ---

def load_compose(files, env):
  compose = shutil.which("docker-compose")
  if compose:
    cmd = [compose]
  elif (shutil.which("docker") and
        run(["docker", "compose", "version"], check=False).returncode == 0):
    cmd = ["docker", "compose"]
  else:
    raise Skip("neither docker-compose nor the docker compose plugin is installed")
  for f in files:
    cmd += ["-f", f]
  r = run(cmd + ["config"], env=env)
  import yaml  # Debian: python3-yaml (a docker-compose dependency)
  return yaml.safe_load(r.stdout)


def parse_dockerfile(path):
  """The final stage's ENTRYPOINT, CMD, USER, ENV and installed files."""
  text = open(path).read().replace("\\\n", " ")
  stages = re.split(r"(?im)^FROM\s", text)
  final = stages[-1]
  out = {"entrypoint": None, "cmd": [], "user": None, "env": {}, "files": {}}
  for line in final.splitlines():
    m = re.match(r"\s*(ENTRYPOINT|CMD|USER|ENV)\s+(.*)$", line)
    if not m:
      continue
    key, val = m.group(1), m.group(2).strip()
    if key in ("ENTRYPOINT", "CMD"):
      out[key.lower() if key == "CMD" else "entrypoint"] = json.loads(val)
    elif key == "USER":
      out["user"] = val
    else:
      for item in shlex.split(val):
        k, _, v = item.partition("=")
        out["env"][k] = v
  # Files the build stage installs into the image: install ... SRC /out/DEST.
  for m in re.finditer(r"install\s+(?:-\S+\s+(?:\d+\s+)?)*(\S+)\s+/out(/\S+)", text):
    out["files"][m.group(2)] = m.group(1)
  return out


class Service:
  def __init__(self, name, spec, scale):
    self.name = name
    self.spec = spec
    self.scale = scale
    self.instances = []
    self.healthcheck = spec.get("healthcheck") or {}
    self.depends_on = spec.get("depends_on") or {}
    if isinstance(self.depends_on, list):
      self.depends_on = {d: {"condition": "service_started"} for d in self.depends_on}
    # Filled by resolve_image().
    self.entrypoint = []
    self.command = []
    self.env = {}
    self.uid = None
    self.gid = None
    self.file_map = {}  # image path -> host path
    self.mounts = []  # (container path, host path)


class Instance:
  def __init__(self, service, index, pid_tag, ip):
    self.service = service
    self.index = index
    self.hostname = f"{service.name}-{index}"
    self.ns = f"{NS_PREFIX}{pid_tag}-{service.name[:12]}-{index}"
    self.ip = ip
    self.proc = None
    self.log_path = None
    self.healthy = False

  def tail(self, n=25):
    try:
      with open(self.log_path, errors="replace") as f:
        return "".join(f.readlines()[-n:])
    except OSError:
      return "(no log)"


# ---------------------------------------------------------------- runner ----

class Topology:
  def __init__(self, args):
    self.args = args
    self.tag = str(os.getpid())
    self.br_ns = f"{NS_PREFIX}{self.tag}-br"
    self.dns_ns = f"{NS_PREFIX}{self.tag}-dns"
    self.client_ns = f"{NS_PREFIX}{self.tag}-client"
    self.namespaces = []
    self.services = {}
    self.work = None
    self.dnsmasq = None

  # -- setup ---------------------------------------------------------------

  def ip_batch(self, lines, ns=None):
    """One `ip -batch` per namespace instead of one process per command."""
    cmd = ["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"]
    r = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
      raise Failure(f"{shlex.join(cmd)} failed: {r.stderr.strip()}\n" + "\n".join(lines))

  def setup_network(self, records):
    # (namespace, address, extra /etc/hosts lines)
    nodes = [(self.dns_ns, DNS_IP, ""), (self.client_ns, CLIENT_IP, "")]
    for svc in self.services.values():
      for inst in svc.instances:
        nodes.append((inst.ns, inst.ip, f"{inst.ip}\t{inst.hostname}\n"))
    # Register every name first, so that teardown removes whatever was made.
    self.namespaces = [self.br_ns] + [ns for ns, _, _ in nodes]
    self.ip_batch([f"netns add {ns}" for ns in self.namespaces])
    br = ["link add br0 type bridge", "link set br0 up"]
    for n, (ns, ip, hosts) in enumerate(nodes, start=1):
      etc = f"/etc/netns/{ns}"
      os.makedirs(etc, exist_ok=True)
      with open(f"{etc}/hosts", "w") as f:
        f.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + hosts)
      with open(f"{etc}/resolv.conf", "w") as f:
        f.write(f"nameserver {DNS_IP}\noptions ndots:0 timeout:2\n")
      br += [f"link add v{n} type veth peer name eth0 netns {ns}", f"link set v{n} master br0 up"]
    self.ip_batch(br, self.br_ns)
    for ns, ip, _ in nodes:
      self.ip_batch(["link set lo up", f"addr add {ip}/24 dev eth0", "link set eth0 up"], ns)
    # Docker's embedded DNS: service names (one A record per replica) and
    # container hostnames; nothing is forwarded upstream.
    hosts = os.path.join(self.work, "dns-hosts")
    with open(hosts, "w") as f:
      for ip, names in records:
        f.write(f"{ip}\t{' '.join(names)}\n")
    dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    self.dnsmasq = subprocess.Popen(
        ["ip", "netns", "exec", self.dns_ns, dnsmasq, "--keep-in-foreground", "--no-resolv",
         "--no-hosts", f"--addn-hosts={hosts}", f"--listen-address={DNS_IP}", "--bind-interfaces",
         "--no-negcache", "--local-ttl=0", "--log-facility=-", "--pid-file=",
         "--user=root"],
        stdout=open(os.path.join(self.work, "dnsmasq.log"), "w"), stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent)
    name = next(iter(self.services))
    for _ in range(100):
      if run(["ip", "netns", "exec", self.client_ns, "getent", "hosts", name],
             check=False).returncode == 0:
        break
      if self.dnsmasq.poll() is not None:
        raise Failure("dnsmasq exited: " + open(os.path.join(self.work, "dnsmasq.log")).read())
      time.sleep(0.2)
    else:
      raise Failure(f"the DNS namespace does not answer for '{name}'")

  # -- services ------------------------------------------------------------

  def resolve_image(self, svc):
    spec = svc.spec
    image = spec.get("image", "")
    build = spec.get("build")
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/"}
    if build:
      dockerfile = os.path.join(build.get("context", "."), build.get("dockerfile", "Dockerfile"))
      df = parse_dockerfile(dockerfile)
      for dest, source in df["files"].items():
        if source.startswith("/build/bin/ced"):
          svc.file_map[dest] = self.args.ced
        else:
          svc.file_map[dest] = os.path.join(build.get("context", "."), source)
      if "/usr/local/bin/ced" not in svc.file_map:
        raise Failure(f"{dockerfile}: the image installs no /usr/local/bin/ced")
      svc.entrypoint = [svc.file_map.get(p, p) for p in (df["entrypoint"] or [])]
      svc.command = spec.get("command", df["cmd"])
      env.update(df["env"])
      # The entrypoint runs CED_BIN (default /usr/local/bin/ced, the image's path).
      env["CED_BIN"] = self.args.ced
      if df["user"]:
        uid, _, gid = df["user"].partition(":")
        svc.uid, svc.gid = int(uid), int(gid or uid)
    elif image.startswith(PROMETHEUS_IMAGES):
      binary = shutil.which("prometheus")
      if not binary:
        raise Skip("prometheus is not installed (apt: prometheus)")
      svc.entrypoint = [binary]
      svc.command = spec.get("command", [])
      svc.uid = svc.gid = PROMETHEUS_UID
    elif image.startswith(REDIS_IMAGES):
      binary = shutil.which("redis-server")
      if not binary:
        raise Skip("redis-server is not installed (apt: redis-server)")
      # The image's entrypoint runs the command ("redis-server ..."); here the
      # host's redis-server does, in the work directory.
      command = list(spec.get("command") or ["redis-server"])
      svc.entrypoint = [binary]
      svc.command = command[1:] if command and command[0] == "redis-server" else command
    else:
      raise Failure(f"service {svc.name}: no way to run image '{image}' without a container")
    if isinstance(svc.command, str):
      svc.command = shlex.split(svc.command)
    environment = spec.get("environment") or {}
    if isinstance(environment, list):
      environment = dict(e.partition("=")[::2] for e in environment)
    for k, v in environment.items():
      if v is not None:
        env[k] = str(v)
    svc.env = env

  def setup_volumes(self, svc):
    for vol in svc.spec.get("volumes") or []:
      if isinstance(vol, dict):
        source, target, kind = vol.get("source"), vol["target"], vol.get("type")
      else:
        parts = vol.split(":")
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith(("/", ".")) else "volume"
      if kind == "volume":
        host = os.path.join(self.work, "volumes", source)
        if not os.path.isdir(host):
          os.makedirs(host)
          # Docker copies the image's mount point (owned by the image user) into a
          # new volume; a named volume here starts owned by the first user of it.
          if svc.uid is not None:
            os.chown(host, svc.uid, svc.gid)
      else:
        host = source
      svc.mounts.append((target, host))
    for secret in svc.spec.get("secrets") or []:
      name = secret if isinstance(secret, str) else secret["source"]
      target = secret.get("target", name) if isinstance(secret, dict) else name
      source = self.compose.get("secrets", {}).get(name, {}).get("file")
      if source:
        svc.mounts.append((target if target.startswith("/") else f"/run/secrets/{target}", source))
    svc.mounts.sort(key=lambda m: -len(m[0]))

  def rewrite(self, svc, s):
    """Container paths of mounts and image files -> host paths."""
    pairs = svc.mounts + sorted(svc.file_map.items(), key=lambda m: -len(m[0]))
    for target, host in pairs:
      s = re.sub(r"(^|[=:,])" + re.escape(target.rstrip("/")) + r"(?=/|$|[,:])",
                 lambda m: m.group(1) + host, s)
    return s

  def start(self, inst):
    svc = inst.service
    argv = [self.rewrite(svc, a) for a in svc.entrypoint + svc.command]
    env = {k: self.rewrite(svc, v) for k, v in svc.env.items()}
    env["HOSTNAME"] = inst.hostname
    user = []
    if svc.uid is not None:
      user = ["setpriv", f"--reuid={svc.uid}", f"--regid={svc.gid}", "--clear-groups",
              "--pdeathsig=KILL", "--"]  # a uid change clears PR_SET_PDEATHSIG
    # Own UTS namespace: `hostname` is the container's, as Docker sets it.
    cmd = ["ip", "netns", "exec", inst.ns, "unshare", "--uts", "--", "/bin/sh", "-c",
           'hostname "$0" && exec "$@"', inst.hostname] + user + argv
    inst.log_path = os.path.join(self.work, "logs", f"{inst.hostname}.log")
    logf = open(inst.log_path, "w")
    logf.write(f"# {shlex.join(argv)}\n# env: {json.dumps(svc.env, sort_keys=True)}\n")
    logf.flush()
    shown = argv[-len(svc.command):] if svc.command else argv
    log(f"start {inst.hostname} ({inst.ip}): {shlex.join(shown)}")
    inst.proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                 cwd=self.work, preexec_fn=die_with_parent)

  def health_ok(self, inst):
    test = inst.service.healthcheck.get("test")
    if not test or inst.service.healthcheck.get("disable"):
      return inst.proc.poll() is None
    if isinstance(test, str):
      test = ["CMD-SHELL", test]
    if test[0] == "NONE":
      return inst.proc.poll() is None
    if test[0] == "CMD-SHELL":
      argv = ["/bin/sh", "-c", self.rewrite(inst.service, test[1])]
    else:
      argv = [inst.service.file_map.get(a, a) for a in test[1:]]
      if argv[0] == "wget" and not shutil.which("wget"):
        argv = ["curl", "-fsS", "-o", "/dev/null", argv[-1]]
    try:
      r = subprocess.run(["ip", "netns", "exec", inst.ns] + argv, capture_output=True,
                         timeout=10, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
      return r.returncode == 0
    except subprocess.TimeoutExpired:
      return False

  def bring_up(self, deadline):
    """Starts services in depends_on order; returns when every long-running
    service is healthy (or started, without a healthcheck)."""
    pending = list(self.services.values())
    completed = set()

    def condition_met(dep, cond):
      d = self.services.get(dep)
      if d is None:
        raise Failure(f"depends_on names unknown service {dep}")
      if d in pending:
        return False
      if cond == "service_completed_successfully":
        return dep in completed
      if cond == "service_healthy":
        return all(i.healthy for i in d.instances)
      return True

    while True:
      for svc in list(pending):
        if all(condition_met(d, (c or {}).get("condition", "service_started"))
               for d, c in svc.depends_on.items()):
          pending.remove(svc)
          for inst in svc.instances:
            self.start(inst)
      done = True
      for svc in self.services.values():
        if svc in pending:
          done = False
          continue
        for inst in svc.instances:
          rc = inst.proc.poll()
          one_shot = svc.spec.get("restart") == "no" and not svc.healthcheck
          if rc is not None:
            if one_shot and rc == 0:
              if not inst.healthy:
                log(f"{inst.hostname} completed")
              inst.healthy = True
              continue
            raise Failure(f"{inst.hostname} exited with {rc}:\n{inst.tail()}")
          if one_shot:
            done = False
          elif not inst.healthy:
            if self.health_ok(inst):
              inst.healthy = True
              log(f"{inst.hostname} healthy")
            else:
              done = False
        if all(i.healthy for i in svc.instances) and svc.spec.get("restart") == "no":
          completed.add(svc.name)
      if done:
        return
      if time.monotonic() > deadline:
        waiting = [i.hostname for s in self.services.values() for i in s.instances
                   if not i.healthy]
        raise Failure("timed out bringing the topology up; waiting for " + ", ".join(waiting) +
                      "".join(f"\n--- {i.hostname}:\n{i.tail()}" for s in self.services.values()
                              for i in s.instances if not i.healthy and i.proc))
      time.sleep(0.3)

  # -- teardown ------------------------------------------------------------

  def teardown(self):
    procs = [i.proc for s in self.services.values() for i in s.instances if i.proc]
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs:
      try:
        p.wait(timeout=max(0.1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if self.dnsmasq and self.dnsmasq.poll() is None:
      self.dnsmasq.terminate()
      try:
        self.dnsmasq.wait(timeout=5)
      except subprocess.TimeoutExpired:
        self.dnsmasq.kill()
    for ns in reversed(self.namespaces):
      remove_namespace(ns)
    if self.work and not self.args.keep:
      shutil.rmtree(self.work, ignore_errors=True)
    elif self.work:
      log(f"logs kept in {self.work}")


def remove_namespace(ns):
  r = run(["ip", "netns", "pids", ns], check=False)
  if r.returncode != 0:  # never made
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
    return
  for pid in r.stdout.split():
    try:
      os.kill(int(pid), signal.SIGKILL)
    except (ProcessLookupError, ValueError):
      pass
  for _ in range(50):
    if run(["ip", "netns", "del", ns], check=False).returncode == 0:
      break
    time.sleep(0.1)
  shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


def remove_stale():
  """Namespaces left by a run of this script that was killed."""
  r = run(["ip", "netns", "list"], check=False)
  for line in r.stdout.splitlines():
    name = line.split()[0] if line.split() else ""
    m = re.match(NS_PREFIX + r"(\d+)-", name)
    if m and not pid_alive(int(m.group(1))):
      log(f"removing stale namespace {name}")
      remove_namespace(name)
  tmp = tempfile.gettempdir()
  for name in os.listdir(tmp):
    m = re.fullmatch(r"ced-netns-(\d+)-\w+", name)
    if m and not pid_alive(int(m.group(1))):
      shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


# ---------------------------------------------------------------- checks ----

def netns_run(ns, argv, timeout=120, env=None):
  return subprocess.run(["ip", "netns", "exec", ns] + argv, capture_output=True, timeout=timeout,
                        env=env)


def http_get_json(topo, url):
  r = netns_run(topo.client_ns, ["curl", "-fsS", "--max-time", "10", url], timeout=20)
  if r.returncode != 0:
    raise Failure(f"GET {url}: {r.stderr.decode(errors='replace').strip()}")
  return json.loads(r.stdout)


def check(topo, models_host_dir):
  args = topo.args
  gw = topo.services["gateway"].instances[0]
  gateway = f"{gw.ip}:50050"
  ced = args.ced
  failures = []
  client_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

  # 1. The gateway sees the pools (asked by address from another namespace);
  #    waits until every worker has registered.
  info = None
  for _ in range(60):
    r = netns_run(topo.client_ns, [ced, "client", "model-info", "--gateway", gateway] +
                  args.client_arg, env=client_env)
    if r.returncode == 0:
      info = json.loads(r.stdout)
      if (info.get("num_prefill_workers") == len(topo.services["prefill"].instances) and
          info.get("num_decode_workers") == len(topo.services["decode"].instances)):
        break
    time.sleep(0.5)
  if info is None:
    failures.append(f"client model-info via {gateway} failed: "
                    f"{r.stderr.decode(errors='replace')}")
  else:
    log(f"model-info via {gateway}: {info.get('num_prefill_workers')} prefill, "
        f"{info.get('num_decode_workers')} decode workers")
    if info.get("num_prefill_workers") != len(topo.services["prefill"].instances) or \
       info.get("num_decode_workers") != len(topo.services["decode"].instances):
      failures.append(f"gateway sees {info.get('num_prefill_workers')} prefill / "
                      f"{info.get('num_decode_workers')} decode workers")

  # 2. Every worker registered under its own namespace address (never loopback
  #    or the wildcard it listens on).
  router = topo.services["router"].instances[0]
  reg_log = open(router.log_path, errors="replace").read()
  for role in ("prefill", "decode"):
    for inst in topo.services[role].instances:
      port = 50060 if role == "prefill" else 50070
      want = f"router: registered {role} worker {inst.hostname} at {inst.ip}:{port}"
      if want not in reg_log:
        failures.append(f"router log lacks '{want}'")
  bad = re.findall(r"registered \w+ worker \S+ at (?:127\.|localhost|0\.0\.0\.0)\S*", reg_log)
  if bad:
    failures.append(f"workers registered loopback/wildcard addresses: {bad}")

  # 2b. Hostile bytes to every decode worker's K/V listener from another host
  #     (the client namespace): random bytes, a K/V hello of a wrong version and
  #     well-formed hellos naming no reservation with garbage for a UCX worker
  #     address. Each costs only its own connection: step 3 then moves real
  #     K/V across namespaces through the same listeners.
  hostile = r"""
import os, socket, struct, sys, zlib
def send(host, port, data):
  s = socket.create_connection((host, port), timeout=5)
  try:
    s.sendall(data)
    s.settimeout(2)
    try:
      s.recv(4096)
    except OSError:
      pass
  finally:
    s.close()
host, port = sys.argv[1], int(sys.argv[2])
hello = lambda version, addr: (b"CEDKVX01" + struct.pack("<IIQ", version, len(addr), 0) +
                               os.urandom(64) + addr)
for data in (os.urandom(4096), hello(9, os.urandom(200)), hello(1, os.urandom(300)),
             hello(1, b"\xff" * 16384)):
  send(host, port, data)
print("sent")
"""
  for inst in topo.services["decode"].instances:
    r = netns_run(topo.client_ns, ["python3", "-c", hostile, inst.ip, "50080"], timeout=60,
                  env=client_env)
    if r.returncode != 0:
      failures.append(f"hostile K/V bytes to {inst.ip}:50080 failed to send: "
                      f"{r.stderr.decode(errors='replace')}")
  log(f"hostile bytes sent to {len(topo.services['decode'].instances)} K/V listener(s) "
      "from the client namespace")

  # 3. Greedy tokens through the cluster == `ced generate` in this process.
  model = os.path.join(models_host_dir, os.path.basename(
      topo.services["gateway"].env.get("CED_FLAG_MODEL", "") or
      _flag(topo.services["gateway"].command, "--model")))
  # All at once: the local references, and the cluster requests concurrently
  # (so the router spreads them over the pools).
  gen = ["--prompt", None, "--max-tokens", str(args.max_tokens), "--ignore-eos"]
  jobs = []
  for prompt in args.prompts:
    flags = [prompt if a is None else a for a in gen]
    local = subprocess.Popen([ced, "generate", "--model", model, "--quiet"] + flags,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    remote = subprocess.Popen(["ip", "netns", "exec", topo.client_ns, ced, "client", "generate",
                               "--gateway", gateway, "--timeout-ms", "120000"] + flags +
                              args.client_arg,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=client_env)
    jobs.append((local, remote))
  placements = set()
  for i, (local, remote) in enumerate(jobs):
    local_out, local_err = local.communicate(timeout=180)
    out, err = remote.communicate(timeout=180)
    err = err.decode(errors="replace")
    if local.returncode != 0:
      raise Failure(f"local ced generate failed: {local_err.decode(errors='replace')}")
    if remote.returncode != 0:
      failures.append(f"client generate #{i} via {gateway} failed: {err.strip()}")
      continue
    if out != local_out:
      failures.append(f"prompt #{i}: cluster text {out!r} != local {local_out!r}")
    else:
      log(f"prompt #{i}: {args.max_tokens} greedy tokens from {gateway} match local "
          "ced generate")
    m = re.search(r"\| (prefill \S+, decode \S+),", err)
    placements.add(m.group(1) if m else err.strip())
  for p in sorted(placements):
    log(f"placement: {p}")
  # The decode workers that took the hostile bytes all still run.
  for inst in topo.services["decode"].instances:
    if inst.proc is None or inst.proc.poll() is not None:
      failures.append(f"{inst.hostname} exited after hostile K/V bytes:\n{inst.tail()}")

  # 4. Prometheus scrapes every service by address, and saw K/V cross namespaces.
  prom = topo.services.get("prometheus")
  if prom:
    base = f"http://{prom.instances[0].ip}:9090"
    want = {}
    for role, port in (("gateway", 9100), ("router", 9101), ("prefill", 9110),
                       ("decode", 9120)):
      for inst in topo.services[role].instances:
        want[(f"ced-{role}", inst.ip, port)] = inst.hostname
    deadline = time.monotonic() + args.scrape_timeout
    while True:
      targets = http_get_json(topo, base + "/api/v1/targets?state=active")["data"]["activeTargets"]
      up = {}
      for t in targets:
        host = urllib.parse.urlsplit(t["scrapeUrl"]).hostname
        port = urllib.parse.urlsplit(t["scrapeUrl"]).port
        # Static targets name the service; resolve it the way Prometheus does.
        up[(t["labels"].get("job"), resolve(topo, host), port)] = t["health"]
      missing = [f"{job} {ip}:{port} ({name}): {up.get((job, ip, port), 'absent')}"
                 for (job, ip, port), name in want.items() if up.get((job, ip, port)) != "up"]
      if not missing or time.monotonic() > deadline:
        break
      time.sleep(1)
    if missing:
      failures.append("Prometheus targets not up: " + "; ".join(missing))
    else:
      log(f"Prometheus: all {len(want)} ced targets up "
          f"({', '.join(sorted(f'{j}@{ip}' for j, ip, _ in want))})")
    deadline = time.monotonic() + args.scrape_timeout
    moved = 0.0
    while time.monotonic() < deadline:
      q = urllib.parse.quote("sum(ced_kv_transfer_bytes_total)")
      res = http_get_json(topo, f"{base}/api/v1/query?query={q}")["data"]["result"]
      moved = float(res[0]["value"][1]) if res else 0.0
      if moved > 0:
        break
      time.sleep(1)
    if moved > 0:
      log(f"Prometheus: sum(ced_kv_transfer_bytes_total) = {moved:.0f} bytes")
    else:
      failures.append("Prometheus never saw ced_kv_transfer_bytes_total > 0")
  return failures


_resolve_cache = {}


def resolve(topo, host):
  if re.fullmatch(r"[\d.]+", host or ""):
    return host
  if host not in _resolve_cache:
    r = netns_run(topo.client_ns, ["getent", "hosts", host], timeout=10)
    _resolve_cache[host] = r.stdout.decode().split()[0] if r.returncode == 0 else host
  return _resolve_cache[host]


def _flag(argv, name):
  for i, a in enumerate(argv):
    if a == name and i + 1 < len(argv):
      return argv[i + 1]
    if a.startswith(name + "="):
      return a.split("=", 1)[1]
  return ""


# ---------------------------------------------------------------- main ------

def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  here = os.path.dirname(os.path.abspath(__file__))
  ap.add_argument("--ced", required=True, help="the ced binary to run for the ced image")
  ap.add_argument("-f", "--file", action="append", dest="files",
                  help="compose file(s) (default: deploy/compose/docker-compose.yml)")
  ap.add_argument("--scale", action="append", default=[], help="SERVICE=N (like compose --scale)")
  ap.add_argument("--check", action="store_true", help="run the checks, then tear down")
  ap.add_argument("--hold", action="store_true", help="keep running until SIGINT/SIGTERM")
  ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
  ap.add_argument("--client-arg", action="append", default=[],
                  help="extra flag for the `ced client` calls of --check (e.g. --tls-ca=FILE)")
  ap.add_argument("--max-tokens", type=int, default=24)
  ap.add_argument("--prompt", action="append", dest="prompts")
  ap.add_argument("--startup-timeout", type=float, default=120)
  ap.add_argument("--scrape-timeout", type=float, default=45)
  args = ap.parse_args()
  args.ced = os.path.abspath(args.ced)
  args.files = args.files or [os.path.normpath(os.path.join(here, "..", "compose",
                                                            "docker-compose.yml"))]
  args.prompts = args.prompts or ["The quick brown fox", "Namespaces are not containers, but",
                                  "0123456789 abcdefghij"]
  scale = {}
  for s in args.scale:
    name, _, n = s.partition("=")
    if not n.isdigit():
      ap.error(f"--scale {s}: want SERVICE=N")
    scale[name] = int(n)

  if os.geteuid() != 0:
    raise Skip("needs root (ip netns add, veth pairs, bind mounts)")
  for tool in ("ip", "unshare", "setpriv", "curl", "getent"):
    if not shutil.which(tool):
      raise Skip(f"{tool} is not installed")
  if not (shutil.which("dnsmasq") or os.path.exists("/usr/sbin/dnsmasq")):
    raise Skip("dnsmasq is not installed (apt: dnsmasq-base)")
  if not os.access(args.ced, os.X_OK):
    raise Failure(f"--ced {args.ced} is not an executable")
  remove_stale()
  probe = f"{NS_PREFIX}{os.getpid()}-probe"
  if run(["ip", "netns", "add", probe], check=False).returncode != 0:
    raise Skip("`ip netns add` does not work here")
  run(["ip", "netns", "del", probe], check=False)

  config = load_compose(args.files, dict(os.environ))  # ${VAR} interpolation as compose does
  topo = Topology(args)
  topo.compose = config
  for name in scale:
    if name not in config["services"]:
      ap.error(f"--scale {name}: no such service")

  def on_signal(signum, _):
    raise KeyboardInterrupt
  signal.signal(signal.SIGTERM, on_signal)
  signal.signal(signal.SIGHUP, on_signal)

  t0 = time.monotonic()
  try:
    # Named after this process, so a later run can remove it if this one is
    # killed; --keep folders are left alone.
    topo.work = tempfile.mkdtemp(
        prefix="ced-netns-keep-" if args.keep else f"ced-netns-{os.getpid()}-")
    os.chmod(topo.work, 0o755)
    os.makedirs(os.path.join(topo.work, "logs"))
    os.makedirs(os.path.join(topo.work, "volumes"))
    records = {}
    next_ip = 10
    for name, spec in config["services"].items():
      svc = Service(name, spec, scale.get(name, 1))
      topo.resolve_image(svc)
      topo.services[name] = svc
      for i in range(1, svc.scale + 1):
        inst = Instance(svc, i, topo.tag, f"{SUBNET}.{next_ip}")
        next_ip += 1
        svc.instances.append(inst)
        records.setdefault(inst.ip, []).extend([name, inst.hostname])
    for svc in topo.services.values():
      topo.setup_volumes(svc)
    log(f"{args.files[0]}: {len(config['services'])} services, "
        f"{sum(len(s.instances) for s in topo.services.values())} namespaces to make")
    topo.setup_network(sorted(records.items()))
    log(f"network up: bridge in {topo.br_ns}, DNS at {DNS_IP}, client at {CLIENT_IP}")
    topo.bring_up(time.monotonic() + args.startup_timeout)
    log(f"topology up in {time.monotonic() - t0:.1f} s: " + ", ".join(
        f"{i.hostname}={i.ip}" for s in topo.services.values() for i in s.instances))
    rc = 0
    if args.check:
      models = next((h for t, h in topo.services["gateway"].mounts if t == "/models"), None)
      if models is None:
        raise Failure("the gateway mounts no /models volume")
      failures = check(topo, models)
      for f in failures:
        print(f"FAIL: {f}", flush=True)
      if failures:
        for s in topo.services.values():
          for i in s.instances:
            print(f"--- {i.hostname} ({i.ip}) log tail:\n{i.tail()}")
        rc = 1
      else:
        log(f"all checks passed ({time.monotonic() - t0:.1f} s)")
    if args.hold:
      log(f"holding; client namespace: ip netns exec {topo.client_ns} ...; logs in {topo.work}")
      while True:
        time.sleep(3600)
    return rc
  except KeyboardInterrupt:
    if not args.hold:
      print("FAIL: interrupted (signal) before the checks finished", flush=True)
    return 0 if args.hold else 1
  finally:
    topo.teardown()
    log(f"torn down ({time.monotonic() - t0:.1f} s total)")


if __name__ == "__main__":
  try:
    sys.exit(main())
  except Skip as e:
    print(f"SKIP: {e}", flush=True)
    sys.exit(SKIP)
  except Failure as e:
    print(f"FAIL: {e}", flush=True)
    sys.exit(1)
