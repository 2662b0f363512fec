// Validates deploy/kubernetes: every document against the Kubernetes schemas (kubernetes-models,
// plus a check that no field is unknown to them), then against outboxd itself: the commands,
// ports, probe paths, environment names and configuration the manifests use are the ones the
// binary has, and the grace period covers its shutdown.
//   node validate.mjs <deploy/kubernetes> <repository> <outboxd binary>
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseAllDocuments } from "yaml";

const [dir, repo, binary] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);

// --- 1. the schemas ---------------------------------------------------------------------------
const documents = [];
for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const doc of parseAllDocuments(readFileSync(path.join(dir, file), "utf8"))) {
    if (doc.errors.length) problem(file, doc.errors.map((e) => e.message).join("; "));
    else documents.push({ file, body: doc.toJS() });
  }
}

// The model of a kind: kubernetes-models/<group>/<version>/<Kind> ("v1" is the core group).
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  return require.resolve(`kubernetes-models/${group ? `${group}/` : ""}${version}/${kind}`);
}

// The declared fields of a model's TypeScript interface, each with the file of its own model when
// it is one: kubernetes-models' validators accept unknown fields, so a misspelt field
// ("readinesProbe") would pass them unseen.
const fieldsCache = new Map();
function fieldsOf(dts) {
  if (fieldsCache.has(dts)) return fieldsCache.get(dts);
  const text = readFileSync(dts, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ (I\w+) \} from "([^"]+)";$/gm)) {
    const target = m[2].startsWith(".")
      ? path.resolve(path.dirname(dts), m[2])
      : require.resolve(m[2]).replace(/\.(m?js)$/, "");
    imports.set(m[1], target.replace(/\.(m?js|d\.ts)$/, "") + ".d.ts");
  }
  const body = text.slice(text.indexOf("export interface "));
  const interfaceBody = body.slice(0, body.indexOf("\n}"));
  const fields = new Map();
  // A field's line: `    "name"?: Type;`, or the first line of an inline map type.
  for (const m of interfaceBody.matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) {
    const type = m[2].match(/^(?:Array<)?(I\w+)>?;$/);
    fields.set(m[1], type && imports.has(type[1]) ? imports.get(type[1]) : null);
  }
  fieldsCache.set(dts, fields);
  return fields;
}
function knownFieldsOnly(value, dts, where) {
  if (Array.isArray(value)) return value.forEach((v, i) => knownFieldsOnly(v, dts, `${where}[${i}]`));
  if (!value || typeof value !== "object") return;
  const fields = fieldsOf(dts);
  for (const [key, v] of Object.entries(value)) {
    if (!fields.has(key)) problem(where, `unknown field "${key}"`);
    else if (fields.get(key)) knownFieldsOnly(v, fields.get(key), `${where}.${key}`);
  }
}

const byKind = (kind) => documents.filter((d) => d.body.kind === kind);
for (const { file, body } of documents) {
  const where = `${file} ${body.kind}/${body.metadata?.name}`;
  if (body.kind === "Kustomization") continue; // not a cluster object; checked below
  let Model;
  try {
    const js = modelPath(body.apiVersion, body.kind);
    Model = require(js)[body.kind];
    knownFieldsOnly(body, js.replace(/\.js$/, ".d.ts"), where);
  } catch (e) {
    problem(where, `no schema for ${body.apiVersion} ${body.kind}: ${e.message}`);
    continue;
  }
  try {
    new Model(body).validate();
  } catch (e) {
    problem(where, e.message);
  }
}
const kustomization = byKind("Kustomization")[0]?.body;
const files = new Set(documents.map((d) => d.file).filter((f) => f !== "kustomization.yaml"));
if (!kustomization) problem("kustomization.yaml", "missing");
else if ([...files].sort().join() !== [...kustomization.resources].sort().join())
  problem("kustomization.yaml", `resources ${kustomization.resources} are not the files ${[...files]}`);

// --- 2. the manifests against outboxd ------------------------------------------------------------
const help = execFileSync(binary, ["--help"], { encoding: "utf8" });
const commandList = help.slice(help.indexOf("commands:"), help.indexOf("options:"));
const commands = [...commandList.matchAll(/^ {2}([a-z-]+) {2,}/gm)].map((m) => m[1]);
const openapi = JSON.parse(readFileSync(path.join(repo, "docs/openapi.json"), "utf8"));
// application.json has comments: the binary prints it as plain JSON.
const defaults = JSON.parse(execFileSync(binary, ["check-config"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], env: { PATH: process.env.PATH } }));
const keyOf = new Map(); // OUTBOXD_OUTBOX_POOLSIZE -> outbox.poolSize
(function walk(node, prefix) {
  for (const [k, v] of Object.entries(node)) {
    const key = prefix ? `${prefix}.${k}` : k;
    keyOf.set(`OUTBOXD_${key.replaceAll(".", "_").toUpperCase()}`, key);
    if (v && typeof v === "object" && !Array.isArray(v)) walk(v, key);
  }
})(defaults, "");
const environmentNames = new Set(["DATABASE_URL", ...keyOf.keys()]);

const secret = byKind("Secret")[0]?.body;
const configMap = byKind("ConfigMap")[0]?.body;
for (const name of Object.keys(secret?.stringData ?? {}))
  if (!environmentNames.has(name)) problem("secret.yaml", `${name} is no variable outboxd reads`);

