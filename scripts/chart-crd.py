#!/usr/bin/env python3
"""Write the Helm chart's CRD template from crds/jobqueue.yaml (`make crds`).

The chart templates the CRD (rather than shipping it in crds/, which `helm upgrade`
never updates) under `crds.install`, with the chart's labels and, with `crds.keep`, the
`helm.sh/resource-policy: keep` annotation, as cert-manager's chart does. Everything
from `spec:` on is crds/jobqueue.yaml verbatim. With --check, fail when the template
differs from what would be written (tests/crd.rs and scripts/chart_check.py check too).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "crds" / "jobqueue.yaml"
TEMPLATE = ROOT / "charts" / "jobqueue-operator" / "templates" / "crd.yaml"

HEAD = """\
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: jobqueues.jobqueue.dev
"""

WRAPPED_HEAD = """\
{{- /* Generated from crds/jobqueue.yaml by scripts/chart-crd.py (`make crds`): edit src/crd.rs. */}}
{{- if .Values.crds.install }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: jobqueues.jobqueue.dev
  labels:
    {{- include "jobqueue.labels" . | nindent 4 }}
  {{- if .Values.crds.keep }}
  annotations:
    # Uninstalling the release (or turning crds.install off) leaves the CRD, and with it
    # every JobQueue, in place.
    helm.sh/resource-policy: keep
  {{- end }}
"""

TAIL = "{{- end }}\n"


def render() -> str:
    text = SOURCE.read_text()
    if not text.startswith(HEAD):
        sys.exit(f"{SOURCE} does not start with the expected header:\n{HEAD}")
    body = text[len(HEAD):]
    if not body.startswith("spec:\n"):
        sys.exit(f"{SOURCE}: `spec:` does not follow the metadata")
    if "{{" in body or "}}" in body:
        sys.exit(f"{SOURCE} holds template delimiters; escape them before templating")
    return WRAPPED_HEAD + body + ("" if body.endswith("\n") else "\n") + TAIL


def main() -> int:
    want = render()
    if sys.argv[1:] == ["--check"]:
        if not TEMPLATE.exists() or TEMPLATE.read_text() != want:
            print(f"{TEMPLATE.relative_to(ROOT)} differs from crds/jobqueue.yaml: run `make crds`", file=sys.stderr)
            return 1
        return 0
    TEMPLATE.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
