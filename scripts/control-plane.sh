#!/usr/bin/env bash
# Local Kubernetes control plane for wavegate's tests: etcd + kube-apiserver +
# kube-controller-manager built from Go modules (hack/kube, hack/etcd), on
# loopback, no containers, no kubelet (tests play the kubelet; a fake Node
# "wavegate-node" is registered). See docs/control-plane.md.
#
# Usage: scripts/control-plane.sh build|up|down|status|env
#        scripts/control-plane.sh pid|stop-component|start-component COMPONENT
#        scripts/control-plane.sh compact
# The last three are for fault-injection tests on a PRIVATE control plane (own WAVEGATE_STATE
# and ports): COMPONENT is etcd, kube-apiserver or kube-controller-manager; stop-component
# keeps etcd's data; compact compacts etcd's history up to its current revision.
#
# Environment (all optional):
#   WAVEGATE_CACHE           binaries + Go build cache   (default ~/.cache/wavegate)
#   WAVEGATE_STATE           pki, kubeconfig, logs, etcd (default $WAVEGATE_CACHE/state)
#   WAVEGATE_APISERVER_PORT  kube-apiserver secure port  (default 6443)
#   WAVEGATE_ETCD_PORT       etcd client port            (default 23790; peer = +10)
#   WAVEGATE_KCM_PORT        kube-controller-manager secure port (default 10357)
#   WAVEGATE_GOTOOLCHAIN     GOTOOLCHAIN for the builds  (default auto: go.mod decides)
#   WAVEGATE_CRDS            directory of CRDs applied by `up` (default tests/crds)
#   WAVEGATE_KCM_API_QPS     kube-controller-manager's client QPS, burst twice it (default:
#                            Kubernetes' own, 20 and 30). benches/memory.rs raises it on its private
#                            control plane so 10,000 Services get their EndpointSlices in
#                            seconds, not the ~8 minutes 20 requests a second take.
# Requires: go, openssl, curl.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}"
STATE="${WAVEGATE_STATE:-$CACHE/state}"
APISERVER_PORT="${WAVEGATE_APISERVER_PORT:-6443}"
ETCD_PORT="${WAVEGATE_ETCD_PORT:-23790}"
ETCD_PEER_PORT="$((ETCD_PORT + 10))"
KCM_PORT="${WAVEGATE_KCM_PORT:-10357}"
CRD_DIR="${WAVEGATE_CRDS:-$ROOT/tests/crds}"
NODE_NAME="wavegate-node"

