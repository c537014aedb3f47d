#!/usr/bin/env bash
# Real Argo CD for wavegate's tests: the pinned Argo CD (hack/argocd/go.mod) built from its Go
# module, run as local processes — redis, repo-server, application-controller, argocd-server —
# against a PRIVATE copy of the local control plane (scripts/control-plane.sh with its own state
# directory and ports), all inside a network namespace that has only loopback.
#
# Why a private control plane: the application-controller takes over every Application in its
# namespace, and other tests create Application fixtures (unreachable repos, no real CRD).
# Why a network namespace: the application-controller's metrics server listens on all
# interfaces with no flag to change it; in the netns "all interfaces" is loopback.
#
# Usage: [WAVEGATE_ARGOCD_VERSION=3.6] scripts/argocd.sh build|up|down|status|env|module|test|versions
#
# Environment (all optional):
#   WAVEGATE_ARGOCD_VERSION   Argo CD release: "3.4", "3.6.1", "v3.5.1"... (default: the pinned one,
#                             hack/argocd/go.mod). `versions` lists the default matrix, the lines
#                             upstream still supports (hack/argocd/versions.sh; `versions --pinned`
#                             the pinned one, `versions --all` adds the out-of-support releases in
#                             hack/argocd/eol/, which stay buildable by this variable); a line
#                             ("3.5") means its one build module. `module` prints the folder its
#                             Go build and hack/argocd's tests run in; `test` runs those tests
#                             there (the release's own code judging the shipped Lua and argocd-cm).
#   WAVEGATE_CACHE            binaries + Go build cache       (default ~/.cache/wavegate)
#   WAVEGATE_ARGOCD_STATE     state of this Argo CD + its control plane (default $WAVEGATE_CACHE/argocd-state,
#                             argocd-state-<version> for a release other than the pinned one)
#   WAVEGATE_ARGOCD_NETNS     network namespace name           (default wavegate-argocd, wavegate-argocd-v<major><minor>
#                             for a release other than the pinned one)
#   WAVEGATE_ARGOCD_NETNS_PREFIX  the default names' prefix (default wavegate-argocd)
# Binaries are cached per release: $WAVEGATE_CACHE/bin/argocd-v<version>/argocd.
# Requires: go, git, redis-server, ip (iproute2), curl, openssl, kubectl; root (for ip netns).
# A release whose go.mod names a newer Go (`toolchain` line, 3.6) runs the go command with
# GOTOOLCHAIN set to it: the go command fetches that toolchain from the module proxy once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"

# Ports inside the netns (loopback only there, so they cannot clash with the host's).
APISERVER_PORT=6443
ETCD_PORT=23790
KCM_PORT=10357
# The private control plane listens on these whatever the caller's environment says (a
# WAVEGATE_APISERVER_PORT exported for the shared control plane must not move this one).
export WAVEGATE_APISERVER_PORT=$APISERVER_PORT WAVEGATE_ETCD_PORT=$ETCD_PORT WAVEGATE_KCM_PORT=$KCM_PORT
REDIS_PORT=6379
REPO_SERVER_PORT=8081
REPO_SERVER_METRICS_PORT=8084
CONTROLLER_METRICS_PORT=8082
SERVER_PORT=8080
SERVER_METRICS_PORT=8083
# wavegate runs in the netns too (started by the tests); the proxy extension points at it.
WAVEGATE_PORT=18090

