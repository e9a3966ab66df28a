{{/* The chart's name. */}}
{{- define "jobqueue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, used for every object. */}}
{{- define "jobqueue.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobqueue.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jobqueue.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobqueue.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "jobqueue.labels" -}}
helm.sh/chart: {{ include "jobqueue.chart" . }}
{{ include "jobqueue.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: jobqueue
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "jobqueue.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jobqueue.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "jobqueue.leaseName" -}}
{{- default (include "jobqueue.fullname" .) .Values.operator.leaderElection.leaseName }}
{{- end }}

{{- define "jobqueue.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The namespaced rules of the operator: the same whether bound cluster-wide (ClusterRole)
or in the one watched namespace (Role). Keep in step with docs/operations.md and with
scripts/chart_check.py, which fails when the rendered rules grant more.
*/}}
{{- define "jobqueue.rules" -}}
- apiGroups: ["jobqueue.dev"]
  resources: ["jobqueues"]
  # patch: the finalizer jobqueue.dev/cleanup, added and removed by JSON patches.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["jobqueue.dev"]
  resources: ["jobqueues/finalizers"]
  # Where an admission plugin (OwnerReferencesPermissionEnforcement) checks who may set
  # the finalizers of a JobQueue.
  verbs: ["update"]
- apiGroups: ["jobqueue.dev"]
  resources: ["jobqueues/status"]
  verbs: ["get", "patch"]
# Secrets, Deployments, StatefulSets and HPAs are watched into caches (list, watch):
# a reconcile reads them there, not with a request per queue; get stays for a cache miss.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments/scale", "statefulsets/scale"]
  verbs: ["get", "patch"]
{{- range .Values.rbac.extraScaleTargets }}
- apiGroups: [{{ .apiGroup | quote }}]
  resources: [{{ printf "%s/scale" .resource | quote }}]
  verbs: ["get", "patch"]
{{- end }}
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "watch"]
{{- /* KEDA's ScaledObjects, to refuse a target KEDA scales (none where KEDA is not
installed: the LIST answers 404). */}}
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list", "watch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{- /* The watched namespaces as a JSON list: watchNamespaces, or the deprecated
watchNamespace string as a list of one; empty for every namespace. */}}
{{- define "jobqueue.watchNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- toJson .Values.watchNamespaces }}
{{- else if .Values.watchNamespace }}
{{- toJson (list .Values.watchNamespace) }}
{{- else }}
{{- toJson list }}
{{- end }}
{{- end }}