die() { echo "control-plane: ERROR: $*" >&2; exit 1; }
log() { echo "control-plane: $*" >&2; }
now_ms() { date +%s%3N; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not on PATH"; }

# Versions come from the pinned go.mod files, so a version bump there rebuilds.
KUBE_VERSION="$(sed -n 's#^require k8s\.io/kubernetes v\([^[:space:]]*\)$#\1#p' "$ROOT/hack/kube/go.mod")"
ETCD_VERSION="$(sed -n 's#^require go\.etcd\.io/etcd/server/v3 v\([^[:space:]]*\)$#\1#p' "$ROOT/hack/etcd/go.mod")"
[[ -n "$KUBE_VERSION" ]] || die "cannot read the k8s.io/kubernetes version from hack/kube/go.mod"
[[ -n "$ETCD_VERSION" ]] || die "cannot read the etcd version from hack/etcd/go.mod"
KUBE_BIN="$CACHE/bin/kube-v$KUBE_VERSION"
ETCD_BIN="$CACHE/bin/etcd-v$ETCD_VERSION"
APISERVER="$KUBE_BIN/kube-apiserver"
KCM="$KUBE_BIN/kube-controller-manager"
ETCD="$ETCD_BIN/etcd"

PKI="$STATE/pki"
LOGS="$STATE/logs"
ETCD_DATA="$STATE/etcd-data"
KUBECONFIG_OUT="$STATE/kubeconfig"
KCM_KUBECONFIG="$STATE/kcm.kubeconfig"
API_URL="https://127.0.0.1:$APISERVER_PORT"

# ---------------------------------------------------------------- build ----

go_build() { # module_dir package output [ldflags]
  local dir="$1" pkg="$2" out="$3" ldflags="${4:-}" t0 t1
  mkdir -p "$(dirname "$out")" "$CACHE/build-logs"
  log "building $(basename "$out") ($pkg) ..."
  t0=$(now_ms)
  if ! (cd "$dir" && go build -tags providerless -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") \
      >"$CACHE/build-logs/$(basename "$out").log" 2>&1; then
    tail -n 40 "$CACHE/build-logs/$(basename "$out").log" >&2
    rm -f "$out.tmp"
    die "building $pkg failed (log: $CACHE/build-logs/$(basename "$out").log)"
  fi
  mv "$out.tmp" "$out"
  t1=$(now_ms)
  log "built $(basename "$out") in $(( (t1 - t0) / 1000 )).$(( (t1 - t0) % 1000 / 100 ))s, $(du -m "$out" | cut -f1) MB"
}

cmd_build() {
  need go
  export GOCACHE="$CACHE/go-build" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  export GOTOOLCHAIN="${WAVEGATE_GOTOOLCHAIN:-auto}"
  mkdir -p "$CACHE"
  # One build at a time (parallel `up`s, or a build started by hand).
  exec 9>"$CACHE/build.lock"
  flock 9
  local t0; t0=$(now_ms)
  local v="k8s.io/component-base/version" c="k8s.io/client-go/pkg/version"
  local minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
  local kld="-X $v.gitVersion=v$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  kld+=" -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  kld+=" -X $c.gitVersion=v$KUBE_VERSION -X $c.gitMajor=1 -X $c.gitMinor=$minor"
  local cmd
  for cmd in kube-apiserver kube-controller-manager; do
    if [[ -x "$KUBE_BIN/$cmd" ]]; then log "$cmd v$KUBE_VERSION present ($KUBE_BIN/$cmd)"
    else go_build "$ROOT/hack/kube" "k8s.io/kubernetes/cmd/$cmd" "$KUBE_BIN/$cmd" "$kld"; fi
  done
  if [[ -x "$ETCD" ]]; then log "etcd v$ETCD_VERSION present ($ETCD)"
  else go_build "$ROOT/hack/etcd" "go.etcd.io/etcd/server/v3" "$ETCD"; fi
  local t1; t1=$(now_ms)
  log "build done in $(( (t1 - t0) / 1000 ))s"
  exec 9>&-
}

# ------------------------------------------------------------ processes ----

pid_of() { # component -> pid (if its pid file names a live process of that binary)
  local f="$STATE/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$1" || return 1
  echo "$pid"
}

alive() { # pid -> true while the process exists and is not a zombie
  [[ -r "/proc/$1/stat" ]] || return 1
  local st; st="$(cut -d')' -f2 <"/proc/$1/stat" 2>/dev/null | awk '{print $1}')" || return 1
  [[ -n "$st" && "$st" != Z ]]
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() { # component binary args...
  local name="$1" bin="$2"; shift 2
  [[ -x "$bin" ]] || die "$bin missing (run: scripts/control-plane.sh build)"
  mkdir -p "$LOGS"
  log "starting $name"
  echo "==== control-plane.sh: starting $name at $(date -u +%Y-%m-%dT%H:%M:%SZ) ====" >>"$LOGS/$name.log"
  setsid nohup "$bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/$name.pid"
}

fail_component() { # component message
  log "$1 did not come up: $2"
  if [[ -f "$LOGS/$1.log" ]]; then
    echo "---- last lines of $LOGS/$1.log ----" >&2
    tail -n 40 "$LOGS/$1.log" >&2
    echo "----" >&2
  fi
  die "$1: $2"
}

wait_for() { # component timeout_s check-command...
  local name="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  # The pid was written by this run a moment ago, so liveness is the test here, not pid_of's
  # command line: right after the fork the child has not exec'd the binary yet (a loaded
  # machine widens that gap), and its command line is still this script's.
  local pid; pid="$(cat "$STATE/$name.pid" 2>/dev/null)"
  until "$@" >/dev/null 2>&1; do
    [[ -n "$pid" ]] && alive "$pid" || fail_component "$name" "process exited"
    (( $(date +%s) < deadline )) || fail_component "$name" "not healthy after ${timeout}s"
    sleep 0.2
  done
}

await_existing() { # component timeout check-command... ; 0 = healthy, 1 = it exited (start it anew)
  local name="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    pid_of "$name" >/dev/null || { log "$name (left from an earlier run) exited; starting it again"; return 1; }
    (( $(date +%s) < deadline )) || fail_component "$name" "running but not healthy after ${timeout}s (try: $0 down && $0 up)"
    sleep 0.2
  done
}

TOKEN_FILE="$PKI/admin.token"
admin_token() { cat "$TOKEN_FILE"; }

api() { # method path [curl args...]
  local method="$1" path="$2"; shift 2
  curl -sS --fail-with-body --max-time 10 --cacert "$PKI/ca.crt" \
    -H "Authorization: Bearer $(admin_token)" -X "$method" "$@" "$API_URL$path"
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(admin_token)" "$API_URL/readyz" | grep -qx ok; }
kcm_healthy() { curl -skf --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" | grep -qx ok; }
default_sa_exists() { api GET /api/v1/namespaces/default/serviceaccounts/default -o /dev/null; }

# ----------------------------------------------------------------- pki -----

ensure_pki() {
  need openssl
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  [[ -f "$PKI/ca.crt" && -f "$PKI/apiserver.crt" && -f "$PKI/sa.key" && -f "$TOKEN_FILE" ]] && return 0
  log "generating certificates and keys in $PKI"
  (
    cd "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
      -subj "/CN=wavegate-local-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1" \
      >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    openssl rand -hex 32 >admin.token
    openssl rand -hex 32 >kcm.token
    rm -f apiserver.csr apiserver.ext
  ) || die "openssl failed while generating $PKI"
  # token,user,uid,"group1,group2"
  {
    echo "$(cat "$PKI/admin.token"),admin,admin,\"system:masters\""
    echo "$(cat "$PKI/kcm.token"),system:kube-controller-manager,kcm,\"system:masters\""
  } >"$PKI/tokens.csv"
  chmod 600 "$PKI"/*.key "$PKI"/*.token "$PKI/tokens.csv"
}

write_kubeconfig() { # file user token
  local ca; ca="$(base64 -w0 <"$PKI/ca.crt")"
  cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wavegate
  cluster:
    server: $API_URL
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: wavegate
  context:
    cluster: wavegate
    user: $2
    namespace: default
current-context: wavegate
EOF
  chmod 600 "$1.tmp"
  mv "$1.tmp" "$1"
}

# ------------------------------------------------------------------ up -----

start_etcd() {
  if pid_of etcd >/dev/null && await_existing etcd 30 etcd_healthy; then return 0; fi
  port_busy "$ETCD_PORT" && die "127.0.0.1:$ETCD_PORT is in use by another process (set WAVEGATE_ETCD_PORT)"
  mkdir -p "$ETCD_DATA"; chmod 700 "$ETCD_DATA"
  # --unsafe-no-fsync: a throw-away test store; fsync only slows tests down.
  start etcd "$ETCD" \
    --name wavegate --data-dir "$ETCD_DATA" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "wavegate=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --unsafe-no-fsync --log-level warn
  wait_for etcd 30 etcd_healthy
}

start_apiserver() {
  if pid_of kube-apiserver >/dev/null && await_existing kube-apiserver 90 apiserver_ready; then return 0; fi
  port_busy "$APISERVER_PORT" && die "127.0.0.1:$APISERVER_PORT is in use by another process (set WAVEGATE_APISERVER_PORT)"
  start kube-apiserver "$APISERVER" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --advertise-address 127.0.0.1 \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --token-auth-file "$PKI/tokens.csv" \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --profiling=false
  wait_for kube-apiserver 90 apiserver_ready
}

start_kcm() {
  if pid_of kube-controller-manager >/dev/null && await_existing kube-controller-manager 60 kcm_healthy; then return 0; fi
  port_busy "$KCM_PORT" && die "127.0.0.1:$KCM_PORT is in use by another process (set WAVEGATE_KCM_PORT)"
  write_kubeconfig "$KCM_KUBECONFIG" system:kube-controller-manager "$(cat "$PKI/kcm.token")"
  mkdir -p "$STATE/kcm-certs"
  start kube-controller-manager "$KCM" \
    --kubeconfig "$KCM_KUBECONFIG" \
    --authentication-kubeconfig "$KCM_KUBECONFIG" --authorization-kubeconfig "$KCM_KUBECONFIG" \
    --authentication-skip-lookup \
    --authorization-always-allow-paths /healthz,/readyz,/livez \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$STATE/kcm-certs" \
    --controllers endpointslice-controller,endpoints-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,root-ca-certificate-publisher-controller \
    --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" \
    --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=false \
    ${WAVEGATE_KCM_API_QPS:+--kube-api-qps "$WAVEGATE_KCM_API_QPS" --kube-api-burst "$((2 * WAVEGATE_KCM_API_QPS))"} \
    --profiling=false
  wait_for kube-controller-manager 60 kcm_healthy
}

register_node() {
  api GET "/api/v1/nodes/$NODE_NAME" -o /dev/null 2>/dev/null && return 0
  log "registering fake Node $NODE_NAME"
  local ts; ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  api POST /api/v1/nodes -o /dev/null -H 'Content-Type: application/json' --data-binary @- <<EOF || die "could not create Node $NODE_NAME"
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$NODE_NAME","labels":{"kubernetes.io/hostname":"$NODE_NAME","kubernetes.io/os":"linux"}}}
EOF
  # Status is set through the status subresource (as a kubelet would).
  api PATCH "/api/v1/nodes/$NODE_NAME/status" -o /dev/null -H 'Content-Type: application/merge-patch+json' --data-binary @- <<EOF || die "could not set Node $NODE_NAME Ready"
{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"wavegate fake node","lastHeartbeatTime":"$ts","lastTransitionTime":"$ts"}],
 "addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"$NODE_NAME"}],
 "capacity":{"cpu":"64","memory":"256Gi","pods":"1000"},"allocatable":{"cpu":"64","memory":"256Gi","pods":"1000"}}}
EOF
}

crd_name() { awk '/^metadata:/{m=1;next} m&&/^[^ #]/{m=0} m&&/^  name:/{print $2; exit}' "$1"; }

crd_established() {
  api GET "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$1" 2>/dev/null \
    | tr -d ' \n' | grep -q '"type":"Established","status":"True"'
}

apply_crds() {
  [[ -d "$CRD_DIR" ]] || return 0
  local f name names=() out
  for f in "$CRD_DIR"/*.yaml; do
    [[ -e "$f" ]] || continue
    name="$(crd_name "$f")"
    [[ -n "$name" ]] || die "$f: no metadata.name found"
    # Server-side apply of a single YAML document: idempotent, no kubectl needed.
    if ! out="$(api PATCH "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$name?fieldManager=wavegate-control-plane&force=true" \
        -H 'Content-Type: application/apply-patch+yaml' --data-binary @"$f" 2>&1)"; then
      echo "$out" >&2
      die "applying CRD $f failed"
    fi
    names+=("$name")
  done
  local deadline=$(( $(date +%s) + 30 ))
  for name in "${names[@]}"; do
    until crd_established "$name"; do
      (( $(date +%s) < deadline )) || die "CRD $name not Established after 30s"
      sleep 0.2
    done
  done
  (( ${#names[@]} == 0 )) || log "CRDs established: ${names[*]}"
}

all_healthy() {
  pid_of etcd >/dev/null && pid_of kube-apiserver >/dev/null && pid_of kube-controller-manager >/dev/null \
    && etcd_healthy && apiserver_ready && kcm_healthy && [[ -f "$KUBECONFIG_OUT" ]]
}

print_env() { echo "export KUBECONFIG=$KUBECONFIG_OUT"; }

cmd_up() {
  need curl; need openssl
  mkdir -p "$STATE" "$LOGS"
  if [[ -f "$TOKEN_FILE" ]] && all_healthy; then
    log "already up ($API_URL)"
    register_node   # no-ops when present; keeps tests/crds in sync
    apply_crds
    print_env
    return 0
  fi
  # Built binaries need no build lock (another `up` or a long build may hold it).
  [[ -x "$APISERVER" && -x "$KCM" && -x "$ETCD" ]] || cmd_build
  ensure_pki
  local t0 t1; t0=$(now_ms)
  start_etcd
  t1=$(now_ms); log "etcd healthy after $((t1 - t0)) ms"
  start_apiserver
  t1=$(now_ms); log "kube-apiserver ready after $((t1 - t0)) ms"
  write_kubeconfig "$KUBECONFIG_OUT" admin "$(admin_token)"
  start_kcm
  t1=$(now_ms); log "kube-controller-manager healthy after $((t1 - t0)) ms"
  register_node
  wait_for kube-controller-manager 60 default_sa_exists
  t1=$(now_ms); log "default ServiceAccount present after $((t1 - t0)) ms"
  apply_crds
  t1=$(now_ms); log "control plane up in $((t1 - t0)) ms ($API_URL, kube v$KUBE_VERSION, etcd v$ETCD_VERSION)"
  print_env
}

# ---------------------------------------------------------------- down -----

stop() { # component timeout_s
  local name="$1" timeout="$2" pid
  if ! pid="$(pid_of "$name")"; then rm -f "$STATE/$name.pid"; return 0; fi
  local t0; t0=$(now_ms)
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$(( $(date +%s) + timeout ))
  while alive "$pid" && (( $(date +%s) < deadline )); do sleep 0.1; done
  if alive "$pid"; then
    log "$name did not exit after ${timeout}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  fi
  log "stopped $name (pid $pid) in $(( $(now_ms) - t0 )) ms"
  rm -f "$STATE/$name.pid"
}

cmd_down() {
  stop kube-controller-manager 10
  stop kube-apiserver 15
  stop etcd 15
  rm -rf "$ETCD_DATA"
  log "down (etcd data removed)"
}

# -------------------------------------------------------------- status -----

cmd_status() {
  local c pid health rc=0
  for c in etcd kube-apiserver kube-controller-manager; do
    if pid="$(pid_of "$c")"; then
      case "$c" in
        etcd) etcd_healthy && health=healthy || health=UNHEALTHY ;;
        kube-apiserver) apiserver_ready && health=ready || health=NOT-READY ;;
        kube-controller-manager) kcm_healthy && health=healthy || health=UNHEALTHY ;;
      esac
      printf '%-24s running  pid %-8s %s\n' "$c" "$pid" "$health"
      [[ "$health" =~ ^(healthy|ready)$ ]] || rc=1
    else
      printf '%-24s stopped\n' "$c"; rc=1
    fi
  done
  echo "apiserver: $API_URL   state: $STATE"
  (( rc == 0 )) && print_env
  return "$rc"
}

# ------------------------------------------------------- fault injection ----

component_arg() { # name -> validated component name
  case "${1:-}" in
    etcd|kube-apiserver|kube-controller-manager) echo "$1" ;;
    *) die "component must be etcd, kube-apiserver or kube-controller-manager (got '${1:-}')" ;;
  esac
}

cmd_pid() { pid_of "$(component_arg "${1:-}")" || die "${1:-} is not running"; }

cmd_stop_component() {
  local c; c="$(component_arg "${1:-}")"
  # A stopped (SIGSTOP) process never exits on SIGTERM; let it go on first.
  local pid; if pid="$(pid_of "$c")"; then kill -CONT "$pid" 2>/dev/null || true; fi
  stop "$c" 15
}

cmd_start_component() {
  local c; c="$(component_arg "${1:-}")"
  case "$c" in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kube-controller-manager) start_kcm ;;
  esac
}

# Compaction through etcd's gRPC gateway (no etcdctl needed): every revision before the
# current one is gone, so a watch that resumes from an older resourceVersion gets 410 Gone.
cmd_compact() {
  local rev
  rev="$(curl -sSf --max-time 5 -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/range" -d '{"key":"AA=="}' \
    | sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')"
  [[ -n "$rev" ]] || die "cannot read etcd's current revision"
  curl -sSf --max-time 30 -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/compaction" \
    -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null || die "compaction to $rev failed"
  log "etcd compacted to revision $rev"
  echo "$rev"
}

case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) print_env ;;
  pid) cmd_pid "${2:-}" ;;
  stop-component) cmd_stop_component "${2:-}" ;;
  start-component) cmd_start_component "${2:-}" ;;
  compact) cmd_compact ;;
  *) echo "usage: $0 build|up|down|status|env|pid|stop-component|start-component|compact" >&2; exit 2 ;;
esac