die() { echo "argocd: ERROR: $*" >&2; exit 1; }
log() { echo "argocd: $*" >&2; }
now_ms() { date +%s%3N; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not on PATH"; }

# shellcheck source=hack/argocd/versions.sh
source "$ROOT/hack/argocd/versions.sh"
ARGOCD_VERSION="$(argocd_resolve_version "${WAVEGATE_ARGOCD_VERSION:-}")"
[[ -n "$ARGOCD_VERSION" ]] || die "cannot read the Argo CD version from hack/argocd/go.mod"
# The go command of this release (WAVEGATE_GOTOOLCHAIN overrides; empty: the machine's own go).
TOOLCHAIN="${WAVEGATE_GOTOOLCHAIN:-$(argocd_toolchain "$ARGOCD_VERSION")}"
if [[ -n "$TOOLCHAIN" ]]; then export GOTOOLCHAIN="$TOOLCHAIN"; fi
# Another release gets its own control plane state and netns by default, so two never share etcd
# (and the test command runs two at once). WAVEGATE_ARGOCD_NETNS_PREFIX names them all apart
# from another checkout's on the same machine.
NETNS_PREFIX="${WAVEGATE_ARGOCD_NETNS_PREFIX:-wavegate-argocd}"
if [[ "$ARGOCD_VERSION" == "$(argocd_pinned_version)" ]]; then
  STATE="${WAVEGATE_ARGOCD_STATE:-$CACHE/argocd-state}"
  NETNS="${WAVEGATE_ARGOCD_NETNS:-$NETNS_PREFIX}"
else
  STATE="${WAVEGATE_ARGOCD_STATE:-$CACHE/argocd-state-$ARGOCD_VERSION}"
  NETNS="${WAVEGATE_ARGOCD_NETNS:-$NETNS_PREFIX-v$(argocd_line "$ARGOCD_VERSION" | tr -d .)}"
fi
# Argo CD's real web UI (scripts/argocd-ui.sh) is compiled into the binary of the releases whose
# UI source is known there; WAVEGATE_ARGOCD_UI=placeholder keeps the page the Go module embeds.
# Not 3.6.1: its UI pins an argo-ui commit whose source is not available here.
UI_VERSIONS=" 3.2.11 3.5.1 "
if [[ "${WAVEGATE_ARGOCD_UI:-real}" == real && "$UI_VERSIONS" == *" $ARGOCD_VERSION "* ]]; then
  WITH_UI=1
  ARGOCD_BIN="$CACHE/bin/argocd-v$ARGOCD_VERSION-ui"
else
  WITH_UI=0
  ARGOCD_BIN="$CACHE/bin/argocd-v$ARGOCD_VERSION"
fi
ARGOCD="$ARGOCD_BIN/argocd"

# Argo CD's repo-server runs `helm` and `kustomize` from PATH for Helm and Kustomize sources
# (argo-cd util/helm/cmd.go, util/kustomize/kustomize.go getBinaryPath); its image ships both.
# Both are built from their Go modules (scripts/helm.sh, scripts/tools.sh) and linked here.
REPO_TOOLS="$CACHE/bin/argocd-repo-tools"

LOGS="$STATE/logs"
CP_STATE="$STATE/control-plane"
KUBECONFIG_OUT="$CP_STATE/kubeconfig"

# ---------------------------------------------------------------- build ----

# argocd-server answers every browser navigation with the index.html embedded at compile time
# (ui/embed.go: `//go:embed dist/app`; `--staticassets` only adds files), so the built UI goes into
# a writable copy of the module and the build module is pointed at that copy with a `replace`
# (in a copy of the release's build module go.mod passed as -modfile; the committed one is not touched).
# Prints the -modfile argument to use.
prepare_ui_module() {
  "$ROOT/scripts/argocd-ui.sh" build "$ARGOCD_VERSION" >&2 || die "building Argo CD's UI failed"
  local dist bm mod src="$CACHE/argocd-src/v$ARGOCD_VERSION-ui" mf="$CACHE/argocd-src/v$ARGOCD_VERSION-ui.mod"
  dist="$("$ROOT/scripts/argocd-ui.sh" path "$ARGOCD_VERSION")" || die "no built UI for $ARGOCD_VERSION"
  bm="$(argocd_module "$ARGOCD_VERSION")" || die "no build module for Argo CD $ARGOCD_VERSION"
  mod="$(cd "$bm" && go mod download github.com/argoproj/argo-cd/v3 >/dev/null &&
    go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)" || die "cannot download the Argo CD module"
  rm -rf "$src"
  mkdir -p "$(dirname "$src")"
  cp -r "$mod" "$src"
  chmod -R u+w "$src"
  rm -rf "$src/ui/dist/app"
  cp -r "$dist" "$src/ui/dist/app"
  { cat "$bm/go.mod"; printf '\nreplace github.com/argoproj/argo-cd/v3 => %s\n' "$src"; } >"$mf"
  cp "$bm/go.sum" "${mf%.mod}.sum"
  echo "-modfile=$mf"
}

