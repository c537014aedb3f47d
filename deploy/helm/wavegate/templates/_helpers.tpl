{{/*
Names are fixed, as in the Kustomize base: deploy/README.md, the admission policy and the hook
examples name the ServiceAccount wavegate and the Service wavegate. One release per namespace.
*/}}

{{/* Labels every object carries (the base's own labels plus its kustomization's `labels:`). */}}
{{- define "wavegate.labels" -}}
app.kubernetes.io/name: wavegate
app.kubernetes.io/part-of: wavegate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The server pod's selector labels. */}}
{{- define "wavegate.selectorLabels" -}}
app.kubernetes.io/name: wavegate
app.kubernetes.io/component: server
{{- end }}

{{/* Namespace-scoped variant (deploy/overlays/namespaced): Roles, no cluster-scoped objects. */}}
{{- define "wavegate.namespaced" -}}
{{- if .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/* The read rules of deploy/base/clusterrole.yaml (deploy/README.md, "RBAC"), plus the
membership-proof reads of deploy/components/crdb-credentials. */}}
{{- define "wavegate.rules" -}}
# Service check: the Service, the pods its selector matches (and near-matching pods for the
# diagnosis), CockroachDB pods to probe.
- apiGroups: [""]
  resources: [services, pods]
  verbs: [get, list, watch]
# Service check: ready endpoints (label kubernetes.io/service-name).
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
# CloudNativePG Database check (and the referenced Cluster's readiness).
- apiGroups: [postgresql.cnpg.io]
  resources: [databases, databaseroles, clusters]
  verbs: [get, list, watch]
# CockroachDB single-cluster check: node count from the spec.
- apiGroups: [crdb.cockroachlabs.com]
  resources: [crdbclusters]
  verbs: [get, list, watch]
# Argo CD Application check (app-of-apps) and the waves view.
- apiGroups: [argoproj.io]
  resources: [applications]
  verbs: [get, list, watch]
# The gate controller reads its gates ...
- apiGroups: [wavegate.dev]
  resources: [wavegates]
  verbs: [get, list, watch]
# ... writes their status subresource (server-side apply is a PATCH) ...
- apiGroups: [wavegate.dev]
  resources: [wavegates/status]
  verbs: [patch]
# ... and marks each new status in one annotation, where Argo CD notices it (src/gate/stamp.rs);
# the admission policy wavegate-gate-verdict-only narrows this patch to that annotation.
- apiGroups: [wavegate.dev]
  resources: [wavegates]
  verbs: [patch]
# Not a resource but a mark: the admission policies narrow every update by whoever holds it
# (in the object's namespace) and may not `update` the object (deploy/base/clusterrole.yaml).
- apiGroups: [wavegate.dev]
  resources: [writers]
  verbs: [narrowed]
# One Event per status transition (src/events.rs), through kube-rs's recorder.
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if not (include "wavegate.namespaced" .) }}
# Which cluster this is: the UID of Namespace kube-system, so an Argo CD cluster Secret that
# names this cluster by another address is served as home, never by a second gate writer
# (cluster-scoped, so only in the ClusterRole).
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [kube-system]
  verbs: [get]
{{- end }}
{{- if .Values.crdbCredentials.enabled }}
# Membership proof: the owner chain pod → CrdbNode (current operator) or StatefulSet (older
# operator) → CrdbCluster. Read-only.
- apiGroups: [crdb.cockroachlabs.com]
  resources: [crdbnodes]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch]
{{- end }}
{{- end }}

{{/* Annotation mode's only extra right: `patch` on the four annotated kinds. */}}
{{- define "wavegate.annotateRules" -}}
- apiGroups: [""]
  resources: [services]
  verbs: [patch]
- apiGroups: [postgresql.cnpg.io]
  resources: [databases]
  verbs: [patch]
- apiGroups: [crdb.cockroachlabs.com]
  resources: [crdbclusters]
  verbs: [patch]
- apiGroups: [argoproj.io]
  resources: [applications]
  verbs: [patch]
# Not a resource but a mark: the admission policies narrow every update by whoever holds it
# (in the object's namespace) and may not `update` the object (deploy/base/clusterrole.yaml).
- apiGroups: [wavegate.dev]
  resources: [writers]
  verbs: [narrowed]
{{- end }}

{{- define "wavegate.image" -}}
{{- if .Values.image.digest }}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else }}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{ end }}
{{- end }}
