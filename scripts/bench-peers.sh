#!/usr/bin/env bash
# The peers side by side (issue 11, item 5): four ways to wait for the same Services and CNPG
# Databases on the local control plane, run at the same time, each as its own ServiceAccount
# whose requests land in a FlowSchema of its own, so the API server's priority-and-fairness
# counters (apiserver_flowcontrol_dispatched_requests_total{flow_schema=…}) attribute every
# request — discovery included — to one peer. Writes the "Peers side by side" section of
# docs/benchmarks.md (the rest of the file is kept).
#
#   seed   seed 001's wait-for-databases Job loop (/work/shared/seeds, 001): `kubectl get` of each
#          Database's status every 5 s. The report gives no interval; 5 s is what its "up to 5
#          minutes" makes of a usual 60-try loop. It reads `.status.ready`, a field CNPG never
#          sets (every release: `status.applied`), so as written it would never finish; here it
#          reads `.status.applied`. Databases only, as in the seed.
#   waitfor  k8s-wait-for's loop (groundnuty/k8s-wait-for wait_for.sh, WAIT_TIME=2): a Service is
#          `kubectl get service` for its selector, then `kubectl get pods -l…` for the Ready
#          conditions; every 2 s. It has no CRD support; its style for a Database is one
#          `kubectl get` every 2 s.
#   kwait  `kubectl wait`: pods `--for=condition=Ready -l <selector>` for a Service (kubectl cannot
#          wait for a Service's endpoints), `--for=jsonpath={.status.applied}=true` for a Database.
#   wavegate  `wavegate serve` (release build) with one WaveGate per target; the waiter is the HTTP
#          gate wait (`GET /api/v1/gates/…/wait`). wavegate's own requests are counted, whoever
#          waits on it.
#
# Each waiter is one process, like one hook Job, with its own kubectl discovery cache.
# Knobs (env): BENCH_PEERS_TARGETS (4 Services and 4 Databases), BENCH_PEERS_WINDOW (60 s of
# waiting measured after the first 10 s), BENCH_PEERS_PORT (18195).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

targets=${BENCH_PEERS_TARGETS:-4}
window=${BENCH_PEERS_WINDOW:-60}
port=${BENCH_PEERS_PORT:-18195}
startup=10
ns=wgbench-peers
idns=wgbench-peers-id
peers=(seed waitfor kwait wavegate)
out=$here/target/bench/peers-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
private=$(mktemp -d) # tokens live only here
pids=()
started=$(date +%s)
step() { printf '\n== [%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
k() { kubectl --request-timeout=30s "$@"; }
now_ns() { date +%s%N; }

cleanup() {
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  if [ -n "${KUBECONFIG:-}" ]; then
    k -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1
    k delete namespace "$ns" "$idns" --wait=false >/dev/null 2>&1
    for p in "${peers[@]}"; do k delete flowschema "wgbench-peers-$p" --ignore-not-found >/dev/null 2>&1; done
    k delete clusterrolebinding wgbench-peers-wavegate wgbench-peers-read --ignore-not-found >/dev/null 2>&1
    k delete clusterrole wgbench-peers-read --ignore-not-found >/dev/null 2>&1
  fi
  rm -rf "$private"
}
trap cleanup EXIT

step "control plane, release build"
scripts/control-plane.sh up >"$out/control-plane.log"
eval "$(scripts/control-plane.sh env)"
cargo build --release --quiet --bin wavegate
wavegate=$here/target/release/wavegate

step "identities: one ServiceAccount and FlowSchema per peer"
k delete namespace "$ns" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1 || true
{
  cat <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $idns}
---
apiVersion: v1
kind: Namespace
metadata: {name: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: wgbench-peers-read}
rules:
  - {apiGroups: [""], resources: [services, pods], verbs: [get, list, watch]}
  - {apiGroups: [postgresql.cnpg.io], resources: [databases], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: wgbench-peers-read}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wgbench-peers-read}
subjects:
  - {kind: ServiceAccount, name: seed, namespace: $idns}
  - {kind: ServiceAccount, name: waitfor, namespace: $idns}
  - {kind: ServiceAccount, name: kwait, namespace: $idns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: wgbench-peers-wavegate}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: wavegate, namespace: $idns}]
YAML
  for p in "${peers[@]}"; do
    cat <<YAML
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $p, namespace: $idns}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: wgbench-peers-$p}
spec:
  priorityLevelConfiguration: {name: workload-low}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
    - subjects: [{kind: ServiceAccount, serviceAccount: {name: $p, namespace: $idns}}]
      resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
      nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
