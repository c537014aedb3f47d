#!/usr/bin/env bash
# A bench identity for wavegate: a ServiceAccount of its own whose requests land in a FlowSchema of
# their own, so the API server's priority-and-fairness counters attribute every request it makes
# (apiserver_flowcontrol_dispatched_requests_total{flow_schema="wgbench-wavegate"}).
#
#   scripts/bench-identity.sh DIR   # writes DIR/kubeconfig (KUBECONFIG's cluster, the identity's token)
#
# Used by scripts/bench.sh and scripts/bench-bigapps.sh; the caller removes ClusterRoleBinding and
# FlowSchema `wgbench-wavegate` and the `wgbench-*` namespaces when it ends.
set -euo pipefail
dir=${1:?usage: scripts/bench-identity.sh DIR}
k() { kubectl --request-timeout=30s "$@"; }
k apply --server-side -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: wgbench-identity}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: wavegate, namespace: wgbench-identity}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: wgbench-wavegate}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: wavegate, namespace: wgbench-identity}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: wgbench-wavegate}
spec:
  priorityLevelConfiguration: {name: workload-low}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
    - subjects: [{kind: ServiceAccount, serviceAccount: {name: wavegate, namespace: wgbench-identity}}]
      resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
      nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
YAML
cp "$KUBECONFIG" "$dir/kubeconfig"
chmod 600 "$dir/kubeconfig"
kubectl --kubeconfig "$dir/kubeconfig" config set-credentials admin \
  --token="$(k -n wgbench-identity create token wavegate --duration=2h)" >/dev/null
