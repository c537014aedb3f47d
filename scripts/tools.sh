#!/usr/bin/env bash
# Go tools the install and release tests need, each built from its Go module (pinned in
# hack/<tool>/go.mod) and cached under ~/.cache/wavegate/bin like scripts/helm.sh does for Helm:
#
#   kustomize   sigs.k8s.io/kustomize/kustomize/v5 — Argo CD's repo-server runs `kustomize build`
#               for Kustomize sources; Argo CD's image ships it next to helm.
#   actionlint  github.com/rhysd/actionlint — lints .github/workflows/ (tests/release/run.sh).
#
# Usage: scripts/tools.sh build [TOOL...]   build once (no-op when the binary is there)
#        scripts/tools.sh path TOOL         print the binary's path (building it first if needed)
#        scripts/tools.sh dir               print a directory of links to all of them (for PATH)
# Environment: WAVEGATE_CACHE (default ~/.cache/wavegate), WAVEGATE_GOTOOLCHAIN (default auto).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"
die() { echo "tools.sh: ERROR: $*" >&2; exit 1; }
log() { echo "tools.sh: $*" >&2; }

TOOLS=(kustomize actionlint)

module_of() {
  case "$1" in
    kustomize) echo "sigs.k8s.io/kustomize/kustomize/v5|sigs.k8s.io/kustomize/kustomize/v5" ;;
    actionlint) echo "github.com/rhysd/actionlint|github.com/rhysd/actionlint/cmd/actionlint" ;;
    *) die "unknown tool '$1' (known: ${TOOLS[*]})" ;;
  esac
}

version_of() { # tool -> version pinned in hack/<tool>/go.mod
  local mod; mod="$(module_of "$1")"; mod="${mod%%|*}"
  local v
  v="$(awk -v m="$mod" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$ROOT/hack/$1/go.mod")"
  [[ -n "$v" ]] || die "cannot read $mod's version from hack/$1/go.mod"
  echo "$v"
}

bin_of() { echo "$CACHE/bin/$1-$(version_of "$1")/$1"; }

build_one() {
  local tool="$1" bin mod pkg version
  bin="$(bin_of "$tool")"
  [[ -x "$bin" ]] && return 0
  command -v go >/dev/null || die "'go' is required to build $tool"
  mod="$(module_of "$tool")"; pkg="${mod#*|}"; mod="${mod%%|*}"
  version="$(version_of "$tool")"
  export GOCACHE="$CACHE/go-build" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  export GOTOOLCHAIN="${WAVEGATE_GOTOOLCHAIN:-auto}"
  mkdir -p "$CACHE/build-logs" "$(dirname "$bin")"
  exec 9>"$CACHE/build.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    local blog="$CACHE/build-logs/$tool-$version.log" t0 t1 ld="-s -w"
    # The version each project's own release build stamps in (kustomize: provenance.version,
    # as its Makefile does; actionlint: its package's version).
    case "$tool" in
      kustomize) ld+=" -X sigs.k8s.io/kustomize/api/provenance.version=$version" ;;
      actionlint) ld+=" -X github.com/rhysd/actionlint.version=$version" ;;
    esac
    log "building $tool $version ($pkg) ..."
    t0=$(date +%s)
    if ! (cd "$ROOT/hack/$tool" && go build -trimpath -ldflags "$ld" -o "$bin.tmp" "$pkg") >"$blog" 2>&1; then
      tail -n 40 "$blog" >&2
      rm -f "$bin.tmp"
      die "building $tool failed (log: $blog)"
    fi
    mv "$bin.tmp" "$bin"
    t1=$(date +%s)
    log "built $tool in $((t1 - t0))s, $(du -m "$bin" | cut -f1) MB"
  fi
  exec 9>&-
}

case "${1:-}" in
  build)
    shift
    (( $# )) || set -- "${TOOLS[@]}"
    for t in "$@"; do build_one "$t"; done
    ;;
  path) [[ -n "${2:-}" ]] || die "usage: scripts/tools.sh path TOOL"; build_one "$2"; bin_of "$2" ;;
  dir)
    d="$CACHE/bin/tools-path"
    mkdir -p "$d"
    for t in "${TOOLS[@]}"; do build_one "$t"; ln -sfn "$(bin_of "$t")" "$d/$t"; done
    echo "$d"
    ;;
  *) die "usage: scripts/tools.sh build [TOOL...] | path TOOL | dir" ;;
esac