cmd_build() {
  need go
  export GOCACHE="$CACHE/go-build" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  export GOTOOLCHAIN="${TOOLCHAIN:-auto}"
  mkdir -p "$CACHE/build-logs" "$ARGOCD_BIN"
  local modfile=()
  # One build of this binary at a time (test.sh starts the pinned release's build early and the
  # version matrix asks for it again): the second waits here and then finds it built, instead of
  # replacing the module copy under a running `go build`.
  exec 7>"$ARGOCD_BIN/.build.lock"
  flock 7
  # The UI's webpack build runs before the Go build lock is taken: it does not hold up other
  # Go builds waiting on that lock.
  if [[ ! -x "$ARGOCD" && "$WITH_UI" == 1 ]]; then
    modfile=("$(prepare_ui_module)") || exit 1
  fi
  exec 9>"$CACHE/build.lock"
  flock 9
  if [[ -x "$ARGOCD" ]]; then
    log "argocd v$ARGOCD_VERSION present ($ARGOCD)"
  else
    local t0 t1 p="github.com/argoproj/argo-cd/v3/common" blog="$CACHE/build-logs/argocd-v$ARGOCD_VERSION$([[ $WITH_UI == 1 ]] && echo -ui).log"
    local ld="-s -w -X $p.version=$ARGOCD_VERSION -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X $p.gitTreeState=clean"
    log "building argocd v$ARGOCD_VERSION (github.com/argoproj/argo-cd/v3/cmd)$([[ $WITH_UI == 1 ]] && echo ' with its web UI') ..."
    t0=$(now_ms)
    # /usr/bin/time -v records the peak RSS of the build in the log, when it is installed.
    local timer=(); [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -v)
    local mod; mod="$(argocd_module "$ARGOCD_VERSION")" || die "no build module for Argo CD $ARGOCD_VERSION (above)"
    if ! (cd "$mod" && GODEBUG="tarinsecurepath=0,zipinsecurepath=0" \
        "${timer[@]}" go build "${modfile[@]}" -trimpath -ldflags "$ld" -o "$ARGOCD.tmp" github.com/argoproj/argo-cd/v3/cmd) \
        >"$blog" 2>&1; then
      tail -n 40 "$blog" >&2
      rm -f "$ARGOCD.tmp"
      die "building argocd failed (log: $blog)"
    fi
    mv "$ARGOCD.tmp" "$ARGOCD"
    t1=$(now_ms)
    log "built argocd v$ARGOCD_VERSION in $(( (t1 - t0) / 1000 ))s, $(du -m "$ARGOCD" | cut -f1) MB$(build_cpu "$blog")$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/, peak RSS of the build \1 kB/p' "$blog")"
  fi
  local name
  for name in argocd-application-controller argocd-repo-server argocd-server; do
    ln -sfn argocd "$ARGOCD_BIN/$name"
  done
  exec 9>&- 7>&-
}

# The release's own code judges the shipped Lua and argocd-cm (hack/argocd/healthcheck). Same
# GOCACHE, CGO and -trimpath as cmd_build, so the packages both need compile once.
cmd_test() {
  need go
  local mod t0 rc=0 tlog="$CACHE/build-logs/argocd-v$ARGOCD_VERSION-healthcheck.log" timer=()
  [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -v -o "$tlog")
  mod="$(argocd_module "$ARGOCD_VERSION")" || die "no build module for Argo CD $ARGOCD_VERSION (above)"
  mkdir -p "$CACHE/build-logs"
  log "Argo CD v$ARGOCD_VERSION's own settings and health code judge the shipped argocd-cm ($mod${TOOLCHAIN:+, $TOOLCHAIN})"
  t0=$(now_ms)
  (cd "$mod" && WAVEGATE_REPO="$ROOT" GOCACHE="$CACHE/go-build" CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    "${timer[@]}" go test -trimpath -count=1 ./...) || rc=$?
  log "hack/argocd test on v$ARGOCD_VERSION: $( ((rc == 0)) && echo passed || echo FAILED) in $(( ($(now_ms) - t0) / 1000 ))s$([[ -f "$tlog" ]] && build_cpu "$tlog")"
  return "$rc"
}

build_cpu() { # /usr/bin/time -v log -> ", CPU <user+sys>s"
  awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { cpu += $2; n++ }
    END { if (n == 2) printf ", CPU %.0fs", cpu }' "$1"
}

# ------------------------------------------------------------ processes ----

