#!/usr/bin/env bash
# What each replica costs as replicas grow over the same clusters (docs/benchmarks.md, "Cost per
# replica as replicas grow"): clusters owned, watches, RSS and gate status writes of every
# `wavegate serve --shard-like-argocd` replica, for 1, 2, 3 and 6 replicas judging the same
# home + N private control planes.
#
#   KUBECONFIG=… scripts/bench-shards.sh [N] [REPLICA COUNTS…]   # default: 5 1 2 3 6
#
# Home is the control plane KUBECONFIG names (Argo CD's in-cluster destination, with no Secret).
# Each extra cluster is `scripts/control-plane.sh up` with its own state directory and ports
# (all started at once), given deploy/remote-cluster and joined by an Argo CD cluster Secret
# (bearer token of its wavegate ServiceAccount, its own CA) in the bench namespace at home.
# argocd-cmd-params-cm there sets `controller.sharding.algorithm: round-robin`, so the clusters
# spread evenly, as Argo CD spreads them. Every cluster has one WaveGate on a Service whose one
# pod the script flips between ready and not ready.
#
# For each replica count R: R processes (`--shard-replicas R --shard k`, Leases in a namespace
# of their own), wait until every cluster is owned by one of them and every gate is written,
# 12 s more to idle, then flip every cluster's pod FLIPS times (BENCH_SHARDS_FLIPS, 4), 3 s
# apart, and read each replica's metrics 5 s after the last: wavegate_shard_clusters_owned,
# wavegate_watches (the watches it holds, over every cluster), its VmRSS, and the rise of
# wavegate_cluster_gate_status_writes_total over the flips. The replicas are stopped with
# SIGTERM before the next count. Private control planes are stopped and deleted at the end.
#
# Environment: WAVEGATE_BIN (default $CARGO_TARGET_DIR or target, /debug/wavegate),
# BENCH_SHARDS_PORT (first port, 18300).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-5}"
shift || true
COUNTS=("$@")
[[ ${#COUNTS[@]} -gt 0 ]] || COUNTS=(1 2 3 6)
BIN="${WAVEGATE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/wavegate}"
PORT="${BENCH_SHARDS_PORT:-18300}"
FLIPS="${BENCH_SHARDS_FLIPS:-4}"
: "${KUBECONFIG:?KUBECONFIG must name the home control plane}"
[[ -x "$BIN" ]] || { echo "no $BIN (cargo build first)" >&2; exit 1; }
WORK="$(mktemp -d /tmp/wgbench-shards.XXXXXX)"
NS=wgbench-shards
PIDS=()
STATES=()
KUBECONFIGS=("$KUBECONFIG")
started=$(date +%s)
step() { printf '== [%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }

stop_replicas() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

cleanup() {
  set +e
  stop_replicas
  for s in "${STATES[@]}"; do
    # shellcheck disable=SC2046
    env $(cat "$s/bench.env") "$ROOT/scripts/control-plane.sh" down >/dev/null 2>&1
    rm -rf "$s"
  done
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1
  for r in "${COUNTS[@]}"; do kubectl delete namespace "$NS-leases-$r" --wait=false >/dev/null 2>&1; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
scrape() { curl -sf "$1/metrics" || true; } # nothing yet from a replica still starting
metric() { # metric URL NAME: the value of an unlabelled metric (0 when absent)
  scrape "$1" | awk -v m="$2" '$1 == m {v = $2} END {print v + 0}'
}
writes() { # writes URL: the sum of wavegate_cluster_gate_status_writes_total over clusters
  scrape "$1" | awk '/^wavegate_cluster_gate_status_writes_total\{/ {s += $NF} END {print s + 0}'
}
set_ready() { # set_ready KUBECONFIG INDEX true|false
  local s=False; [[ "$3" == true ]] && s=True
  kubectl --kubeconfig "$1" -n "$NS" patch pod web-0 --subresource=status --type=merge -p \
    "{\"status\":{\"phase\":\"Running\",\"podIP\":\"10.96.$2.1\",\"podIPs\":[{\"ip\":\"10.96.$2.1\"}],
      \"conditions\":[{\"type\":\"Ready\",\"status\":\"$s\"},{\"type\":\"ContainersReady\",\"status\":\"$s\"},
      {\"type\":\"PodScheduled\",\"status\":\"True\"}]}}" >/dev/null
}

step "starting $N private control planes at once"
for i in $(seq 1 "$N"); do
  state="$WORK/cp$i"
  mkdir -p "$state"
  # No tests/crds: a destination needs only the WaveGate CRD (deploy/remote-cluster).
  echo "WAVEGATE_CRDS=$state/no-crds WAVEGATE_STATE=$state WAVEGATE_APISERVER_PORT=$(free_port) WAVEGATE_ETCD_PORT=$(free_port) WAVEGATE_KCM_PORT=$(free_port)" >"$state/bench.env"
  STATES+=("$state")
done
ups=()
for s in "${STATES[@]}"; do
  # shellcheck disable=SC2046
  env $(cat "$s/bench.env") "$ROOT/scripts/control-plane.sh" up >"$s/up.log" 2>&1 &
  ups+=("$!")
done
for pid in "${ups[@]}"; do wait "$pid"; done

kubectl create namespace "$NS" >/dev/null 2>&1 || true
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-cmd-params-cm}
data: {controller.sharding.algorithm: round-robin}
EOF
i=0
for s in "${STATES[@]}"; do
  i=$((i + 1))
  kc="$s/kubeconfig"
  KUBECONFIGS+=("$kc")
  kubectl --kubeconfig "$kc" apply --server-side -k "$ROOT/deploy/remote-cluster" >/dev/null
  kubectl --kubeconfig "$kc" wait --for=condition=Established --timeout=30s crd/wavegates.wavegate.dev >/dev/null
  kubectl --kubeconfig "$kc" create namespace "$NS" >/dev/null
  token="$(kubectl --kubeconfig "$kc" -n wavegate create token wavegate --duration=2h)"
  server="$(kubectl --kubeconfig "$kc" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  config="{\"bearerToken\":\"$token\",\"tlsClientConfig\":{\"insecure\":false,\"caData\":\"$(base64 -w0 "$s/pki/ca.crt")\"}}"
  kubectl -n "$NS" create secret generic "cluster-x$i" --from-literal=name="x$i" \
    --from-literal=server="$server" --from-literal=config="$config" >/dev/null
  kubectl -n "$NS" label secret "cluster-x$i" argocd.argoproj.io/secret-type=cluster >/dev/null
done
CLUSTERS=$((N + 1))
i=0
for kc in "${KUBECONFIGS[@]}"; do
  kubectl --kubeconfig "$kc" -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web}}
spec: {containers: [{name: web, image: registry.invalid/web}]}
---
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: web-up}
spec: {checks: [{name: web, service: {name: web}}]}
EOF
  set_ready "$kc" "$i" false
  i=$((i + 1))
done
step "$CLUSTERS clusters ready"

gates_written() { # every cluster's gate has a verdict
  for kc in "${KUBECONFIGS[@]}"; do
    [[ -n "$(kubectl --kubeconfig "$kc" -n "$NS" get wavegate web-up -o jsonpath='{.status.health.status}' 2>/dev/null)" ]] || return 1
  done
}

rows=()
summary=()
for R in "${COUNTS[@]}"; do
  step "$R replicas"
  kubectl create namespace "$NS-leases-$R" >/dev/null 2>&1 || true
  urls=()
  for k in $(seq 0 $((R - 1))); do
    port=$((PORT + k))
    "$BIN" serve --listen "127.0.0.1:$port" --namespaces "$NS" --resync 30s \
      --shard-like-argocd --shard-replicas "$R" --shard "$k" \
      --clusters-from argocd-secrets --clusters-namespace "$NS" --clusters-resync 2s \
      --argocd-namespace "$NS" --leader-elect-namespace "$NS-leases-$R" \
      --leader-elect-identity "bench-$R-$k" --leader-elect-duration 10s \
      >"$WORK/serve-$R-$k.log" 2>&1 &
    PIDS+=("$!")
    urls+=("http://127.0.0.1:$port")
  done
  for _ in $(seq 1 120); do
    owned=0
    for u in "${urls[@]}"; do owned=$((owned + $(metric "$u" wavegate_shard_clusters_owned | cut -d. -f1))); done
    [[ "$owned" == "$CLUSTERS" ]] && gates_written && break
    sleep 1
  done
  [[ "$owned" == "$CLUSTERS" ]] || { echo "only $owned of $CLUSTERS clusters owned" >&2; exit 1; }
  sleep 12
  before=()
  for u in "${urls[@]}"; do before+=("$(writes "$u")"); done
  ready=false
  for f in $(seq 1 "$FLIPS"); do
    if [[ "$ready" == true ]]; then ready=false; else ready=true; fi
    i=0
    for kc in "${KUBECONFIGS[@]}"; do set_ready "$kc" "$i" "$ready"; i=$((i + 1)); done
    sleep 3
  done
  sleep 5
  sum_rss=0; max_rss=0; sum_w=0; sum_watch=0
  for k in $(seq 0 $((R - 1))); do
    u="${urls[$k]}"
    rss="$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/${PIDS[$k]}/status")"
    own="$(metric "$u" wavegate_shard_clusters_owned)"
    watch="$(metric "$u" wavegate_watches)"
    w="$(awk -v a="$(writes "$u")" -v b="${before[$k]}" 'BEGIN {print a - b}')"
    rows+=("| $R | $k | $own | $watch | $rss | $w |")
    sum_rss="$(awk -v a="$sum_rss" -v b="$rss" 'BEGIN {print a + b}')"
    max_rss="$(awk -v a="$max_rss" -v b="$rss" 'BEGIN {print (b > a) ? b : a}')"
    sum_w=$((sum_w + ${w%.*})); sum_watch=$((sum_watch + ${watch%.*}))
  done
  summary+=("| $R | $(awk -v c="$CLUSTERS" -v r="$R" 'BEGIN {printf "%.1f", c / r}') | $(awk -v a="$sum_watch" -v r="$R" 'BEGIN {printf "%.1f", a / r}') | $max_rss | $sum_rss | $(awk -v a="$sum_w" -v r="$R" 'BEGIN {printf "%.1f", a / r}') | $sum_w |")
  stop_replicas
done

printf '\n| replicas | clusters per replica | watches per replica | RSS, largest replica (MiB) | RSS, all replicas (MiB) | status writes per replica | status writes, all |\n'
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
printf '%s\n' "${summary[@]}"
printf '\n| replicas | replica | clusters owned | watches | RSS (MiB) | status writes |\n'
printf '| --- | --- | --- | --- | --- | --- |\n'
printf '%s\n' "${rows[@]}"