YAML
  done
} | k apply --server-side -f - >/dev/null
for p in "${peers[@]}"; do
  cp "$KUBECONFIG" "$private/$p.kubeconfig"
  chmod 600 "$private/$p.kubeconfig"
  kubectl --kubeconfig "$private/$p.kubeconfig" config set-credentials admin \
    --token="$(k -n "$idns" create token "$p" --duration=1h)" >/dev/null
done
counts() { # → "seed waitfor kwait wavegate" dispatched-request counters
  k get --raw /metrics | awk -v list="${peers[*]}" '
    BEGIN {n = split(list, p, " ")}
    /^apiserver_flowcontrol_dispatched_requests_total\{/ {
      for (i = 1; i <= n; i++) if (index($0, "flow_schema=\"wgbench-peers-" p[i] "\"")) c[i] += $NF }
    END {for (i = 1; i <= n; i++) printf "%.0f ", c[i]; print ""}'
}

step "$targets Services (one pod each, not Ready) and $targets CNPG Databases (not applied), one WaveGate each"
{
  cat <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: pg, namespace: $ns}
spec: {instances: 1, storage: {size: 1Gi}}
YAML
  for i in $(seq 1 "$targets"); do
    cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: svc-$i-0, namespace: $ns, labels: {app: svc-$i}}
spec: {nodeName: wavegate-node, containers: [{name: main, image: example.invalid/app:1}]}
---
apiVersion: v1
kind: Service
metadata: {name: svc-$i, namespace: $ns}
spec: {selector: {app: svc-$i}, ports: [{port: 80}]}
---
apiVersion: postgresql.cnpg.io/v1
kind: Database
metadata: {name: db-$i, namespace: $ns}
spec: {name: db$i, owner: app, cluster: {name: pg}}
---
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: svc-$i, namespace: $ns}
spec: {checks: [{name: svc, service: {name: svc-$i, minReady: 1}}]}
---
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: db-$i, namespace: $ns}
spec: {checks: [{name: db, cnpgDatabase: {name: db-$i}}]}
YAML
  done
} | k apply --server-side -f - >/dev/null
# The admin's changes go through `kubectl proxy`, so that t0 is taken right before a curl that
# starts in milliseconds, not before a kubectl that spends ~100 ms starting up.
kubectl proxy --port=$((port + 1)) >"$out/proxy.log" 2>&1 &
pids+=($!)
proxy=http://127.0.0.1:$((port + 1))
for _ in $(seq 1 50); do curl -fsS "$proxy/version" >/dev/null 2>&1 && break; sleep 0.1; done
patch_status() { # path json
  curl -fsS -X PATCH -H 'Content-Type: application/merge-patch+json' --data "$2" "$proxy$1/status" >/dev/null
}
pod_status() { # ready(True|False) index
  printf '{"status":{"phase":"Running","podIP":"10.244.77.%d","podIPs":[{"ip":"10.244.77.%d"}],"conditions":[{"type":"Ready","status":"%s"},{"type":"ContainersReady","status":"%s"},{"type":"PodScheduled","status":"True"}]}}' "$2" "$2" "$1" "$1"
}
for i in $(seq 1 "$targets"); do patch_status "/api/v1/namespaces/$ns/pods/svc-$i-0" "$(pod_status False "$i")"; done
# Play CNPG's instance manager: the Cluster's primary runs (a Cluster that never had one cannot
# have applied a Database).
patch_status "/apis/postgresql.cnpg.io/v1/namespaces/$ns/clusters/pg" \
  '{"status":{"instances":1,"readyInstances":1,"currentPrimary":"pg-1","targetPrimary":"pg-1","phase":"Cluster in healthy state"}}'

# Watching the bench namespace only: the shared control plane holds other tests' WaveGates,
# whose status upkeep is no cost of these checks.
step "wavegate serve --namespaces $ns (as its ServiceAccount), warm"
KUBECONFIG=$private/wavegate.kubeconfig "$wavegate" serve --listen "127.0.0.1:$port" --namespaces "$ns" >"$out/wavegate.log" 2>&1 &
pids+=($!)
url=http://127.0.0.1:$port
for _ in $(seq 1 100); do curl -fsS "$url/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq 1 "$targets"); do
  for g in svc db; do
    for _ in $(seq 1 100); do
      [ "$(curl -fsS "$url/api/v1/gates/$ns/$g-$i" 2>/dev/null | jq -r '.health.status // empty')" = Progressing ] && break
      sleep 0.1
    done
  done