# Everything but `build` and `env` runs inside the network namespace: re-exec there.
in_netns() { [[ "$(ip netns identify $$ 2>/dev/null)" == "$NETNS" ]]; }
enter_netns() { # args of this script
  in_netns && return 0
  need ip
  [[ "$(id -u)" == 0 ]] || die "ip netns needs root"
  if ! ip netns list | awk '{print $1}' | grep -qx "$NETNS"; then
    ip netns add "$NETNS" || die "cannot create network namespace $NETNS"
    log "created network namespace $NETNS (loopback only)"
  fi
  ip netns exec "$NETNS" ip link set lo up
  exec ip netns exec "$NETNS" "$0" "$@"
}

alive() {
  [[ -r "/proc/$1/stat" ]] || return 1
  local st; st="$(cut -d')' -f2 <"/proc/$1/stat" 2>/dev/null | awk '{print $1}')" || return 1
  [[ -n "$st" && "$st" != Z ]]
}

pid_of() { # component -> pid, if its pid file names a live process started for it
  local f="$STATE/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2" || return 1
  echo "$pid"
}

start() { # component [VAR=value...] binary args...
  local name="$1"; shift
  mkdir -p "$LOGS"
  log "starting $name"
  echo "==== argocd.sh: starting $name at $(date -u +%Y-%m-%dT%H:%M:%SZ) ====" >>"$LOGS/$name.log"
  (
    cd "$STATE/work"
    setsid nohup env "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/$name.pid"
  )
}

fail_component() {
  log "$1 did not come up: $2"
  if [[ -f "$LOGS/$1.log" ]]; then
    echo "---- last lines of $LOGS/$1.log ----" >&2
    tail -n 40 "$LOGS/$1.log" >&2
    echo "----" >&2
  fi
  die "$1: $2"
}

wait_for() { # component match timeout check-command...
  local name="$1" match="$2" timeout="$3"; shift 3
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    # Asked twice: a process in the middle of its exec chain (setsid, nohup, env) can show an
    # empty /proc/PID/cmdline for an instant, which once read as "exited" for a live server.
    pid_of "$name" "$match" >/dev/null || { sleep 0.5; pid_of "$name" "$match" >/dev/null; } ||
      fail_component "$name" "process exited"
    (( $(date +%s) < deadline )) || fail_component "$name" "not healthy after ${timeout}s"
    sleep 0.2
  done
}

redis_healthy() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -qx PONG; }
repo_server_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$REPO_SERVER_METRICS_PORT/healthz?full=true" | grep -qx ok; }
controller_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$CONTROLLER_METRICS_PORT/healthz" | grep -qx ok; }
server_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$SERVER_PORT/healthz?full=true" | grep -qx ok; }

# name|cmdline match|health check
COMPONENTS=(
  "redis|redis-server|redis_healthy"
  "repo-server|argocd-repo-server|repo_server_healthy"
  "application-controller|argocd-application-controller|controller_healthy"
  "server|argocd-server|server_healthy"
)

kube() { KUBECONFIG="$KUBECONFIG_OUT" kubectl "$@"; }

