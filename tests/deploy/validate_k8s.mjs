// Validates rendered Kubernetes manifests: every object against its OpenAPI
// schema (kubernetes-models / @kubernetes-models/prometheus-operator), then
// the deployment rules of deploy/README.md (non-root, read-only root, gRPC
// probes, TLS from Secrets, resources, drain grace period, PDBs, default-deny, GPUs).
// Usage: node validate_k8s.mjs NODE_MODULES_DIR OVERLAY RENDERED.yaml
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modulesArg, overlay, file] = process.argv.slice(2);
const modules = resolve(modulesArg);
const require = createRequire(join(modules, "noop.js"));
const yaml = require("js-yaml");
const docs = yaml.loadAll(readFileSync(file, "utf8")).filter((d) => d);
const errors = [];
const fail = (what, msg) => errors.push(`${what}: ${msg}`);

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const path = group === "monitoring.coreos.com"
    ? join(modules, "@kubernetes-models/prometheus-operator", group, version, `${kind}.js`)
    : join(modules, "kubernetes-models", group, version, `${kind}.js`);
  const mod = await import(pathToFileURL(path).href);
  return mod[kind] ?? mod.default?.[kind];
}

for (const d of docs) {
  const what = `${d.kind}/${d.metadata?.name}`;
  let Model;
  try {
    Model = await modelClass(d.apiVersion, d.kind);
  } catch (e) {
    fail(what, `no schema for ${d.apiVersion} ${d.kind}`);
    continue;
  }
  if (!Model) { fail(what, `no schema for ${d.apiVersion} ${d.kind}`); continue; }
  try {
    new Model(d).validate();
  } catch (e) {
    fail(what, `schema: ${e.message}`);
  }
}

const byKind = (k) => docs.filter((d) => d.kind === k);
const roles = ["router", "gateway", "prefill", "decode"];
const workers = ["prefill", "decode"];
for (const role of roles) {
  const dep = byKind("Deployment").find((d) => d.metadata.name === `ced-${role}`);
  if (!dep) { fail(`Deployment/ced-${role}`, "missing"); continue; }
  const what = `Deployment/ced-${role}`;
  const pod = dep.spec.template.spec;
  if (pod.securityContext?.runAsNonRoot !== true) fail(what, "runAsNonRoot is not true");
  const ann = dep.spec.template.metadata.annotations ?? {};
  if (ann["prometheus.io/scrape"] !== "true" || !ann["prometheus.io/port"]) {
    fail(what, "missing prometheus.io scrape annotations");
  }
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
    const cw = `${what} container ${c.name}`;
    if (c.securityContext?.readOnlyRootFilesystem !== true) fail(cw, "root filesystem not read-only");
    if (!c.resources?.requests?.cpu || !c.resources?.limits?.memory) fail(cw, "no resource requests/limits");
  }
  const c = pod.containers.find((x) => x.name === role);
  if (!c) { fail(what, `no container named ${role}`); continue; }
  // With TLS on the gRPC port, probes use the plaintext health-only port.
  const grpcPort = c.ports?.find((p) => p.name === "grpc-health")?.containerPort ??
      c.ports?.find((p) => p.name === "grpc")?.containerPort;
  for (const probe of ["readinessProbe", "livenessProbe"]) {
    if (c[probe]?.grpc?.port !== grpcPort) fail(what, `${probe} is not a native gRPC probe on ${grpcPort}`);
  }
  const args = c.args ?? [];
  const health = args.find((a) => a.startsWith("--health-listen="));
  if (grpcPort !== c.ports?.find((p) => p.name === "grpc")?.containerPort &&
      !health?.endsWith(`:${grpcPort}`)) {
    fail(what, `probe port ${grpcPort} is not the --health-listen port`);
  }
  // TLS material comes from a mounted Secret, never from the image.
  for (const flag of ["--tls-cert=", "--tls-key=", "--tls-ca="]) {
    const path = args.find((a) => a.startsWith(flag))?.slice(flag.length);
    const mount = path && c.volumeMounts?.find((m) => path.startsWith(m.mountPath + "/"));
    const volume = mount && (pod.volumes ?? []).find((v) => v.name === mount.name);
    if (!volume?.secret) fail(what, `${flag}FILE is not read from a mounted Secret`);
    else if (volume.secret.optional) fail(what, `the TLS Secret ${volume.secret.secretName} is optional`);
  }
  const drain = (c.args ?? []).find((a) => a.startsWith("--drain-timeout-ms="));
  if (drain && grace * 1000 < Number(drain.split("=")[1]) + 5000) {
    fail(what, `terminationGracePeriodSeconds ${grace} does not cover ${drain} + preStop`);
  }
  if (workers.includes(role) && grace < 35) fail(what, "grace period too short for a drain");
  const gpus = c.resources?.limits?.["nvidia.com/gpu"];
  if (overlay === "gpu" && workers.includes(role) && !gpus) fail(what, "no nvidia.com/gpu limit");
  if (overlay !== "gpu" && gpus) fail(what, "GPU requested outside the gpu overlay");
  if (!byKind("PodDisruptionBudget").some((p) =>
      p.spec.selector?.matchLabels?.["app.kubernetes.io/component"] === role)) {
    fail(what, "no PodDisruptionBudget");
  }
  const svc = byKind("Service").find((s) => s.metadata.name === `ced-${role}`);
  if (!svc) fail(what, "no Service");
  else if (workers.includes(role) && svc.spec.clusterIP !== "None") fail(`Service/ced-${role}`, "workers need a headless Service");
  for (const v of pod.volumes ?? []) {
    if (v.secret && c.volumeMounts?.every((m) => m.name !== v.name)) fail(what, `secret volume ${v.name} not mounted`);
  }
}
if (!byKind("NetworkPolicy").some((n) =>
    Object.keys(n.spec.podSelector ?? {}).length === 0 && !n.spec.ingress && !n.spec.egress &&
    n.spec.policyTypes?.includes("Ingress") && n.spec.policyTypes?.includes("Egress"))) {
  fail("NetworkPolicy", "no default-deny policy");
}
for (const k of ["ServiceMonitor", "HorizontalPodAutoscaler", "ConfigMap"]) {
  if (byKind(k).length === 0) fail(k, "missing");
}

if (errors.length > 0) {
  for (const e of errors) console.log(`FAIL ${overlay}: ${e}`);
  process.exit(1);
}
console.log(`${overlay}: ${docs.length} objects valid`);