done
curl -fsS "$url/readyz" >/dev/null || { echo "wavegate never became ready; see $out/wavegate.log" >&2; exit 1; }
sleep 3

# ---------------------------------------------------------------------------------------------
# Waiters. Each prints "peer kind index exit-code t_known_ns" to known.txt when it returns.
waiter() { # peer kind index command…
  local p=$1 kind=$2 i=$3 rc=0
  shift 3
  "$@" >"$out/waiter-$p-$kind-$i.log" 2>&1 || rc=$?
  echo "$p $kind $i $rc $(now_ns)" >>"$out/known.txt"
}
kc() { # peer args… — kubectl as that peer, with this waiter's own discovery cache
  local p=$1
  shift
  kubectl --kubeconfig "$private/$p.kubeconfig" --cache-dir "$cache" "$@"
}
seed_db() { # i — seed 001's loop: up to 60 tries, 5 s apart
  local try v
  for try in $(seq 1 60); do
    v=$(kc seed -n "$ns" get databases.postgresql.cnpg.io "db-$1" -o jsonpath='{.status.applied}')
    [ "$v" = true ] && return 0
    sleep 5
  done
  return 1
}
waitfor_svc() { # i — wait_for.sh service: selector from the Service, then the pods' Ready
  local sel states
  while :; do
    sel=$(kc waitfor -n "$ns" get service "svc-$1" -ojson | jq -cr '[.spec.selector | to_entries[] | "\(.key)=\(.value)"] | join(",")')
    states=$(kc waitfor -n "$ns" get pods -l"$sel" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}')
    [ -n "$states" ] && ! grep -q False <<<"$states" && return 0
    sleep 2
  done
}
waitfor_db() { # i
  while [ "$(kc waitfor -n "$ns" get databases.postgresql.cnpg.io "db-$1" -o jsonpath='{.status.applied}')" != true ]; do
    sleep 2
  done
}
gate_wait() { # gate — 408 after 5 min: ask again
  local code
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$url/api/v1/gates/$ns/$1/wait?timeout=5m")
    [ "$code" = 200 ] && return 0
    [ "$code" = 408 ] || return 1
  done
}

step "waiters: $targets Database(s) for seed, $((2 * targets)) checks for each other peer"
: >"$out/known.txt"
read -r -a c0 < <(counts)
t_start=$(now_ns)
for i in $(seq 1 "$targets"); do
  for p in seed waitfor kwait; do mkdir -p "$out/cache/$p-$i"; done
  cache=$out/cache/seed-$i waiter seed db "$i" seed_db "$i" &
  pids+=($!)
  cache=$out/cache/waitfor-$i waiter waitfor svc "$i" waitfor_svc "$i" &
  pids+=($!)
  cache=$out/cache/waitfor-$i waiter waitfor db "$i" waitfor_db "$i" &
  pids+=($!)
  cache=$out/cache/kwait-$i waiter kwait svc "$i" kc kwait -n "$ns" wait --for=condition=Ready pod -l "app=svc-$i" --timeout=10m &
  pids+=($!)
  cache=$out/cache/kwait-$i waiter kwait db "$i" kc kwait -n "$ns" wait --for=jsonpath='{.status.applied}'=true "databases.postgresql.cnpg.io/db-$i" --timeout=10m &
  pids+=($!)
  waiter wavegate svc "$i" gate_wait "svc-$i" &
  pids+=($!)
  waiter wavegate db "$i" gate_wait "db-$i" &
  pids+=($!)
done
sleep "$startup"
read -r -a c1 < <(counts)
t_steady=$(now_ns)
step "waiting ${window}s (nothing true yet)"
sleep "$window"
read -r -a c2 < <(counts)
t_flip=$(now_ns)
if [ -s "$out/known.txt" ]; then
  echo "some waiter returned before anything was true:" >&2
  cat "$out/known.txt" >&2
  exit 1
fi

