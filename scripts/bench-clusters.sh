#!/usr/bin/env bash
# What one more idle cluster costs `wavegate serve`: its RSS, its TCP connections to each API
# server, and the watches it opens there, measured as private control planes are added one at a
# time (docs/benchmarks.md, "One more cluster").
#
#   KUBECONFIG=… scripts/bench-clusters.sh [N]    # N extra clusters (default 3)
#
# Home is the control plane KUBECONFIG names (wavegate watches one namespace of its own there,
# `--namespaces wgbench-clusters`). Each extra cluster is `scripts/control-plane.sh up` with its own
# state directory and ports, given the WaveGate CRD (deploy/remote-cluster) and nothing else, and
# joined through `--clusters-from kubeconfig-dir` with its admin kubeconfig. The extra control
# planes are stopped and their state deleted when the script ends; the shared one is never touched
# beyond the bench namespace.
#
# Environment: WAVEGATE_BIN (default target/debug/wavegate), WAVEGATE_BENCH_PORT (8099).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-3}"
BIN="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
PORT="${WAVEGATE_BENCH_PORT:-8099}"
: "${KUBECONFIG:?KUBECONFIG must name the home control plane}"
[[ -x "$BIN" ]] || { echo "no $BIN (cargo build first)" >&2; exit 1; }
WORK="$(mktemp -d /tmp/wgbench-clusters.XXXXXX)"
DIR="$WORK/clusters"
mkdir -p "$DIR"
NS=wgbench-clusters
PID=""
STATES=()

cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  for s in "${STATES[@]}"; do
    # shellcheck disable=SC2046
    env $(cat "$s/bench.env") "$ROOT/scripts/control-plane.sh" down >/dev/null 2>&1 || true
    rm -rf "$s"
  done
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Watches open on an API server (kube-apiserver's own gauge, every client).
watches() {
  kubectl --kubeconfig "$1" get --raw /metrics 2>/dev/null |
    awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {s += $NF} END {print s + 0}'
}

# wavegate's established connections to 127.0.0.1:PORT.
conns() {
  ss -tnpH state established "( dport = :$1 )" 2>/dev/null | grep -c "pid=$PID," || true
}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$PID/status"; }

ready_clusters() {
  curl -sf "http://127.0.0.1:$PORT/api/v1/clusters" |
    python3 -c 'import json,sys; print(sum(1 for c in json.load(sys.stdin)["clusters"] if c["ready"]))'
}

kubectl create namespace "$NS" >/dev/null 2>&1 || true
"$BIN" serve --listen "127.0.0.1:$PORT" --namespaces "$NS" \
  --clusters-from kubeconfig-dir --clusters-kubeconfig-dir "$DIR" --clusters-resync 2s \
  >"$WORK/serve.log" 2>&1 &
PID=$!
home_port="$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}' | sed 's/.*://')"

settle() { # wait until $1 clusters (home included) are ready, then let it idle
  for _ in $(seq 1 120); do
    [[ "$(ready_clusters 2>/dev/null || echo 0)" == "$1" ]] && break
    sleep 1
  done
  sleep 10
}

settle 1
printf '| clusters | RSS (MiB) | connections to home | connections to each extra | watches on each extra (wavegate’s) |\n'
printf '| --- | --- | --- | --- | --- |\n'
printf '| home only | %.1f | %s | — | — |\n' "$(echo "$(rss_kib)/1024" | bc -l)" "$(conns "$home_port")"
ports=()
for i in $(seq 1 "$N"); do
  state="$WORK/cp$i"
  api="$(free_port)"; etcd="$(free_port)"; kcm="$(free_port)"
  mkdir -p "$state"
  echo "WAVEGATE_STATE=$state WAVEGATE_APISERVER_PORT=$api WAVEGATE_ETCD_PORT=$etcd WAVEGATE_KCM_PORT=$kcm" >"$state/bench.env"
  STATES+=("$state")
  # shellcheck disable=SC2046
  env $(cat "$state/bench.env") "$ROOT/scripts/control-plane.sh" up >/dev/null 2>&1
  kubectl --kubeconfig "$state/kubeconfig" apply --server-side -k "$ROOT/deploy/remote-cluster" >/dev/null
  kubectl --kubeconfig "$state/kubeconfig" wait --for=condition=Established --timeout=30s crd/wavegates.wavegate.dev >/dev/null
  before="$(watches "$state/kubeconfig")"
  cp "$state/kubeconfig" "$DIR/extra$i"
  ports+=("$api")
  settle "$((i + 1))"
  each=""; w=""
  for j in $(seq 1 "$i"); do
    each+="$(conns "${ports[$((j - 1))]}") "
  done
  w="$(( $(watches "$state/kubeconfig") - before ))"
  printf '| home + %s | %.1f | %s | %s| %s (newest) |\n' "$i" "$(echo "$(rss_kib)/1024" | bc -l)" \
    "$(conns "$home_port")" "$each" "$w"
done
