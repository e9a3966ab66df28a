// Validate Prometheus Operator objects (ServiceMonitor, PrometheusRule, ...) against the
// schemas of its CRDs, compiled by @kubernetes-models/prometheus-operator.
//
//   node scripts/validate-monitoring.mjs NODE_MODULES < objects.json
//
// stdin: a JSON array of objects. stdout: a JSON array, one entry per object:
// {"ok": true} or {"ok": false, "error": "..."}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: validate-monitoring.mjs NODE_MODULES < objects.json");
  process.exit(2);
}
const index = join(modules, "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js");
const models = await import(pathToFileURL(index).href);
const objects = JSON.parse(readFileSync(0, "utf8"));

const results = objects.map((obj) => {
  if (obj.apiVersion !== "monitoring.coreos.com/v1") {
    return { ok: false, error: `not a monitoring.coreos.com/v1 object: ${obj.apiVersion}` };
  }
  const Model = models[obj.kind];
  if (typeof Model !== "function" || typeof Model.prototype.validate !== "function") {
    return { ok: false, error: `no schema for kind ${obj.kind}` };
  }
  try {
    new Model(obj).validate();
    return { ok: true };
  } catch (e) {
    return { ok: false, error: String(e.message || e) };
  }
});
process.stdout.write(JSON.stringify(results));