step "conditions become true, one target every 0.5–1.5 s (t0 right before each status patch)"
: >"$out/true.txt"
for i in $(seq 1 "$targets"); do
  t=$(now_ns)
  patch_status "/api/v1/namespaces/$ns/pods/svc-$i-0" "$(pod_status True "$i")"
  echo "svc $i $t" >>"$out/true.txt"
  sleep "0.$((5 + RANDOM % 10))"
  gen=$(k -n "$ns" get databases.postgresql.cnpg.io "db-$i" -o jsonpath='{.metadata.generation}')
  t=$(now_ns)
  patch_status "/apis/postgresql.cnpg.io/v1/namespaces/$ns/databases/db-$i" "{\"status\":{\"applied\":true,\"observedGeneration\":$gen}}"
  echo "db $i $t" >>"$out/true.txt"
  sleep "0.$((5 + RANDOM % 10))"
done
expected=$((7 * targets))
for _ in $(seq 1 300); do
  [ "$(wc -l <"$out/known.txt")" -ge "$expected" ] && break
  sleep 0.1
done
read -r -a c3 < <(counts)
[ "$(wc -l <"$out/known.txt")" -ge "$expected" ] || { echo "not every waiter returned within 30 s; see $out/known.txt" >&2; exit 1; }
if awk '$4 != 0' "$out/known.txt" | grep -q .; then
  echo "a waiter failed:" >&2
  awk '$4 != 0' "$out/known.txt" >&2
  exit 1
fi

