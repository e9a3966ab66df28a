#!/usr/bin/env python3
"""Checks of the Helm chart charts/jobqueue-operator, with real tools.

Run it through scripts/chart-check.sh (`make chart-check`), which installs the tools:
helm, kubernetes-validate, promql-parser and the Prometheus Operator schemas.

What is checked:
- `helm lint --strict` with the default values and with ci/all-on-values.yaml;
- `helm template` of both, every rendered manifest validated (strict: unknown fields are
  errors) against the Kubernetes API schemas of several versions with
  kubernetes-validate; ServiceMonitor and PrometheusRule, which are not Kubernetes
  built-ins, against the Prometheus Operator's CRD schemas instead;
- the chart's CRD template (templates/crd.yaml) is crds/jobqueue.yaml under `crds.install`,
  with the keep annotation under `crds.keep`;
- the rendered RBAC grants exactly the operator's rules, nothing more, nothing less;
- the Deployment: leader election, the operator's real flags, the watched namespaces
  (a list, or the deprecated single string) in its arguments, probes, hardening, the
  default pod anti-affinity across nodes;
- the NetworkPolicy's Redis egress: the ports and CIDRs of the values, private ranges by
  default;
- every metric named by the alerts, the dashboard and docs/operations.md is one the
  operator exports (read from src/controller/metrics.rs), and every PromQL expression
  parses;
- values that do not fit values.schema.json are refused;
- the built-in objects of examples/*.yaml validate too (JobQueues are checked against the
  CRD's schema and CEL rules by tests/crd.rs).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import kubernetes_validate
import promql_parser
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "jobqueue-operator"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
RELEASE = "jobqueue-operator"
RELEASE_NAMESPACE = "jobqueue-system"

# 1.29: the chart's kubeVersion floor (CEL transition rules are GA there); 1.33: the API
# the operator is built against (k8s-openapi v1_33); and the newest schemas shipped.
KUBE_VERSIONS = ["1.29.0", "1.33.0", kubernetes_validate.utils.latest_version()]

# Objects that are not Kubernetes built-ins, validated against their own CRD schemas.
PROMETHEUS_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}

# The operator's namespaced permissions, granted cluster-wide or in the one watched
# namespace: (apiGroup, resource, verb).
WATCHED_RULES = {
    ("jobqueue.dev", "jobqueues", "get"),
    ("jobqueue.dev", "jobqueues", "list"),
    ("jobqueue.dev", "jobqueues", "watch"),
    # The finalizer (jobqueue.dev/cleanup) is added and removed by JSON patches.
    ("jobqueue.dev", "jobqueues", "patch"),
    ("jobqueue.dev", "jobqueues/finalizers", "update"),
    ("jobqueue.dev", "jobqueues/status", "get"),
    ("jobqueue.dev", "jobqueues/status", "patch"),
    ("", "secrets", "get"),
    # Secrets, Deployments and StatefulSets are watched into the controller's caches.
    ("", "secrets", "list"),
    ("", "secrets", "watch"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "watch"),
    ("apps", "statefulsets", "list"),
    ("apps", "statefulsets", "watch"),
    ("apps", "deployments/scale", "get"),
    ("apps", "deployments/scale", "patch"),
    ("apps", "statefulsets/scale", "get"),
    ("apps", "statefulsets/scale", "patch"),
    ("autoscaling", "horizontalpodautoscalers", "list"),
    ("autoscaling", "horizontalpodautoscalers", "watch"),
    # A KEDA ScaledObject on a target makes the operator keep out of it.
    ("keda.sh", "scaledobjects", "list"),
    ("keda.sh", "scaledobjects", "watch"),
    # kube's event Recorder writes events.k8s.io/v1 Events only (create, then patch for
    # a repeated event), never core/v1 ones.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
}
# Leader election in the release namespace. kube-lease-manager gets the Lease, creates
# it when missing, and takes, renews and releases it with PATCH requests (it never
# sends PUT, so `update` is not granted); get and patch are limited to the Lease's name.
ANY_NAME = "*any*"


def lease_rules(lease: str) -> set:
    return {
        ("coordination.k8s.io", "leases", "create", ANY_NAME),
        ("coordination.k8s.io", "leases", "get", lease),
        ("coordination.k8s.io", "leases", "patch", lease),
    }


# Metrics the dashboard and docs may use that are not the operator's.
EXTERNAL_METRICS = {
    "up",  # Prometheus, per scraped target
    "kube_deployment_status_replicas_available",  # kube-state-metrics
    "kube_deployment_spec_replicas",  # kube-state-metrics
}


class Failed(Exception):
    pass


def fail(message: str) -> None:
    raise Failed(message)


def expect(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


# ---------------------------------------------------------------- tools


class Tools:
    def __init__(self, helm: str, node_modules: str):
        self.helm = helm
        self.node_modules = node_modules

    def run_helm(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.helm, *args], capture_output=True, text=True)
        if ok and proc.returncode != 0:
            fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def template(self, *extra: str) -> list[dict]:
        proc = self.run_helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *extra)
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    def validate_monitoring(self, objects: list[dict]) -> list[dict]:
        proc = subprocess.run(
            ["node", str(ROOT / "scripts" / "validate-monitoring.mjs"), self.node_modules],
            input=json.dumps(objects),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            fail(f"validate-monitoring.mjs failed:\n{proc.stderr}")
        return json.loads(proc.stdout)


def name_of(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


def validate_objects(tools: Tools, objects: list[dict], where: str) -> str:
    """Validate every object; return a summary. Fails on any invalid or unknown object."""
    problems = []
    monitoring = []
    counts = {v: 0 for v in KUBE_VERSIONS}
    for obj in objects:
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key in PROMETHEUS_KINDS:
            monitoring.append(obj)
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                counts[version] += 1
            except kubernetes_validate.utils.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                problems.append(f"{name_of(obj)} against {version}: {path}: {e.message}")
            except kubernetes_validate.utils.SchemaNotFoundError as e:
                problems.append(f"{name_of(obj)}: {e.message} (no schema: not validated)")
    if monitoring:
        for obj, result in zip(monitoring, tools.validate_monitoring(monitoring)):
            if not result["ok"]:
                problems.append(f"{name_of(obj)} against the Prometheus Operator schema: {result['error']}")
    expect(not problems, f"{where}:\n  " + "\n  ".join(problems))
    per_version = ", ".join(f"{n} against {v}" for v, n in counts.items())
    return f"{len(objects)} objects ({per_version}; {len(monitoring)} Prometheus Operator objects)"


# ---------------------------------------------------------------- the operator's code


def operator_env_names() -> set[str]:
    text = (ROOT / "src" / "cli" / "operator.rs").read_text()
    names = set(re.findall(r'env\s*=\s*"([A-Z0-9_]+)"', text))
    expect(len(names) >= 10, f"read only {sorted(names)} from src/cli/operator.rs")
    return names


def exported_metrics() -> tuple[set[str], set[str]]:
    """(every series name the operator exports, the base names as registered)."""
    text = (ROOT / "src" / "controller" / "metrics.rs").read_text()
    struct = re.search(r"pub struct Metrics \{(.*?)\n\}", text, re.S)
    expect(struct is not None, "no `pub struct Metrics` in src/controller/metrics.rs")
    kinds = {}
    for field, ty in re.findall(r"^\s*pub (\w+): (.+),\s*$", struct.group(1), re.M):
        for kind in ("Gauge", "Counter", "Histogram"):
            if re.search(rf"\b{kind}\b", ty):
                kinds[field] = kind
    prefix = re.search(r'sub_registry_with_prefix\("(\w+)"\)', text)
    expect(prefix is not None, "no metric prefix in src/controller/metrics.rs")
    series, bases = set(), set()
    registrations = re.findall(r'\.register\(\s*"(\w+)",\s*"[^"]*",\s*self\.(\w+)\.clone\(\)', text)
    # A registration this pattern cannot read would leave a real metric unknown (and an
    # alert on it refused) or, worse, hide a removed one: count them all.
    calls = len(re.findall(r"\br\.register\(", text))
    expect(len(registrations) == calls, f"read {len(registrations)} of {calls} registrations in src/controller/metrics.rs")
    for name, field in registrations:
        base = f"{prefix.group(1)}_{name}"
        bases.add(base)
        kind = kinds.get(field)
        expect(kind is not None, f"metric {base}: unknown type of field {field}")
        if kind == "Gauge":
            series.add(base)
        elif kind == "Counter":
            series.add(base + "_total")
        else:
            series.update(base + s for s in ("_bucket", "_sum", "_count"))
    expect(len(bases) >= 10, f"read only {sorted(bases)} from src/controller/metrics.rs")
    return series, bases


def promql_metrics(expr: str) -> set[str]:
    """The metric names an expression selects; fails when it does not parse."""
    try:
        ast = promql_parser.parse(expr)
    except ValueError as e:
        fail(f"PromQL does not parse: {e}\n  {expr}")
    names = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(ast, visit)
    return names


def grafana_expr(expr: str) -> str:
    """A Grafana target as plain PromQL: the range variables become a duration."""
    return expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")


# ---------------------------------------------------------------- helpers on renders


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict], kind: str) -> dict:
    found = by_kind(objects, kind)
    expect(len(found) == 1, f"expected one {kind}, rendered {len(found)}")
    return found[0]


def grants(objects: list[dict], service_account: tuple[str, str]) -> set:
    """What the service account may do: (scope, apiGroup, resource, verb, resourceName)."""
    roles = {("ClusterRole", None, o["metadata"]["name"]): o for o in by_kind(objects, "ClusterRole")}
    roles.update({("Role", o["metadata"]["namespace"], o["metadata"]["name"]): o for o in by_kind(objects, "Role")})
    out = set()
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        subjects = {(s.get("kind"), s.get("namespace"), s.get("name")) for s in binding.get("subjects", [])}
        if ("ServiceAccount", *service_account) not in subjects:
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"]))
        expect(role is not None, f"{name_of(binding)} refers to {ref['kind']} {ref['name']}, which is not rendered")
        expect("aggregationRule" not in role, f"{name_of(role)} aggregates other roles")
        scope = ns if ns is not None else "*cluster*"
        for rule in role.get("rules", []):
            expect("nonResourceURLs" not in rule, f"{name_of(role)} grants non-resource URLs")
            names = rule.get("resourceNames") or [ANY_NAME]
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        for name in names:
                            out.add((scope, group, resource, verb, name))
    return out


def expected_grants(scope: str, lease: str, extra_scale: list[tuple[str, str]]) -> set:
    watched = set(WATCHED_RULES)
    for group, resource in extra_scale:
        watched |= {(group, f"{resource}/scale", "get"), (group, f"{resource}/scale", "patch")}
    out = {(scope, g, r, v, ANY_NAME) for g, r, v in watched}
    out |= {(RELEASE_NAMESPACE, *rule) for rule in lease_rules(lease)}
    return out


def describe(grant_set: set) -> str:
    return "\n  ".join(
        f"{scope}: {group or 'core'} {resource} {verb}{'' if name == ANY_NAME else ' (' + name + ')'}"
        for scope, group, resource, verb, name in sorted(grant_set)
    )


def env_map(container: dict) -> dict:
    out = {}
    for e in container.get("env", []):
        out[e["name"]] = e.get("value", e.get("valueFrom"))
    return out


# ---------------------------------------------------------------- checks


def check_lint(tools: Tools) -> str:
    out = []
    for extra in ([], ["-f", str(ALL_ON)]):
        proc = tools.run_helm("lint", "--strict", str(CHART), *extra)
        expect("0 chart(s) failed" in proc.stdout, proc.stdout)
        warnings = [l for l in proc.stdout.splitlines() if l.startswith(("[WARNING]", "[ERROR]"))]
        expect(not warnings, "\n".join(warnings))
        out.append("all-on" if extra else "default")
    return "clean with " + " and ".join(out) + " values"


def check_crd_template(tools: Tools) -> str:
    """The CRD is templated (so `helm upgrade` updates it) from crds/jobqueue.yaml."""
    top = (ROOT / "crds" / "jobqueue.yaml").read_text()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "chart-crd.py"), "--check"], capture_output=True, text=True)
    expect(proc.returncode == 0, proc.stderr.strip())
    expect(not (CHART / "crds").exists(), "the chart still has a crds/ directory (helm never upgrades it; the CRD is templates/crd.yaml)")
    committed = yaml.safe_load(top)
    rendered = [o for o in tools.template() if o.get("kind") == "CustomResourceDefinition"]
    expect(len(rendered) == 1, f"helm renders {len(rendered)} CRDs by default")
    crd = rendered[0]
    expect(crd["spec"] == committed["spec"], "helm's rendering of the CRD's spec differs from crds/jobqueue.yaml")
    expect(crd["metadata"]["name"] == committed["metadata"]["name"], f"the CRD is named {crd['metadata']['name']}")
    expect(crd["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep", "crds.keep (the default) does not annotate the CRD helm.sh/resource-policy: keep")
    expect(crd["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm", "the CRD lacks the chart's labels")
    unkept = one(tools.template("--set", "crds.keep=false"), "CustomResourceDefinition")
    expect("helm.sh/resource-policy" not in unkept["metadata"].get("annotations", {}), "crds.keep=false still keeps the CRD")
    none = [o for o in tools.template("--set", "crds.install=false") if o.get("kind") == "CustomResourceDefinition"]
    expect(not none, "crds.install=false still renders the CRD")
    return f"templates/crd.yaml is crds/jobqueue.yaml ({len(top)} bytes) under crds.install; keep annotation by default, none with crds.keep=false; no CRD with crds.install=false"


def check_validate_default(tools: Tools) -> str:
    return validate_objects(tools, tools.template("--include-crds"), "default values")


def check_validate_all_on(tools: Tools) -> str:
    return validate_objects(tools, tools.template("--include-crds", "-f", str(ALL_ON)), "all-on values")


def check_all_on_renders_everything(tools: Tools) -> str:
    kinds = sorted({o["kind"] for o in tools.template("-f", str(ALL_ON))})
    templates = sorted(p.name for p in (CHART / "templates").glob("*.yaml"))
    wanted = {
        "ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule",
        "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor",
    }
    expect(wanted <= set(kinds), f"all-on values render {kinds}; missing {sorted(wanted - set(kinds))}")
    default_kinds = sorted({o["kind"] for o in tools.template()})
    optional = {"ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "ServiceMonitor"}
    expect(not optional & set(default_kinds), f"the default values render optional objects: {default_kinds}")
    return f"{len(templates)} templates; default renders {default_kinds}; all-on adds {sorted(set(kinds) - set(default_kinds))}"


def check_rbac_default(tools: Tools) -> str:
    objects = tools.template()
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    deployment = one(objects, "Deployment")
    expect(deployment["spec"]["template"]["spec"]["serviceAccountName"] == sa, "the Deployment does not run as the chart's ServiceAccount")
    lease = env_map(deployment["spec"]["template"]["spec"]["containers"][0])["JOBQUEUE_LEASE_NAME"]
    granted = grants(objects, (RELEASE_NAMESPACE, sa))
    allowed = expected_grants("*cluster*", lease, [])
    extra = granted - allowed
    missing = allowed - granted
    expect(
        not extra and not missing,
        "the default render's grants differ from the operator's rules:\n  more: "
        + (describe(extra) or "-")
        + "\n  less: "
        + (describe(missing) or "-"),
    )
    roles = by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
    for role in roles:
        for rule in role.get("rules", []):
            for field in ("apiGroups", "resources", "verbs"):
                expect("*" not in rule.get(field, []), f"{name_of(role)} uses a wildcard in {field}")
    return f"exactly {len(granted)} grants (cluster-wide: {len(allowed) - 3}, Lease {lease}: 3)"


def check_rbac_namespaced(tools: Tools) -> str:
    objects = tools.template("-f", str(ALL_ON))
    values = yaml.safe_load(ALL_ON.read_text())
    expect(len(values["watchNamespaces"]) == 1, "all-on values watch one namespace")
    watched = values["watchNamespaces"][0]
    expect(not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding"), "a namespaced install renders cluster-wide RBAC")
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    lease = values["operator"]["leaderElection"]["leaseName"]
    extra_scale = [(t["apiGroup"], t["resource"]) for t in values["rbac"]["extraScaleTargets"]]
    granted = grants(objects, (RELEASE_NAMESPACE, sa))
    allowed = expected_grants(watched, lease, extra_scale)
    expect(
        granted == allowed,
        "namespaced grants differ:\n  more: " + (describe(granted - allowed) or "-") + "\n  less: " + (describe(allowed - granted) or "-"),
    )
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    expect(container["args"] == ["operator", f"--namespace={watched}"], f"the operator is not told to watch only {watched}: args {container['args']}")
    # The deprecated single string gives the same Role and arguments.
    legacy = tools.template("--set", f"watchNamespace={watched}")
    legacy_sa = one(legacy, "ServiceAccount")["metadata"]["name"]
    in_watched = {g for g in grants(legacy, (RELEASE_NAMESPACE, legacy_sa)) if g[0] == watched}
    expect(in_watched == {g for g in expected_grants(watched, "", []) if g[0] == watched}, "watchNamespace (a string) does not grant the rules in that namespace")
    legacy_args = one(legacy, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    expect(legacy_args == ["operator", f"--namespace={watched}"], f"watchNamespace (a string): args {legacy_args}")
    # Several namespaces: a Role in each, one --namespace each, one process.
    several = tools.template("--set", "watchNamespaces={a,b}")
    several_sa = one(several, "ServiceAccount")["metadata"]["name"]
    several_grants = grants(several, (RELEASE_NAMESPACE, several_sa))
    for ns in ("a", "b"):
        in_ns = {g for g in several_grants if g[0] == ns}
        expect(in_ns == {g for g in expected_grants(ns, "", []) if g[0] == ns}, f"watchNamespaces={{a,b}} does not grant the rules in {ns}")
    several_args = one(several, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    expect(several_args == ["operator", "--namespace=a", "--namespace=b"], f"watchNamespaces={{a,b}}: args {several_args}")
    both = tools.run_helm("template", RELEASE, str(CHART), "--set", "watchNamespace=a", "--set", "watchNamespaces={b}", ok=False)
    expect(both.returncode != 0 and "not both" in both.stderr, "watchNamespace and watchNamespaces together are accepted")
    no_rbac = tools.template("--set", "rbac.create=false")
    expect(not [o for o in no_rbac if o["kind"].endswith(("Role", "RoleBinding"))], "rbac.create=false still renders RBAC")
    return f"namespace {watched} only (a list, or the deprecated string): {len(granted)} grants incl. {extra_scale[0][1]}/scale, --namespace={watched}; a and b: a Role and a flag each; rbac.create=false renders none"


def check_deployment(tools: Tools) -> str:
    env_names = operator_env_names()
    checked = []
    for label, extra in (("default", []), ("all-on", ["-f", str(ALL_ON)])):
        objects = tools.template(*extra)
        d = one(objects, "Deployment")
        pod = d["spec"]["template"]["spec"]
        expect(len(pod["containers"]) == 1, "one container")
        c = pod["containers"][0]
        values = yaml.safe_load(ALL_ON.read_text()) if extra else {}
        expect(c["args"] == ["operator", *(f"--namespace={n}" for n in values.get("watchNamespaces", []))], f"{label}: args {c['args']}")
        env = env_map(c)
        # Leader election is on, with an identity and the Lease's namespace from the pod.
        expect("JOBQUEUE_NO_LEADER_ELECTION" not in env, f"{label}: leader election is turned off")
        expect(env.get("POD_NAME") == {"fieldRef": {"fieldPath": "metadata.name"}}, f"{label}: POD_NAME")
        expect(env.get("POD_NAMESPACE") == {"fieldRef": {"fieldPath": "metadata.namespace"}}, f"{label}: POD_NAMESPACE")
        # Every variable is one the operator reads (extraEnv aside).
        extra_env = {e["name"] for e in (yaml.safe_load(ALL_ON.read_text())["operator"]["extraEnv"] if extra else [])}
        unknown = set(env) - env_names - extra_env
        expect(not unknown, f"{label}: the operator reads no {sorted(unknown)} (see src/cli/operator.rs)")
        # The HTTP endpoints: one port, probed on /healthz and /readyz.
        port = c["ports"][0]
        expect(port["name"] == "metrics", "the container port is named metrics")
        expect(env["JOBQUEUE_METRICS_ADDR"] == f"0.0.0.0:{port['containerPort']}", f"{label}: metrics address {env['JOBQUEUE_METRICS_ADDR']} vs port {port['containerPort']}")
        expect(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, f"{label}: liveness probe")
        expect(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, f"{label}: readiness probe")
        expect(c["startupProbe"]["httpGet"]["path"] == "/healthz", f"{label}: startup probe")
        expect(c["resources"].get("requests", {}).keys() >= {"cpu", "memory"}, f"{label}: resource requests")
        # Hardening.
        psc, sc = pod["securityContext"], c["securityContext"]
        expect(psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is True, f"{label}: runAsNonRoot")
        expect(sc.get("readOnlyRootFilesystem") is True, f"{label}: readOnlyRootFilesystem")
        expect(sc.get("allowPrivilegeEscalation") is False, f"{label}: allowPrivilegeEscalation")
        expect(sc.get("capabilities", {}).get("drop") == ["ALL"] and not sc["capabilities"].get("add"), f"{label}: capabilities")
        expect(psc.get("seccompProfile") == {"type": "RuntimeDefault"} == sc.get("seccompProfile"), f"{label}: seccomp")
        expect(psc.get("runAsUser", 0) != 0, f"{label}: runs as root")
        # The metrics Service reaches the pods' metrics port.
        svc = one(objects, "Service")
        expect(svc["spec"]["ports"][0]["targetPort"] == "metrics", "the Service targets the metrics port")
        expect(svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items(), "the Service selects the operator's pods")
        checked.append(f"{label} ({d['spec']['replicas']} replicas)")
    one_replica = one(tools.template("--set", "replicaCount=1"), "Deployment")
    expect(one_replica["spec"]["replicas"] == 1, "replicaCount is not applied")
    return "leader election, probes, flags, hardening: " + ", ".join(checked) + "; " + check_anti_affinity(tools)


def check_anti_affinity(tools: Tools) -> str:
    """The replicas prefer different nodes by default; `affinity` replaces the default."""

    def affinity(*args: str) -> dict | None:
        d = one(tools.template(*args), "Deployment")
        return d["spec"]["template"]["spec"].get("affinity"), d["spec"]["template"]["metadata"]["labels"]

    soft, labels = affinity()
    expect(soft is not None, "no default affinity")
    terms = soft["podAntiAffinity"].get("preferredDuringSchedulingIgnoredDuringExecution", [])
    expect(len(terms) == 1 and "requiredDuringSchedulingIgnoredDuringExecution" not in soft["podAntiAffinity"], f"the default anti-affinity is not one preferred term: {soft}")
    term = terms[0]["podAffinityTerm"]
    expect(term["topologyKey"] == "kubernetes.io/hostname", f"the default anti-affinity spreads by {term['topologyKey']}")
    expect(term["labelSelector"]["matchLabels"].items() <= labels.items() and term["labelSelector"]["matchLabels"], "the default anti-affinity does not select the operator's pods")
    hard, _ = affinity("--set", "podAntiAffinity=hard")
    required = hard["podAntiAffinity"].get("requiredDuringSchedulingIgnoredDuringExecution", [])
    expect(len(required) == 1 and required[0]["topologyKey"] == "kubernetes.io/hostname", f"podAntiAffinity=hard: {hard}")
    off, _ = affinity("--set", "podAntiAffinity=none")
    expect(off is None, f"podAntiAffinity=none still renders {off}")
    given = yaml.safe_load(ALL_ON.read_text())["affinity"]
    mine, _ = affinity("-f", str(ALL_ON))
    expect(mine == given, "a given affinity does not replace the default")
    return "anti-affinity by hostname (preferred by default, hard, none, or the given affinity)"


def check_monitoring_objects(tools: Tools) -> str:
    objects = tools.template("-f", str(ALL_ON))
    sm = one(objects, "ServiceMonitor")
    svc = one(objects, "Service")
    ep = sm["spec"]["endpoints"][0]
    expect(ep["port"] == svc["spec"]["ports"][0]["name"] and ep["path"] == "/metrics", "the ServiceMonitor scrapes the Service's metrics port")
    expect(ep.get("honorLabels") is True, "honorLabels keeps the JobQueues' namespace and name labels")
    expect(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "the ServiceMonitor selects the metrics Service")
    pdb = one(objects, "PodDisruptionBudget")
    expect(pdb["spec"]["selector"]["matchLabels"].items() <= one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items(), "the PDB selects the operator's pods")
    netpol = one(objects, "NetworkPolicy")
    expect(netpol["spec"]["policyTypes"] == ["Ingress", "Egress"], "the NetworkPolicy limits both directions")
    ingress_ports = [p["port"] for rule in netpol["spec"]["ingress"] for p in rule["ports"]]
    expect(ingress_ports == ["metrics"], f"ingress is open on {ingress_ports}")
    egress = check_redis_egress(tools)
    cm = one(objects, "ConfigMap")
    shipped = json.loads((CHART / "dashboards" / "jobqueue.json").read_text())
    expect(json.loads(cm["data"]["jobqueue.json"]) == shipped, "the dashboard ConfigMap differs from dashboards/jobqueue.json")
    expect(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "the dashboard ConfigMap has the Grafana sidecar's label")
    return "ServiceMonitor, PrometheusRule, PodDisruptionBudget, NetworkPolicy, dashboard ConfigMap wired to the operator; " + egress


def check_redis_egress(tools: Tools) -> str:
    """The NetworkPolicy's Redis rule has the values' ports and CIDRs."""

    def redis_rule(values: dict, *args: str) -> dict:
        netpol = one(tools.template("--set", "networkPolicy.enabled=true", *args), "NetworkPolicy")
        ports = values["networkPolicy"]["egress"]["redis"]["ports"]
        rules = [r for r in netpol["spec"]["egress"] if [p.get("port") for p in r.get("ports", [])] == ports]
        expect(len(rules) == 1, f"no single egress rule on the Redis ports {ports}: {netpol['spec']['egress']}")
        expect(all(p["protocol"] == "TCP" for p in rules[0]["ports"]), "the Redis egress is not TCP")
        return rules[0]

    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    private = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    expect(defaults["networkPolicy"]["egress"]["redis"]["cidrs"] == private, "the documented default Redis CIDRs changed")
    rule = redis_rule(defaults)
    expect([t["ipBlock"]["cidr"] for t in rule.get("to", [])] == private, f"the default Redis egress goes to {rule.get('to')}")
    all_on = yaml.safe_load(ALL_ON.read_text())
    rule = redis_rule(all_on, "-f", str(ALL_ON))
    want = all_on["networkPolicy"]["egress"]["redis"]["cidrs"]
    expect([t["ipBlock"]["cidr"] for t in rule.get("to", [])] == want, f"the all-on Redis egress goes to {rule.get('to')}, not {want}")
    anywhere = redis_rule(defaults, "--set", "networkPolicy.egress.redis.cidrs=null")
    expect("to" not in anywhere, "empty Redis CIDRs do not mean any destination")
    return f"Redis egress on the values' ports to {len(private)} private ranges by default, to the values' CIDRs, anywhere when emptied"


def check_metric_names(tools: Tools) -> str:
    series, bases = exported_metrics()
    known = series | EXTERNAL_METRICS
    used_alerts, used_dash = set(), set()
    rule_obj = one(tools.template("-f", str(ALL_ON)), "PrometheusRule")
    alerts = []
    for group in rule_obj["spec"]["groups"]:
        for rule in group["rules"]:
            alerts.append(rule["alert"])
            used_alerts |= promql_metrics(rule["expr"])
    for required in ("JobQueueDeadLettersGrowing", "JobQueueExpiredLeasesPilingUp", "JobQueueOrphanedJobs", "JobQueueRedisUnavailable", "JobQueueReconcileErrors", "JobQueueNotReady", "JobQueueLeaseTooShort", "JobQueueCountsStale"):
        expect(required in alerts, f"no alert {required}")
    rules = {r["alert"]: r for g in rule_obj["spec"]["groups"] for r in g["rules"] if "alert" in r}
    for alert, rule in rules.items():
        expect(rule.get("annotations", {}).get("runbook_url", "").count("#") == 1, f"{alert} has no runbook_url with a section")
    # The alerts that watch one health series each watch the right one.
    for alert, metric in (
        ("JobQueueNotReady", "jobqueue_queue_ready"),
        ("JobQueueRedisUnavailable", "jobqueue_redis_up"),
        ("JobQueueLeaseTooShort", "jobqueue_lease_too_short"),
        ("JobQueueCountsStale", "jobqueue_last_observed_timestamp_seconds"),
    ):
        expect(promql_metrics(rules[alert]["expr"]) == {metric}, f"{alert} does not watch {metric}: {rules[alert]['expr']}")
        expect(rules[alert].get("for"), f"{alert} fires on a single evaluation (no `for`)")
    orphaned = [r for g in rule_obj["spec"]["groups"] for r in g["rules"] if r.get("alert") == "JobQueueOrphanedJobs"]
    expect(promql_metrics(orphaned[0]["expr"]) == {"jobqueue_orphaned"}, f"JobQueueOrphanedJobs does not watch jobqueue_orphaned: {orphaned[0]['expr']}")
    expect(orphaned[0].get("for") == "1h", f"JobQueueOrphanedJobs does not wait orphanedJobs.for (1h in the all-on values): {orphaned[0].get('for')}")
    expect("purge --orphans" in orphaned[0]["annotations"]["description"], "JobQueueOrphanedJobs does not say how to purge")
    dash = json.loads((CHART / "dashboards" / "jobqueue.json").read_text())
    exprs = 0

    def targets(panels):
        for p in panels:
            yield from p.get("targets", [])
            yield from targets(p.get("panels", []))

    for t in targets(dash["panels"]):
        used_dash |= promql_metrics(grafana_expr(t["expr"]))
        exprs += 1
    for var in dash["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        m = re.match(r"label_values\((.*),\s*\w+\)$", query or "")
        if m:
            used_dash |= promql_metrics(m.group(1))
    unknown = (used_alerts | used_dash) - known
    expect(not unknown, f"not exported by the operator: {sorted(unknown)}; it exports {sorted(series)}")
    doc = (ROOT / "docs" / "operations.md").read_text()
    in_doc = set(re.findall(r"\bjobqueue_[a-z_]+\b", doc))
    unknown_doc = in_doc - series - bases
    expect(not unknown_doc, f"docs/operations.md names metrics the operator does not export: {sorted(unknown_doc)}")
    missing_doc = bases - {b for b in bases if any(s in in_doc for s in (b, b + "_total", b + "_bucket"))}
    expect(not missing_doc, f"docs/operations.md does not describe {sorted(missing_doc)}")
    return (
        f"{len(bases)} metrics exported; {len(alerts)} alerts and {exprs} dashboard queries parse and use "
        f"{len((used_alerts | used_dash) & series)} of them; the docs describe all"
    )


def check_schema_refuses(tools: Tools) -> str:
    cases = [
        (["--set", "replicaCount=0"], "replicaCount"),
        (["--set", "operator.logFormat=xml"], "logFormat"),
        (["--set", "metrics.serviceMonitor.intervall=30s"], "intervall"),
        (["--set", "watchNamespace=Not_A_Namespace"], "watchNamespace"),
        (["--set", "watchNamespaces={Not_A_Namespace}"], "watchNamespaces"),
        (["--set", "watchNamespaces={a,a}"], "watchNamespaces"),
        (["--set", "podAntiAffinity=sometimes"], "podAntiAffinity"),
        (["--set", "crds.install=maybe"], "install"),
        (["--set", "networkPolicy.egress.redis.cidrs={10.0.0.1}"], "cidrs"),
        (["--set-json", "networkPolicy.egress.redis.ports=[]"], "ports"),
        (["--set", "operator.leaderElection.renewBeforeSeconds=15"], "renewBeforeSeconds"),
        (["--set", "podDisruptionBudget.enabled=true", "--set", "replicaCount=1"], "minAvailable"),
    ]
    for args, word in cases:
        proc = tools.run_helm("template", RELEASE, str(CHART), *args, ok=False)
        expect(proc.returncode != 0, f"helm template {' '.join(args)} was accepted")
        expect(word in proc.stderr, f"helm template {' '.join(args)}: the error does not name {word}:\n{proc.stderr}")
    return f"{len(cases)} bad value sets refused, each naming the culprit"


def check_package(tools: Tools) -> str:
    with tempfile.TemporaryDirectory() as out:
        tools.run_helm("package", str(CHART), "--destination", out)
        packages = list(Path(out).glob("*.tgz"))
        expect(len(packages) == 1, "helm package made no archive")
        listing = subprocess.run(["tar", "-tzf", str(packages[0])], capture_output=True, text=True, check=True).stdout.split()
    expect("jobqueue-operator/templates/crd.yaml" in listing, "the package lacks the CRD template")
    expect(not [f for f in listing if "/crds/" in f], "the package has a crds/ directory, which helm never upgrades")
    expect("jobqueue-operator/dashboards/jobqueue.json" in listing, "the package lacks the dashboard")
    expect(not [f for f in listing if "/ci/" in f], "the package holds ci/ values")
    return f"{packages[0].name}: {len(listing)} files"


def check_examples(tools: Tools) -> str:
    objects, queues = [], 0
    files = sorted((ROOT / "examples").glob("*.yaml"))
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc:
                continue
            if doc.get("kind") == "JobQueue":
                queues += 1  # validated against the CRD by tests/crd.rs
            else:
                objects.append(doc)
    summary = validate_objects(tools, objects, "examples/")
    return f"{len(files)} files: {summary}; {queues} JobQueues left to tests/crd.rs"


def check_dockerfile(tools: Tools) -> str:
    """No engine runs here: check the Dockerfile's shape and its build context instead."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [l.strip() for l in re.sub(r"\\\n", " ", text).splitlines() if l.strip() and not l.strip().startswith("#")]
    stages, current = [], None
    for line in lines:
        instr, _, rest = line.partition(" ")
        if instr.upper() == "FROM":
            current = {"from": rest.split()[0], "lines": []}
            stages.append(current)
        elif current is not None:
            current["lines"].append((instr.upper(), rest.strip()))
    expect(len(stages) >= 2, "the Dockerfile is not multi-stage")
    final = stages[-1]
    expect(re.match(r"(gcr\.io/distroless/(static|cc)[\w.-]*(:[\w.-]+)?|scratch)$", final["from"]) is not None, f"the runtime base is {final['from']}, not distroless or scratch")
    copies = [rest for instr, rest in final["lines"] if instr in ("COPY", "ADD")]
    expect(len(copies) == 1 and copies[0].startswith("--from="), f"the runtime stage copies more than the binary: {copies}")
    expect(copies[0].split()[-1] == "/jobqueue", f"the binary lands at {copies[0].split()[-1]}")
    users = [rest for instr, rest in final["lines"] if instr == "USER"]
    expect(users and re.match(r"^[1-9][0-9]*(:[1-9][0-9]*)?$", users[-1]) is not None, f"the runtime user is {users}, not a numeric non-root one")
    expect(("ENTRYPOINT", '["/jobqueue"]') in final["lines"], "the entrypoint is not the binary")
    expect(("CMD", '["operator"]') in final["lines"], "the image does not run the operator by default")
    expect(not [i for i, _ in final["lines"] if i == "RUN"], "the runtime stage runs commands (it has no shell)")
    build = " ".join(rest for instr, rest in stages[0]["lines"] if instr == "RUN")
    expect("cargo build --release --locked --bin jobqueue" in build, "the build stage does not build the locked release binary")
    cargo = (ROOT / "Cargo.toml").read_text()
    msrv = re.search(r'^rust-version\s*=\s*"(\d+)\.(\d+)', cargo, re.M)
    rust = re.search(r"^ARG RUST_VERSION=(\d+)\.(\d+)", text, re.M)
    expect(msrv is not None and rust is not None, "no rust-version in Cargo.toml or RUST_VERSION in the Dockerfile")
    expect(tuple(map(int, rust.groups())) >= tuple(map(int, msrv.groups())), f"the builder's Rust {rust.group(1)}.{rust.group(2)} is older than rust-version")
    # The build context keeps what the build reads: the crate's manifest, sources and the
    # Lua scripts it embeds (include_str!).
    ignored = [l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    embedded = set(re.findall(r'include_str!\("\.\./\.\./([^/"]+)/', (ROOT / "src" / "queue" / "scripts.rs").read_text()))
    for needed in ["Cargo.toml", "Cargo.lock", "src", *sorted(embedded)]:
        hit = [p for p in ignored if fnmatch.fnmatch(needed, p.strip("/")) and not p.startswith("!")]
        expect(not hit, f".dockerignore leaves {needed} out of the build context ({hit})")
    for unwanted in ("target", ".git", ".tools"):
        expect(unwanted in ignored, f".dockerignore sends {unwanted}/ to the engine")
    return f"{len(stages)} stages, runtime {final['from']} as {users[-1]} with /jobqueue alone; context keeps {', '.join(['src', *sorted(embedded)])}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def check_runbook_links(tools: Tools) -> str:
    doc = (ROOT / "docs" / "operations.md").read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", doc, re.M)}
    rule = one(tools.template("--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
    wanted = []
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            url = r["annotations"]["runbook_url"]
            expect(url.split("#")[0].endswith("/docs/operations.md"), f"{r['alert']}: runbook {url}")
            wanted.append((r["alert"], url.split("#")[1]))
    wanted += [("docs/operations.md", a) for a in re.findall(r"\]\(#([^)]+)\)", doc)]
    broken = [f"{who}: #{a}" for who, a in wanted if a not in anchors]
    expect(not broken, "links to no heading of docs/operations.md: " + ", ".join(broken))
    return f"{len(wanted)} links (alert runbooks and the guide's own) reach a heading"


CHECKS = [
    ("helm lint --strict", check_lint),
    ("chart CRD template is crds/jobqueue.yaml", check_crd_template),
    ("default render validates", check_validate_default),
    ("all-on render validates", check_validate_all_on),
    ("optional objects off by default, on in all-on", check_all_on_renders_everything),
    ("default RBAC grants exactly the operator's rules", check_rbac_default),
    ("namespaced RBAC grants exactly the operator's rules", check_rbac_namespaced),
    ("operator Deployment", check_deployment),
    ("monitoring objects", check_monitoring_objects),
    ("metric names and PromQL", check_metric_names),
    ("values schema refuses bad values", check_schema_refuses),
    ("helm package", check_package),
    ("examples validate", check_examples),
    ("Dockerfile", check_dockerfile),
    ("runbook links", check_runbook_links),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("-k", "--only", help="run the checks whose name contains this")
    args = parser.parse_args()
    tools = Tools(args.helm, args.node_modules)
    version = tools.run_helm("version", "--short").stdout.strip()
    print(f"chart-check: helm {version}, kubernetes-validate {kubernetes_validate.__version__}, Kubernetes schemas {', '.join(KUBE_VERSIONS)}")
    passed = failed = 0
    for name, check in CHECKS:
        if args.only and args.only not in name:
            continue
        try:
            detail = check(tools)
            print(f"ok   {name}: {detail}")
            passed += 1
        except Failed as e:
            print(f"FAIL {name}: {e}")
            failed += 1
        except Exception:
            print(f"FAIL {name}: unexpected error\n{traceback.format_exc()}")
            failed += 1
    print(f"chart-check: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
