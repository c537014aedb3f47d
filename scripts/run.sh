#!/usr/bin/env bash
# wavegate's main job: `wavegate serve` against your cluster, or — when no cluster is
# configured — against the project's own local control plane loaded with the two seed
# incidents (a Service selecting no pods, a CNPG Database not yet created, a CockroachDB that
# split into two one-node clusters, and an app-of-apps parent mid-sync).
#
#   scripts/run.sh                # serve on 127.0.0.1:8080 (WAVEGATE_LISTEN to change)
#   KUBECONFIG=~/.kube/config scripts/run.sh   # your cluster: no seeds are loaded there
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
listen=${WAVEGATE_LISTEN:-127.0.0.1:8080}

local_plane=0
if [ -z "${KUBECONFIG:-}" ] && [ ! -f "$HOME/.kube/config" ]; then
  local_plane=1
  scripts/control-plane.sh up
  eval "$(scripts/control-plane.sh env)"
fi

echo "building wavegate…"
cargo build --quiet --bin wavegate --example crdb-standin

if [ "$local_plane" = 1 ]; then
  scripts/seed.sh
  # Seed 000 as it happened: each CockroachDB pod bootstrapped its own one-node cluster.
  target/debug/examples/crdb-standin \
    127.0.0.2:8080=1,1,15152a17-fcc9-4a51-8c04-af0ec0126551 \
    127.0.0.3:8080=1,1,2c4d3ec6-47f5-4161-97ff-ef4b12f595f0 &
  standin=$!
  trap 'kill $standin 2>/dev/null || true' EXIT
fi

url="http://$listen"
cat <<TXT

wavegate is starting on $url
  dashboard:  $url/
  a verdict:  curl -s $url/api/v1/health/services/cicd/forgejo
              curl -s $url/api/v1/health/databases.postgresql.cnpg.io/ddb/forgejo
              curl -s $url/api/v1/health/crdbclusters.crdb.cockroachlabs.com/prod/cockroachdb
  gates:      curl -s $url/api/v1/gates
  waves:      curl -s $url/api/v1/applications/argocd/platform/waves
  readiness:  curl -s $url/readyz ; metrics: curl -s $url/metrics
TXT
if [ "$local_plane" = 1 ]; then
  cat <<TXT
  fix seed 001 and watch the verdict change:
              export KUBECONFIG=$KUBECONFIG
              kubectl -n cicd patch service forgejo -p '{"spec":{"selector":{"app":"gitea"}}}'
TXT
fi
echo
# Argo CD's bundled health scripts of the pinned release (hack/argocd/go.mod), or of
# WAVEGATE_ARGOCD_VERSION (e.g. v3.6.1: the release your Argo CD runs), read from the Go module
# cache as they are (`go mod download` fetches the module once; nothing is copied into the
# repository): kinds without a check of wavegate's own are judged by them.
argocd_version=${WAVEGATE_ARGOCD_VERSION:-$(awk '$1 == "github.com/argoproj/argo-cd/v3" {print $2; exit}' hack/argocd/go.mod)}
case $argocd_version in v*) ;; *) argocd_version=v$argocd_version ;; esac
scripts_flag=()
if module=$(cd /tmp && GOTOOLCHAIN="${WAVEGATE_GOTOOLCHAIN:-auto}" \
    go mod download -json "github.com/argoproj/argo-cd/v3@$argocd_version" 2>/dev/null \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') && [ -d "$module/resource_customizations" ]; then
  scripts_flag=(--argocd-health-scripts "$module/resource_customizations")
else
  echo "Argo CD $argocd_version's health scripts are not available (go mod download failed):" \
    "kinds without a check of wavegate's own are judged by kstatus" >&2
fi
target/debug/wavegate serve --listen "$listen" "${scripts_flag[@]}"