# ---------------------------------------------------------------------------------------------
step "docs/benchmarks.md"
steady_s=$(awk -v a="$t_steady" -v b="$t_flip" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
# peer → checks, first-10-s requests per check, steady requests per minute per check, latency list
latencies() { # peer [kind] → "p50 max n" in ms over its waiters (of that kind)
  awk -v p="$1" -v k="${2:-}" 'NR == FNR {t0[$1 " " $2] = $3; next}
       $1 == p && (k == "" || $2 == k) {print ($5 - t0[$2 " " $3]) / 1e6}' "$out/true.txt" "$out/known.txt" |
    sort -n | awk '{v[NR] = $1} END {printf "%.0f %.0f %d\n", v[int((NR + 1) / 2)], v[NR], NR}'
}
declare -A checks start_pc steady_pm p50 maxl n by_kind
for idx in "${!peers[@]}"; do
  p=${peers[$idx]}
  if [ "$p" = seed ]; then checks[$p]=$targets; else checks[$p]=$((2 * targets)); fi
  start_pc[$p]=$(awk -v a="${c0[$idx]}" -v b="${c1[$idx]}" -v c="${checks[$p]}" 'BEGIN {printf "%.1f", (b - a) / c}')
  steady_pm[$p]=$(awk -v a="${c1[$idx]}" -v b="${c2[$idx]}" -v c="${checks[$p]}" -v s="$steady_s" 'BEGIN {printf "%.2f", (b - a) / c / s * 60}')
  read -r p50[$p] maxl[$p] n[$p] < <(latencies "$p")
  for kind in svc db; do
    by_kind[$p.$kind]=$(latencies "$p" "$kind" | awk '$3 > 0 {printf "%s / %s ms", $1, $2} $3 == 0 {print "—"}')
  done
  echo "$p: ${checks[$p]} checks; first ${startup}s ${start_pc[$p]} req/check; steady ${steady_pm[$p]} req/min/check; condition true → known p50 ${p50[$p]} ms, max ${maxl[$p]} ms (n=${n[$p]}); raw c0..c3 ${c0[$idx]} ${c1[$idx]} ${c2[$idx]} ${c3[$idx]}" | tee -a "$out/summary.txt" >&2
done
ratio() { # value base → "×N" (base 0: how many per request of the other)
  awk -v v="$1" -v b="$2" 'BEGIN {if (b + 0 == 0) print (v + 0 == 0 ? "=" : "∞ (wavegate: 0)"); else printf "×%.1f", v / b}'
}
label() {
  case $1 in
    seed) echo "seed 001's wait-for-databases Job loop (\`kubectl get\` every 5 s; Databases only)" ;;
    waitfor) echo "k8s-wait-for style (\`kubectl get\` every 2 s; a Service is 2 gets)" ;;
    kwait) echo "\`kubectl wait\` (one watch per check)" ;;
    wavegate) echo "**wavegate** (HTTP gate wait; shared watch caches; \`--namespaces\` the bench's)" ;;
  esac
}
w=wavegate
# wavegate's heartbeat (12 /readyz a minute per process) is in no FlowSchema counter of its own
# (see the text below); it is shared by its checks, and the ratios count it.
w_pm=$(awk -v v="${steady_pm[$w]}" -v c="${checks[$w]}" 'BEGIN {printf "%.2f", v + 12 / c}')
kube_version=$(k version -o json 2>/dev/null | jq -r '.serverVersion.gitVersion // "?"')
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
pods_in_cluster=$(k get pods -A --no-headers 2>/dev/null | wc -l)
section=$out/section.md
{
  cat <<EOF
## Peers side by side: API-server requests and time to know

Generated by \`scripts/bench-peers.sh\` ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)) — rerun it to update this section.
Machine: $(nproc) cores ($cpu), $mem_total, shared by everything below. Cluster: the local control
plane (kube-apiserver $kube_version, etcd, kube-controller-manager; $pods_in_cluster pods in the cluster
at the end). Targets: $targets Services (one pod each) and $targets CNPG Databases in one namespace,
waited on by all four peers at once; each peer is a ServiceAccount with a FlowSchema of its own,
and its requests are \`apiserver_flowcontrol_dispatched_requests_total\` for that FlowSchema
(discovery included). Each poller is one process per check with its own kubectl discovery
cache, as one hook Job each.

| waiter | checks | requests per check, first ${startup} s | requests per minute per check, waiting | vs wavegate | condition true → waiter knows, p50 / max: Services | Databases | all | vs wavegate (p50, all) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
EOF
  for p in "${peers[@]}"; do
    echo "| $(label "$p") | ${checks[$p]} | ${start_pc[$p]} | ${steady_pm[$p]}$([ "$p" = wavegate ] && echo " counted + $(awk -v c="${checks[$w]}" 'BEGIN {printf "%.2f", 12 / c}') heartbeat = **$w_pm**") | $(if [ "$p" = wavegate ]; then echo "×1.0"; else ratio "${steady_pm[$p]}" "$w_pm"; fi) | ${by_kind[$p.svc]} | ${by_kind[$p.db]} | ${p50[$p]} / ${maxl[$p]} ms (n=${n[$p]}) | $(ratio "${p50[$p]}" "${p50[$w]}") |"
  done
  cat <<EOF

How it is measured: the waiters start together; "first ${startup} s" counts their start-up
(kubectl discovery, \`kubectl wait\`'s list and watch, the first polls); "waiting" is the next
${steady_s} s with nothing true, scaled to a minute. wavegate had listed and was watching before the
waiters started (its start-up is once per install, not per check); its row counts every request
it made in that minute, divided by its $((2 * targets)) checks ($(awk -v v="${steady_pm[$w]}" -v c="${checks[$w]}" 'BEGIN {printf "%.1f", v * c}') a minute in all). Not in any counter: its
API-server heartbeat, \`GET /readyz\` every 5 s (\`src/cache.rs\`), which the API server's built-in
\`probes\` FlowSchema (precedence 2) takes before any other — 12 a minute per wavegate process,
however many checks wait on it (here shared by ${checks[$w]}: the wavegate row and the ratios add it), while the
pollers' and \`kubectl wait\`'s costs are per check: each \`kubectl\` run is the read plus its
discovery revalidation (about 4 requests), and \`kubectl wait\` holds one watch per check open on
the API server (wavegate one per watched kind, whatever the number of checks). Then each target's condition becomes true
— a pod's status patched Ready (the kubelet's write), or a Database's status patched
\`applied: true\` at its generation (CNPG's write) — t0 right before the patch, and the waiter
knows when its process returns (the gate wait's HTTP 200). A Service for wavegate means ready
endpoints (kube-controller-manager's EndpointSlice update is in its time), for the others the
pods' Ready condition. The seed's loop reads \`.status.applied\`: it reads \`.status.ready\` in the
report, which CNPG never sets, so as written it never finishes. Raw output:
\`target/bench/$(basename "$out")/\`.
EOF
} >"$section"
# Replace this section (from its heading to the next "## ") or insert it before "## Real Argo CD".
awk -v sec="$section" '
  function emit() {while ((getline l < sec) > 0) print l; print ""; done = 1}
  /^## Peers side by side/ {skip = 1; emit(); next}
  skip && /^## / {skip = 0}
  !done && /^## Real Argo CD/ {emit()}
  !skip {print}
  END {if (!done) {print ""; emit()}}' docs/benchmarks.md >"$out/benchmarks.md"
cp "$out/benchmarks.md" docs/benchmarks.md
cat "$section"
