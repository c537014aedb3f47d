#!/usr/bin/env bash
# Load the seed scenarios (tests/scenarios/) into the cluster KUBECONFIG points at, playing the
# kubelet and the operators by patching status: the Forgejo pod is Running and Ready with a
# non-loopback IP (so kube-controller-manager publishes endpoints), the CockroachDB pods are
# Ready on 127.0.0.2/127.0.0.3 (where stand-in CockroachDB servers answer), and the parent
# Application carries the status Argo CD would have written mid-sync.
#
# Only for the local control plane: it creates namespaces cicd, ddb, prod and argocd.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
: "${KUBECONFIG:?KUBECONFIG must point at the local control plane (scripts/control-plane.sh env)}"
k() { kubectl --request-timeout=20s "$@"; }

k apply --server-side -f "$here/deploy/crd/wavegate.dev_wavegates.yaml" >/dev/null
k wait --for=condition=Established --timeout=30s crd/wavegates.wavegate.dev >/dev/null
for f in seed-001-forgejo.yaml seed-000-cockroachdb.yaml platform-app.yaml; do
  k apply --server-side --force-conflicts -f "$here/tests/scenarios/$f" >/dev/null
done

# Wave 3 of platform (the Database, its Cluster and Forgejo's Deployment) is platform's from an
# earlier sync: Argo CD's tracking names each, so the views Argo CD's proxy scopes to platform
# (the UI extension's) judge them.
k -n ddb annotate databases.postgresql.cnpg.io forgejo --overwrite \
  "argocd.argoproj.io/tracking-id=platform:postgresql.cnpg.io/Database:ddb/forgejo" >/dev/null
k -n ddb annotate clusters.postgresql.cnpg.io pg --overwrite \
  "argocd.argoproj.io/tracking-id=platform:postgresql.cnpg.io/Cluster:ddb/pg" >/dev/null
k -n cicd annotate deployments.apps forgejo --overwrite \
  "argocd.argoproj.io/tracking-id=platform:apps/Deployment:cicd/forgejo" >/dev/null

ready_pod() { # namespace name ip
  k -n "$1" patch pod "$2" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"},{\"type\":\"ContainersReady\",\"status\":\"True\"},{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}" >/dev/null
}
ready_pod cicd forgejo-0 10.244.0.10
ready_pod prod cockroachdb-0 127.0.0.2
ready_pod prod cockroachdb-1 127.0.0.3
# Argo CD's Application CRD has no status subresource: Argo CD writes status with a plain patch.
k -n argocd patch application platform --type=merge --patch-file "$here/tests/scenarios/platform-app-status.json" >/dev/null

# Play Argo CD syncing argocd/platform to a new revision, wave by wave, so the waves timeline has
# real times. Like Argo CD, each resource is applied with the field manager `argocd-controller`
# (argo-cd common/common.go ArgoCDSSAManager, controller/sync.go) and carries the revision's
# change, so the API server stamps managedFields[argocd-controller].time; the operation state is
# persisted after each wave (controller/appcontroller.go processRequestedAppOperation →
# setOperationState) with syncResult.resources growing. Waves 0 and 1 are Healthy to Argo CD at
# once (a Ready pod, a ClusterIP Service); wave 2's gate is not (the Service selects no pod), so
# the sync stays Running, waiting on it, and wave 3 is not reached.
rev=$( (date +%s%N; echo platform) | sha1sum | cut -c1-40)
started=$(date -u +%FT%TZ)
results='[]'
operation_state() { # message
  k -n argocd patch application platform --type=merge -p "$(jq -cn --arg msg "$1" --arg started "$started" \
    --arg rev "$rev" --argjson rs "$results" '{status: {operationState: {
      operation: {sync: {revision: $rev}, initiatedBy: {automated: true}},
      phase: "Running", message: $msg, startedAt: $started,
      syncResult: {revision: $rev, resources: $rs}}}}')" >/dev/null
}
argocd_apply() { # apiVersion kind namespace name
  local group=""
  [[ "$1" == */* ]] && group=${1%/*}
  k apply --server-side --field-manager=argocd-controller -f - >/dev/null <<MANIFEST
apiVersion: $1
kind: $2
metadata:
  name: $4
  namespace: $3
  annotations:
    argocd.argoproj.io/tracking-id: "platform:$group/$2:$3/$4"
    platform.example.com/git-revision: "$rev"
MANIFEST
  results=$(jq -c --arg g "$group" --arg v "${1#*/}" --arg k "$2" --arg ns "$3" --arg n "$4" \
    '. + [{group: $g, version: $v, kind: $k, namespace: $ns, name: $n, status: "Synced",
           message: (($k | ascii_downcase) + "/" + $n + " serverside-applied"), syncPhase: "Sync"}]' <<<"$results")
}
operation_state "one or more tasks are running"
sleep 1
argocd_apply v1 Pod cicd forgejo-0
operation_state "one or more tasks are running"
sleep 1
argocd_apply v1 Service cicd forgejo
operation_state "one or more tasks are running"
sleep 1
argocd_apply wavegate.dev/v1alpha1 WaveGate cicd forgejo-ready
operation_state "waiting for healthy state of wavegate.dev/WaveGate/forgejo-ready"
echo "seed scenarios loaded: cicd/forgejo (selector mismatch), ddb/forgejo (Database not applied), prod/cockroachdb (2 pods), argocd/platform (sync of $rev running, waiting on wave 2)"
