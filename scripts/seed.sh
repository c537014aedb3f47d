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

ready_pod() { # namespace name ip
  k -n "$1" patch pod "$2" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"},{\"type\":\"ContainersReady\",\"status\":\"True\"},{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}" >/dev/null
}
ready_pod cicd forgejo-0 10.244.0.10
ready_pod prod cockroachdb-0 127.0.0.2
ready_pod prod cockroachdb-1 127.0.0.3
# Argo CD's Application CRD has no status subresource: Argo CD writes status with a plain patch.
k -n argocd patch application platform --type=merge --patch-file "$here/tests/scenarios/platform-app-status.json" >/dev/null
echo "seed scenarios loaded: cicd/forgejo (selector mismatch), ddb/forgejo (Database not applied), prod/cockroachdb (2 pods), argocd/platform"
