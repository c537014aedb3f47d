#!/usr/bin/env bash
# Helm, built from its Go module (hack/helm pins helm.sh/helm/v3), cached under
# ~/.cache/wavegate/bin like the control plane's binaries. Used by tests/offline/helm_chart.rs to render
# deploy/helm/wavegate next to the Kustomize variants.
#
# Usage: scripts/helm.sh build   build once (no-op when the binary is there)
#        scripts/helm.sh path    print the binary's path (building it first if needed)
#        scripts/helm.sh ARGS... run helm with ARGS
# Environment: WAVEGATE_CACHE (default ~/.cache/wavegate), WAVEGATE_GOTOOLCHAIN (default auto).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"
die() { echo "helm.sh: ERROR: $*" >&2; exit 1; }
log() { echo "helm.sh: $*" >&2; }

# The version comes from the pinned go.mod, so a bump there rebuilds.
HELM_VERSION="$(sed -n 's#^require helm\.sh/helm/v3 v\([^[:space:]]*\)$#\1#p' "$ROOT/hack/helm/go.mod")"
[[ -n "$HELM_VERSION" ]] || die "cannot read the helm.sh/helm/v3 version from hack/helm/go.mod"
HELM="$CACHE/bin/helm-v$HELM_VERSION/helm"

build() {
  [[ -x "$HELM" ]] && return 0
  command -v go >/dev/null || die "'go' is required to build Helm"
  export GOCACHE="$CACHE/go-build" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  export GOTOOLCHAIN="${WAVEGATE_GOTOOLCHAIN:-auto}"
  mkdir -p "$CACHE/build-logs" "$(dirname "$HELM")"
  exec 9>"$CACHE/build.lock"
  flock 9
  [[ -x "$HELM" ]] && return 0
  local blog="$CACHE/build-logs/helm-v$HELM_VERSION.log" t0 t1
  # The ldflags of Helm's own Makefile (helm.sh/helm/v3@v$HELM_VERSION/Makefile, LDFLAGS): its
  # version, and the Kubernetes version `helm template` assumes (chartutil.k8sVersionMajor/Minor,
  # taken from the k8s.io/client-go it is built with; the default is 1.20, older than the
  # chart's kubeVersion).
  local client_go major minor
  client_go="$(cd "$ROOT/hack/helm" && go list -f '{{.Version}}' -m k8s.io/client-go)" ||
    die "cannot read k8s.io/client-go's version from hack/helm/go.mod"
  client_go="${client_go#v}"; major=$(( ${client_go%%.*} + 1 )); minor="${client_go#*.}"; minor="${minor%%.*}"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  local pkg
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  log "building helm v$HELM_VERSION (helm.sh/helm/v3/cmd/helm) ..."
  t0=$(date +%s)
  if ! (cd "$ROOT/hack/helm" && go build -trimpath -ldflags "$ld" -o "$HELM.tmp" helm.sh/helm/v3/cmd/helm) >"$blog" 2>&1; then
    tail -n 40 "$blog" >&2
    rm -f "$HELM.tmp"
    die "building helm failed (log: $blog)"
  fi
  mv "$HELM.tmp" "$HELM"
  t1=$(date +%s)
  log "built helm in $((t1 - t0))s, $(du -m "$HELM" | cut -f1) MB"
  exec 9>&-
}

case "${1:-}" in
  build) build ;;
  path) build; echo "$HELM" ;;
  "") die "usage: scripts/helm.sh build|path|ARGS..." ;;
  *) build; exec "$HELM" "$@" ;;
esac