const duration = (s) => ({ ms: 1e-3, s: 1, m: 60 })[s.match(/[a-z]+$/)[0]] * parseFloat(s);
for (const { file, body } of byKind("Deployment")) {
  const where = `${file} ${body.metadata.name}`;
  const pod = body.spec.template.spec;
  const labels = body.spec.template.metadata.labels;
  for (const [k, v] of Object.entries(body.spec.selector.matchLabels))
    if (labels[k] !== v) problem(where, `selector ${k}=${v} does not match the pod's labels`);
  for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
    const at = `${where} container ${c.name}`;
    if (!commands.includes(c.args?.[0])) problem(at, `"${c.args?.[0]}" is no outboxd command (${commands})`);
    for (const e of c.env ?? []) if (!environmentNames.has(e.name)) problem(at, `${e.name} is no variable outboxd reads`);
    for (const e of c.envFrom ?? []) if (e.secretRef?.name !== secret?.metadata.name) problem(at, `envFrom ${e.secretRef?.name} is not the Secret`);
    const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
    const wanted = c.args[0] === "simulator" ? Number(c.args[c.args.indexOf("--port") + 1]) : defaults.server.port;
    if (c.ports && ports.get("http") !== wanted) problem(at, `port http is ${ports.get("http")}, outboxd listens on ${wanted}`);
    for (const [kind, probe] of Object.entries({ startupProbe: c.startupProbe, livenessProbe: c.livenessProbe, readinessProbe: c.readinessProbe })) {
      if (!probe) continue;
      if (!ports.has(probe.httpGet.port)) problem(at, `${kind} port ${probe.httpGet.port} is not a port of the container`);
      if (!openapi.paths[probe.httpGet.path]?.get) problem(at, `${kind} path ${probe.httpGet.path} is no route of outboxd`);
    }
    if (c.args[0] === "serve") {
      if (c.livenessProbe?.httpGet.path !== "/healthz") problem(at, "liveness must be /healthz: /readyz fails while the database is away, and restarts would not help");
      if (c.readinessProbe?.httpGet.path !== "/readyz") problem(at, "readiness must be /readyz");
    }
    // --config points at the mounted ConfigMap.
    const config = c.args[c.args.indexOf("--config") + 1];
    if (c.args.includes("--config")) {
      const mount = (c.volumeMounts ?? []).find((m) => config.startsWith(m.mountPath + "/"));
      const volume = pod.volumes?.find((v) => v.name === mount?.name);
      if (volume?.configMap?.name !== configMap?.metadata.name || !(path.basename(config) in configMap.data))
        problem(at, `--config ${config} is not a file of the mounted ConfigMap`);
    }
  }
  const serve = pod.containers.find((c) => c.args[0] === "serve");
  if (serve) {
    // outboxd accepts the ConfigMap with the Secret's variables (filled in), and refuses the
    // Secret's placeholders as they are.
    const work = mkdtempSync(path.join(tmpdir(), "outboxd-k8s-"));
    const file = path.join(work, "application.json");
    writeFileSync(file, configMap.data["application.json"]);
    const run = (env) => spawnSync(binary, ["check-config", "--config", file], { encoding: "utf8", env: { PATH: process.env.PATH, ...env } });
    const filled = { ...secret.stringData, DATABASE_URL: "postgresql://u:p@db:5432/outboxd", OUTBOXD_AUTH_TOKENS: JSON.stringify([{ name: "ops", role: "admin", sha256: "a".repeat(64) }]) };
    const effective = run({ ...filled, OUTBOXD_SERVER_HOST: "0.0.0.0" });
    if (effective.status !== 0) problem(where, `outboxd check-config refuses the ConfigMap: ${effective.stderr}`);
    const unedited = run({ ...secret.stringData, OUTBOXD_SERVER_HOST: "0.0.0.0" });
    rmSync(work, { recursive: true, force: true });
    if (unedited.status !== 2 || !unedited.stderr.includes("auth.tokens"))
      problem("secret.yaml", `the placeholder token must be refused (exit 2 naming auth.tokens), got ${unedited.status}: ${unedited.stderr}`);
    if (effective.status === 0) {
      const settings = JSON.parse(effective.stdout);
      const preStop = Number(serve.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
      const needed = preStop + duration(settings.outbox.shutdownTimeout) + 2 /* cancel */ + 3 /* margin */;
      if (!(pod.terminationGracePeriodSeconds >= needed))
        problem(where, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < preStop ${preStop} s + outbox.shutdownTimeout ${settings.outbox.shutdownTimeout} + 5 s`);
      if (settings.simulator.enabled) problem("configmap.yaml", "replicas must share one simulator (simulator.enabled false)");
    }
  }
}
for (const { file, body } of [...byKind("Service"), ...byKind("PodDisruptionBudget")]) {
  const selector = body.spec.selector.matchLabels ?? body.spec.selector;
  const target = byKind("Deployment").find((d) => Object.entries(selector).every(([k, v]) => d.body.spec.template.metadata.labels[k] === v));
  if (!target) problem(`${file} ${body.metadata.name}`, "selects no Deployment's pods");
  for (const p of body.spec.ports ?? []) {
    const names = target?.body.spec.template.spec.containers.flatMap((c) => (c.ports ?? []).map((q) => q.name));
    if (!names?.includes(p.targetPort)) problem(`${file} ${body.metadata.name}`, `targetPort ${p.targetPort} is no container port`);
  }
}

if (problems.length) {
  console.error(problems.map((p) => `FAIL ${p}`).join("\n"));
  process.exit(1);
}
console.log(`ok: ${documents.length} documents valid against the Kubernetes schemas and outboxd`);