# Argo CD's own CRDs come from the downloaded module (never committed here). The stub
# tests/crds/argoproj.io_applications.yaml (a minimal stand-in for the other tests) is left out:
# Argo CD needs its full schema, and a CRD that declared a status subresource would silently
# drop Argo CD's status writes (plain patches of the main object).
module_dir() {
  # The netns has no route to the module proxy: the build (outside) downloaded the module.
  local mod
  mod="$(argocd_module "$ARGOCD_VERSION")" || return 1
  (cd "$mod" && GOPROXY=off go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
}

prepare_crds() {
  local dir="$STATE/crds" mod f
  mod="$(module_dir)" || die "cannot find the Argo CD module (go mod download in hack/argocd)"
  [[ -f "$mod/manifests/crds/application-crd.yaml" ]] || die "$mod/manifests/crds/application-crd.yaml missing"
  rm -rf "$dir"; mkdir -p "$dir"
  cp "$mod/manifests/crds/application-crd.yaml" "$mod/manifests/crds/appproject-crd.yaml" "$dir/"
  cp "$ROOT/deploy/crd/wavegate.dev_wavegates.yaml" "$dir/"
  for f in "$ROOT"/tests/crds/*.yaml; do
    [[ "$(basename "$f")" == argoproj.io_* ]] && continue
    cp "$f" "$dir/"
  done
  chmod u+w "$dir"/*
}

install_config() {
  kube get namespace argocd >/dev/null 2>&1 || kube create namespace argocd >/dev/null
  # The project's argocd-cm patch, as a user would merge it (server-side apply keeps it a merge).
  kube apply --server-side --force-conflicts --field-manager wavegate-health -f "$ROOT/argocd/argocd-cm/argocd-cm-patch.yaml" >/dev/null
  # Argo CD's informers select its ConfigMaps and Secrets by this label.
  kube -n argocd apply --server-side --force-conflicts --field-manager wavegate-argocd-sh -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: argocd
  labels: {app.kubernetes.io/part-of: argocd}
data:
  url: http://127.0.0.1:$SERVER_PORT
  admin.enabled: "true"
  # Local users for the proxy-extension test: alice may invoke the extension, bob may not.
  accounts.alice: login, apiKey
  accounts.bob: login, apiKey
  timeout.reconciliation: 10s
  # The proxy extension (argocd/extension/README.md): wavegate runs in this netns.
  extension.config.wavegate: |
    services:
      - url: http://127.0.0.1:$WAVEGATE_PORT
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-rbac-cm
  namespace: argocd
  labels: {app.kubernetes.io/part-of: argocd}
data:
  policy.default: ""
  policy.csv: |
    p, role:wavegate-viewer, applications, get, default/seed-001-forgejo, allow
    p, role:wavegate-viewer, applications, get, default/seed-000-cockroachdb, allow
    p, role:wavegate-viewer, extensions, invoke, wavegate, allow
    p, role:app-viewer, applications, get, default/seed-001-forgejo, allow
    g, alice, role:wavegate-viewer
    g, bob, role:app-viewer
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cmd-params-cm
  namespace: argocd
  labels: {app.kubernetes.io/part-of: argocd}
data:
  server.enable.proxy.extension: "true"
EOF
  # wavegate's UI extension, installed the way argocd/extension/README.md tells a user: a ConfigMap
  # that argocd-server's Deployment mounts (subPath) at /tmp/extensions/wavegate/.
  kube -n argocd create configmap wavegate-ui-extension \
    --from-file=extension-wavegate.js="$ROOT/argocd/extension/extension-wavegate.js" \
    --dry-run=client -o yaml | kube apply --server-side --force-conflicts --field-manager wavegate-argocd-sh -f - >/dev/null
  if ! kube -n argocd get secret argocd-secret >/dev/null 2>&1; then
    local key
    key="$(openssl rand -base64 32)"
    kube -n argocd create secret generic argocd-secret --from-literal=server.secretkey="$key" >/dev/null
    kube -n argocd label secret argocd-secret app.kubernetes.io/part-of=argocd >/dev/null
  fi
}

# Flags one release needs and another does not know. From 3.5 the repo-server defaults
# --client-ca-path to a Secret mount path and refuses it together with --disable-tls
# (cmd/argocd-repo-server/commands/argocd_repo_server.go): clear it where the flag exists.
repo_server_release_flags() {
  if "$ARGOCD_BIN/argocd-repo-server" --help 2>/dev/null | grep -q -- '--client-ca-path'; then
    echo "--client-ca-path="
  fi
}

# Argo CD's image puts hack/git-verify-wrapper.sh on PATH. From 3.5 the repo-server runs it for
# every manifest generation, GPG enabled or not (reposerver/repository/repository.go calls
# VerifyCommitSignature unconditionally; util/git/client.go answers "permission denied" when it
# cannot run): the same script, from the release's own module.
repo_server_tools() {
  local mod
  mod="$(module_dir)" || die "cannot find the Argo CD module"
  mkdir -p "$STATE/bin"
  install -m 0755 "$mod/hack/git-verify-wrapper.sh" "$STATE/bin/git-verify-wrapper.sh"
}

start_argocd_components() {
  local kcfg="$STATE/argocd.kubeconfig"
  # The components take their namespace from the kubeconfig context (ARGOCD_FAKE_IN_CLUSTER).
  sed 's/^\(    namespace:\) default$/\1 argocd/' "$KUBECONFIG_OUT" >"$kcfg"
  chmod 600 "$kcfg"
  mkdir -p "$STATE/work" "$STATE/tls" "$STATE/ssh" "$STATE/gpg/keys" "$STATE/gpg/source" "$STATE/tmp"
  local common=(KUBECONFIG="$kcfg" ARGOCD_FAKE_IN_CLUSTER=true HOME="$STATE/work" TMPDIR="$STATE/tmp"
    ARGOCD_TLS_DATA_PATH="$STATE/tls" ARGOCD_SSH_DATA_PATH="$STATE/ssh" ARGOCD_GPG_ENABLED=false
    ARGOCD_GNUPGHOME="$STATE/gpg/keys" ARGOCD_GPG_DATA_PATH="$STATE/gpg/source")
  local redis="127.0.0.1:$REDIS_PORT" repo="127.0.0.1:$REPO_SERVER_PORT"

  if ! pid_of redis redis-server >/dev/null; then
    need redis-server
    start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no
  fi
  wait_for redis redis-server 30 redis_healthy

  if ! pid_of repo-server argocd-repo-server >/dev/null; then
    repo_server_tools
    start repo-server "${common[@]}" PATH="$STATE/bin:$REPO_TOOLS:$PATH" "$ARGOCD_BIN/argocd-repo-server" \
      --address 127.0.0.1 --port "$REPO_SERVER_PORT" \
      --metrics-address 127.0.0.1 --metrics-port "$REPO_SERVER_METRICS_PORT" \
      --redis "$redis" --disable-tls $(repo_server_release_flags) --loglevel info
  fi
  wait_for repo-server argocd-repo-server 60 repo_server_healthy

  if ! pid_of application-controller argocd-application-controller >/dev/null; then
    # Its metrics server listens on all interfaces; in this netns that is loopback only.
    start application-controller "${common[@]}" "$ARGOCD_BIN/argocd-application-controller" \
      --metrics-port "$CONTROLLER_METRICS_PORT" --redis "$redis" --repo-server "$repo" \
      --repo-server-plaintext --status-processors 2 --operation-processors 2 \
      --app-resync 10 --self-heal-timeout-seconds 0 --loglevel info
  fi
  wait_for application-controller argocd-application-controller 90 controller_healthy

  if ! pid_of server argocd-server >/dev/null; then
    mount_ui_extension
    # argocd-server reads extensions from the fixed path /tmp/extensions/ (server/server.go,
    # `extensionsSharedPath`); a private mount namespace gives this server its own, as the pod's
    # volume would, without touching the host's /tmp or another Argo CD's.
    mkdir -p /tmp/extensions
    start server "${common[@]}" unshare --mount --propagation private -- sh -c \
      'mount --bind "$0" /tmp/extensions && exec "$@"' "$STATE/extensions" "$ARGOCD_BIN/argocd-server" \
      --address 127.0.0.1 --port "$SERVER_PORT" --metrics-address 127.0.0.1 --metrics-port "$SERVER_METRICS_PORT" \
      --insecure --redis "$redis" --repo-server "$repo" --repo-server-plaintext \
      --enable-proxy-extension --staticassets "$STATE/work" --loglevel info
  fi
  wait_for server argocd-server 90 server_healthy
}

# Plays the kubelet for the argocd-server patch (argocd/extension/argocd-server-patch.yaml): the
# ConfigMap's key becomes a plain file at the subPath mount (argocd-server skips symlinks).
mount_ui_extension() {
  local dir="$STATE/extensions/wavegate"
  rm -rf "$STATE/extensions"
  mkdir -p "$dir"
  kube -n argocd get configmap wavegate-ui-extension -o jsonpath='{.data.extension-wavegate\.js}' \
    >"$dir/extension-wavegate.js" || die "cannot read ConfigMap argocd/wavegate-ui-extension"
  [[ -s "$dir/extension-wavegate.js" ]] || die "ConfigMap argocd/wavegate-ui-extension has no extension-wavegate.js"
}

cmd_up() {
  need curl; need openssl; need kubectl; need git; need redis-server; need redis-cli; need go
  if ! in_netns; then
    # Builds need the Go module proxy, which the netns cannot reach: build first, then enter.
    cmd_build
    mkdir -p "$REPO_TOOLS"
    ln -sfn "$(WAVEGATE_CACHE="$CACHE" "$ROOT/scripts/helm.sh" path)" "$REPO_TOOLS/helm"
    ln -sfn "$(WAVEGATE_CACHE="$CACHE" "$ROOT/scripts/tools.sh" path kustomize)" "$REPO_TOOLS/kustomize"
    WAVEGATE_STATE="$CP_STATE" WAVEGATE_CACHE="$CACHE" "$ROOT/scripts/control-plane.sh" build
    enter_netns up
  fi
  local t0; t0=$(now_ms)
  mkdir -p "$STATE" "$LOGS"
  prepare_crds
  WAVEGATE_STATE="$CP_STATE" WAVEGATE_CACHE="$CACHE" WAVEGATE_CRDS="$STATE/crds" \
    "$ROOT/scripts/control-plane.sh" up >/dev/null
  install_config
  start_argocd_components
  log "Argo CD v$ARGOCD_VERSION up in $(( $(now_ms) - t0 )) ms (netns $NETNS; argocd-server http://127.0.0.1:$SERVER_PORT)"
  print_env
}

stop() { # component match
  local pid
  if ! pid="$(pid_of "$1" "$2")"; then rm -f "$STATE/$1.pid"; return 0; fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$(( $(date +%s) + 15 ))
  while alive "$pid" && (( $(date +%s) < deadline )); do sleep 0.1; done
  alive "$pid" && { kill -KILL "$pid" 2>/dev/null || true; while alive "$pid"; do sleep 0.1; done; }
  log "stopped $1 (pid $pid)"
  rm -f "$STATE/$1.pid"
}

cmd_down() {
  local i c
  for (( i=${#COMPONENTS[@]}-1; i>=0; i-- )); do
    IFS='|' read -r c match _ <<<"${COMPONENTS[$i]}"
    stop "$c" "$match"
  done
  if in_netns; then
    WAVEGATE_STATE="$CP_STATE" WAVEGATE_CACHE="$CACHE" "$ROOT/scripts/control-plane.sh" down
  fi
}

cmd_status() {
  local rc=0 c match check pid
  for entry in "${COMPONENTS[@]}"; do
    IFS='|' read -r c match check <<<"$entry"
    if pid="$(pid_of "$c" "$match")"; then
      if "$check"; then printf '%-24s running  pid %-8s healthy\n' "$c" "$pid"
      else printf '%-24s running  pid %-8s UNHEALTHY\n' "$c" "$pid"; rc=1; fi
    else
      printf '%-24s stopped\n' "$c"; rc=1
    fi
  done
  WAVEGATE_STATE="$CP_STATE" WAVEGATE_CACHE="$CACHE" "$ROOT/scripts/control-plane.sh" status >/dev/null 2>&1 \
    && echo "control plane (private)  up" || { echo "control plane (private)  DOWN"; rc=1; }
  echo "netns: $NETNS   state: $STATE   argocd-server: http://127.0.0.1:$SERVER_PORT"
  return "$rc"
}

# Commands that talk to this Argo CD must run in its netns: `ip netns exec $NETNS …`.
print_env() {
  echo "export WAVEGATE_ARGOCD_NETNS=$NETNS"
  echo "export WAVEGATE_ARGOCD_KUBECONFIG=$KUBECONFIG_OUT"
  echo "export WAVEGATE_ARGOCD_SERVER=http://127.0.0.1:$SERVER_PORT"
  echo "export WAVEGATE_ARGOCD_CONTROLLER_METRICS=http://127.0.0.1:$CONTROLLER_METRICS_PORT"
  echo "export WAVEGATE_ARGOCD_WAVEGATE_PORT=$WAVEGATE_PORT"
  echo "export WAVEGATE_ARGOCD_STATE=$STATE"
  echo "export WAVEGATE_ARGOCD_BIN=$ARGOCD"
  echo "export WAVEGATE_ARGOCD_VERSION=$ARGOCD_VERSION"
}

case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) enter_netns down; cmd_down ;;
  status) enter_netns status; cmd_status ;;
  env) print_env ;;
  module) argocd_module "$ARGOCD_VERSION" ;;
  test) cmd_test ;;
  versions)
    case "${2:-}" in
      --pinned) argocd_pinned_version ;;
      --all) argocd_all_versions ;;
      "") argocd_supported_versions ;;
      *) die "usage: $0 versions [--pinned|--all]" ;;
    esac ;;
  *) echo "usage: [WAVEGATE_ARGOCD_VERSION=X.Y[.Z]] $0 build|up|down|status|env|module|test|versions [--pinned|--all]" >&2; exit 2 ;;
esac
