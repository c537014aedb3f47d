#!/usr/bin/env bash
# End-to-end with the real Argo CD (scripts/argocd.sh up): its application-controller,
# repo-server and argocd-server, built from the Go module, sync apps from a local git repository
# against a private control plane, with wavegate (target/debug/wavegate) in the loop. The test
# plays the operators and the kubelet (CNPG status, pod readiness, Deployment status) and asserts
# what the API server holds, not what operationState.message says.
#
#   1. Seed 001 (argocd/examples/seed-001-forgejo, served from a local git repository): the
#      Forgejo Deployment (wave 3) is absent while the databases-created gate (wave 2) is
#      Progressing, and is applied once the gate turns Healthy; the next app (wave 5) is absent
#      while the forgejo-serving gate (wave 4) is Progressing — the Deployment already claims
#      an available replica, Argo CD's own view — and appears once a pod backs the Service.
#      The operation Succeeds.
#   2. A gate that turns Degraded (spec.timeout: 3s) fails the real sync: phase Failed, the
#      gate's sync result carries wavegate's reason, the consumer wave is never applied.
#   3. Proxy extension through the real argocd-server with real session tokens: alice gets the
#      waves of her app (with the sync's timeline: waves applied inside the sync, timed by
#      argocd-controller's managedFields stamps), bob (no `extensions, invoke`) and alice asking
#      about an app she may not see are refused. argocd-server's resource events (the UI's
#      Events tab) list the gate's Progressing and Healthy Events; the timed-out gate of 2. has a
#      Warning TimedOut.
#   4. Re-sync: a pod of seed 001 goes not Ready, a new commit is synced; the second sync is
#      held at wave 4 by the current truth (not by the first sync's Healthy), then released.
#   5. App-of-apps: a parent's wave holding a child Application (the project's Application
#      health Lua, as the real controller runs it) does not advance while the child is not
#      synced, and advances once the child has synced; then a new parent revision points the
#      child at a new source, and the parent waits until the child has synced THAT (#4577).
#   5b. App-of-apps, a child whose resources failed (the argo-cd #27917 shape): the child's
#      sync fails on one resource while another is live. From 3.4 on Argo CD drops a resource
#      that is not live from the app's health (controller/health.go, #25962), so the child
#      reports Healthy (asserted there); the project's Application Lua reads the failed sync of
#      the current revision as Degraded, the parent's sync fails and its next wave never starts.
#   6. Annotation mode (wavegate serve --annotate): an annotated Service holds its wave until a
#      ready pod backs it.
#   7. The same release without wavegate, for comparison: a Deployment judged by Argo CD's native
#      health, made available → next wave applied.
#
# Runs against the release scripts/argocd.sh runs (WAVEGATE_ARGOCD_VERSION, same env as `up`);
# where releases differ the test asserts each one's own behaviour.
# Runs inside Argo CD's network namespace (re-executes itself there). Fails, never skips, when
# Argo CD is not up. Timings go to $TEST_OUTPUT/argocd/latency.txt (argocd-v<version>/ for a
# release other than the pinned one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="$("$ROOT/scripts/argocd.sh" env | sed -n 's/^export WAVEGATE_ARGOCD_NETNS=//p')"

fail() {
  echo "e2e-argocd: FAIL: $*" >&2
  if declare -F dump_state >/dev/null; then dump_state >&2 || true; fi
  exit 1
}
log() { echo "e2e-argocd: $*" >&2; }

if [[ "$(ip netns identify $$ 2>/dev/null)" != "$NETNS" ]]; then
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS" \
    || fail "Argo CD is not up: no network namespace $NETNS (run: scripts/argocd.sh up)"
  exec ip netns exec "$NETNS" "$0" "$@"
fi

eval "$("$ROOT/scripts/argocd.sh" env)"
export KUBECONFIG="$WAVEGATE_ARGOCD_KUBECONFIG"
OUT="${TEST_OUTPUT:-$ROOT/test-output}/argocd"
[[ "$WAVEGATE_ARGOCD_VERSION" == "$("$ROOT/scripts/argocd.sh" versions --pinned)" ]] || OUT="$OUT-v$WAVEGATE_ARGOCD_VERSION"
WAVEGATE="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-argocd-e2e.XXXXXX")"
# Until wavegate runs (the trap then stops it too): WORK holds a copy of the binary.
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
now_ms() { date +%s%3N; }
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; } # a >= b

"$ROOT/scripts/argocd.sh" status >/dev/null || { "$ROOT/scripts/argocd.sh" status >&2 || true; fail "Argo CD is not up (run: scripts/argocd.sh up)"; }
# Applications only after the controller answers /healthz.
for _ in $(seq 60); do
  curl -sf --max-time 3 "$WAVEGATE_ARGOCD_CONTROLLER_METRICS/healthz" | grep -qx ok && break
  sleep 1
done
curl -sf --max-time 3 "$WAVEGATE_ARGOCD_CONTROLLER_METRICS/healthz" | grep -qx ok || fail "application-controller /healthz does not answer (60 s)"
# shellcheck source=tests/private-copy.sh
source "$ROOT/tests/private-copy.sh"
private_copy "$WAVEGATE" "$WORK/wavegate" || fail "no private copy of $WAVEGATE to test (above: why)"
WAVEGATE="$WORK/wavegate"

# The API server straight from the kubeconfig: polling through curl is ~10x faster than kubectl.
API="$(sed -n 's/^ *server: //p' "$KUBECONFIG" | head -n1)"
TOKEN="$(sed -n 's/^ *token: //p' "$KUBECONFIG" | head -n1)"
sed -n 's/^ *certificate-authority-data: //p' "$KUBECONFIG" | head -n1 | base64 -d >"$WORK/ca.crt"
api_get() { curl -sf --max-time 5 --cacert "$WORK/ca.crt" -H "Authorization: Bearer $TOKEN" "$API$1"; }
exists() { api_get "$1" >/dev/null; }
jqget() { python3 -c 'import json,sys
d=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else (d if isinstance(d, str) else json.dumps(d)))' "$1"; }
field() { api_get "$1" 2>/dev/null | jqget "$2" 2>/dev/null || true; }

wait_until() { # timeout_s description command...
  local timeout="$1" what="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@"; do
    (( $(date +%s) < deadline )) || fail "timed out after ${timeout}s waiting for: $what"
    sleep 0.1
  done
}

APPS=/apis/argoproj.io/v1alpha1/namespaces/argocd/applications
GATES=/apis/wavegate.dev/v1alpha1
app_phase() { field "$APPS/$1" status.operationState.phase; }
gate_health() { field "$GATES/namespaces/$1/wavegates/$2" status.health.status; }
gate_is() { [[ "$(gate_health "$1" "$2")" == "$3" ]]; }                   # ns name status
phase_matches() { [[ "$(app_phase "$1")" =~ ^($2)$ ]]; }                  # app regex

dump_state() {
  echo "---- Applications ----"
  kubectl -n argocd get applications -o yaml 2>&1 | grep -A30 'operationState:' | head -n 80
  echo "---- WaveGates ----"
  kubectl get wavegates -A -o wide 2>&1 | head -n 20
  echo "---- wavegate log (last lines) ----"
  tail -n 20 "$OUT/wavegate.log" 2>/dev/null
  echo "---- application-controller log (last lines) ----"
  tail -n 20 "${WAVEGATE_ARGOCD_STATE:-$HOME/.cache/wavegate/argocd-state}/logs/application-controller.log" 2>/dev/null
}

# ------------------------------------------------------------- clean slate ----
log "removing what an earlier run left"
for app in $(kubectl -n argocd get applications -o name 2>/dev/null); do
  kubectl -n argocd patch "$app" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
done
kubectl -n argocd delete applications --all --wait=true --timeout=60s >/dev/null
TEST_NAMESPACES="ddb cicd e2e-fail e2e-aoa e2e-aoa-bad e2e-annot e2e-native"
for ns in $TEST_NAMESPACES; do
  kubectl -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
done
# shellcheck disable=SC2086
kubectl delete namespace $TEST_NAMESPACES --ignore-not-found --wait=true --timeout=90s >/dev/null
wait_until 60 "AppProject default (argocd-server creates it)" exists /apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects/default

# ----------------------------------------------------------------- wavegate ----
"$WAVEGATE" serve --listen "127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT" --resync 2s --annotate >"$OUT/wavegate.log" 2>&1 &
WAVEGATE_PID=$!
trap 'kill $WAVEGATE_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
wait_until 30 "wavegate /healthz" curl -sf --max-time 1 "http://127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT/healthz" -o /dev/null

# ------------------------------------------------------------ git repository ----
# Seed 001 as shipped in argocd/examples, minus its two Job hooks (no kubelet runs Jobs here; the
# gates alone hold the waves, as with the argocd-cm patch installed), plus a ConfigMap standing
# in for the next app in wave 5. Argo CD renders the folder as a directory app.
REPO="$WORK/repo"
mkdir -p "$REPO/seed-001" "$REPO/fail"
for f in "$ROOT"/argocd/examples/seed-001-forgejo/*.yaml; do
  case "$(basename "$f")" in
    kustomization.yaml|02-wait-for-databases-hook.yaml|05-next-app.yaml) ;;
    *) cp "$f" "$REPO/seed-001/" ;;
  esac
done
cat >"$REPO/seed-001/05-next-app.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: next-app
  namespace: cicd
  annotations:
    argocd.argoproj.io/sync-wave: "5"
data:
  forgejo: http://forgejo.cicd.svc:3000
YAML
cat >"$REPO/fail/all.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: producer
  namespace: e2e-fail
  annotations:
    argocd.argoproj.io/sync-wave: "0"
---
# Waits for a Service that never comes: wavegate turns the gate Degraded after 3s.
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata:
  name: never-ready
  namespace: e2e-fail
  annotations:
    argocd.argoproj.io/sync-wave: "1"
spec:
  timeout: 3s
  checks:
    - name: backend
      service: {name: backend, minReady: 1}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: consumer
  namespace: e2e-fail
  annotations:
    argocd.argoproj.io/sync-wave: "2"
YAML
mkdir -p "$REPO/parent" "$REPO/child" "$REPO/parent-bad" "$REPO/child-bad" "$REPO/annotated" "$REPO/native"
cat >"$REPO/parent-bad/all.yaml" <<YAML
# Wave 0: a child app whose own sync fails on one resource (automated, no retries).
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: e2e-child-bad
  namespace: argocd
  annotations:
    argocd.argoproj.io/sync-wave: "0"
spec:
  project: default
  source: {repoURL: "file://$REPO", targetRevision: main, path: child-bad}
  destination: {server: https://kubernetes.default.svc, namespace: e2e-aoa-bad}
  syncPolicy:
    automated: {}
    retry: {limit: 0}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: after-bad-child
  namespace: e2e-aoa-bad
  annotations:
    argocd.argoproj.io/sync-wave: "1"
YAML
# The ConfigMap goes live in wave 0; the Deployment of wave 1 passes the client-side dry run and
# is rejected by the API server (selector does not match the template's labels): a resource of a
# kind with a built-in health check that never becomes live, as in argo-cd #27917.
cat >"$REPO/child-bad/all.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: child-bad-config
  namespace: e2e-aoa-bad
  annotations:
    argocd.argoproj.io/sync-wave: "0"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rejected
  namespace: e2e-aoa-bad
  annotations:
    argocd.argoproj.io/sync-wave: "1"
spec:
  replicas: 1
  selector: {matchLabels: {app: rejected}}
  template:
    metadata: {labels: {app: something-else}}
    spec: {containers: [{name: app, image: registry.invalid/app:1}]}
YAML
cat >"$REPO/parent/all.yaml" <<YAML
# Wave 0: the child app (no automated sync: it syncs when the test says so).
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: e2e-child
  namespace: argocd
  annotations:
    argocd.argoproj.io/sync-wave: "0"
spec:
  project: default
  source: {repoURL: "file://$REPO", targetRevision: main, path: child}
  destination: {server: https://kubernetes.default.svc, namespace: e2e-aoa}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: after-child
  namespace: e2e-aoa
  annotations:
    argocd.argoproj.io/sync-wave: "1"
YAML
cat >"$REPO/child/all.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: child-config
  namespace: e2e-aoa
YAML
cat >"$REPO/annotated/all.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: e2e-annot
  annotations:
    argocd.argoproj.io/sync-wave: "0"
    wavegate.dev/annotate: "true"
spec:
  selector: {app: api}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: api-client
  namespace: e2e-annot
  annotations:
    argocd.argoproj.io/sync-wave: "1"
YAML
cat >"$REPO/native/all.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: backend
  namespace: e2e-native
  annotations:
    argocd.argoproj.io/sync-wave: "0"
spec:
  replicas: 1
  selector: {matchLabels: {app: backend}}
  template:
    metadata: {labels: {app: backend}}
    spec: {containers: [{name: backend, image: registry.invalid/backend:1}]}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: backend-client
  namespace: e2e-native
  annotations:
    argocd.argoproj.io/sync-wave: "1"
YAML
git -C "$REPO" init -q -b main
git -C "$REPO" add -A
git -C "$REPO" -c user.name=e2e -c user.email=e2e@wavegate.invalid commit -q -m "seed 001 and a failing gate"

application() { # name path namespace
  kubectl apply -f - >/dev/null <<YAML
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: $1
  namespace: argocd
spec:
  project: default
  source: {repoURL: "file://$REPO", targetRevision: main, path: $2}
  destination: {server: https://kubernetes.default.svc, namespace: $3}
  syncPolicy:
    automated: {}
    syncOptions: [CreateNamespace=true]
    # Automated sync retries 5 times by default; a failure must stay a failure here.
    retry: {limit: 0}
YAML
}

LAT="$OUT/latency.txt"
: >"$LAT"
# The release timeline after the test made a condition true at t0: when the gate (or the object
# wavegate annotates) was first seen Healthy, and when the next wave's object was first seen.
# Both polled every ~50 ms straight from the API server.
release() { # t0_ms label healthy-command... -- path
  local t0="$1" label="$2"; shift 2
  local check=() path t_ok="" deadline=$(( $(date +%s) + 60 ))
  while [[ "$1" != -- ]]; do check+=("$1"); shift; done
  path="$2"
  while :; do
    [[ -z "$t_ok" ]] && "${check[@]}" && t_ok=$(now_ms)
    if exists "$path"; then
      local t_obj; t_obj=$(now_ms)
      # Argo CD can apply within one poll of the verdict: then Healthy must hold by now.
      if [[ -z "$t_ok" ]]; then
        "${check[@]}" || fail "$path was applied while wavegate did not say Healthy ($label)"
        t_ok=$t_obj
      fi
      log "$label: Healthy after $((t_ok - t0)) ms, next wave applied after $((t_obj - t0)) ms ($((t_obj - t_ok)) ms after Healthy was seen)"
      printf '%s\t%s\t%s\t%s\n' "$label" "$((t_ok - t0))" "$((t_obj - t0))" "$((t_obj - t_ok))" >>"$LAT"
      return 0
    fi
    (( $(date +%s) < deadline )) || fail "$path did not appear within 60s ($label)"
    sleep 0.05
  done
}
stays_absent() { # seconds path why
  local end=$(( $(now_ms) + $1 * 1000 ))
  while (( $(now_ms) < end )); do
    exists "$2" && fail "$2 was applied while $3"
    sleep 0.2
  done
}

# ---------------------------------------------------------------- 1. seed 001 ----
log "seed 001: Application created (automated sync)"
application seed-001-forgejo seed-001 cicd
CLUSTER=/apis/postgresql.cnpg.io/v1/namespaces/ddb/clusters/ddb-cluster
wait_until 120 "wave 0: CNPG Cluster ddb-cluster applied" exists "$CLUSTER"
# Play CNPG: the phase Argo CD's built-in Cluster check reads says healthy (wave 0 moves on), but
# the Ready condition that the gate's requireClusterReady reads is still False.
ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kubectl -n ddb patch cluster ddb-cluster --subresource=status --type merge -p "{\"status\":{
  \"phase\":\"Cluster in healthy state\",\"instances\":3,\"readyInstances\":2,\"currentPrimary\":\"ddb-cluster-1\",\"targetPrimary\":\"ddb-cluster-1\",
  \"conditions\":[{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"ClusterIsNotReady\",\"message\":\"Cluster Is Not Ready\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
DB=/apis/postgresql.cnpg.io/v1/namespaces/ddb/databases
wait_until 60 "wave 1: Databases applied" exists "$DB/authentik"
wait_until 10 "wave 1: Databases applied" exists "$DB/forgejo"
for db in forgejo authentik; do
  gen="$(field "$DB/$db" metadata.generation)"
  kubectl -n ddb patch database "$db" --subresource=status --type merge \
    -p "{\"status\":{\"applied\":true,\"observedGeneration\":$gen}}" >/dev/null
done
wait_until 60 "wave 2: gate databases-created applied and Progressing" \
  gate_is ddb databases-created Progressing
DEPLOY=/apis/apps/v1/namespaces/cicd/deployments/forgejo
log "gate databases-created Progressing: $(field "$GATES/namespaces/ddb/wavegates/databases-created" status.health.message)"
stays_absent 8 "$DEPLOY" "the databases-created gate was Progressing"
[[ "$(app_phase seed-001-forgejo)" == Running ]] || fail "seed-001 operation is $(app_phase seed-001-forgejo), want Running while the gate holds"
log "wave 3 held for 8s while the gate was Progressing; now the Cluster turns Ready"
ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
t0=$(now_ms)
kubectl -n ddb patch cluster ddb-cluster --subresource=status --type merge -p "{\"status\":{\"readyInstances\":3,
  \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"ClusterIsReady\",\"message\":\"Cluster is Ready\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
release "$t0" "seed-001 wave 2 gate databases-created (CNPG Cluster Ready) -> wave 3 Deployment" \
  gate_is ddb databases-created Healthy -- "$DEPLOY"

# Play the Deployment controller: Argo CD's own view of the Deployment becomes Healthy (one
# available replica) while no pod backs the Service yet.
gen="$(field "$DEPLOY" metadata.generation)"
kubectl -n cicd patch deployment forgejo --subresource=status --type merge -p "{\"status\":{
  \"observedGeneration\":$gen,\"replicas\":1,\"updatedReplicas\":1,\"readyReplicas\":1,\"availableReplicas\":1,
  \"conditions\":[{\"type\":\"Available\",\"status\":\"True\",\"reason\":\"MinimumReplicasAvailable\"},
                  {\"type\":\"Progressing\",\"status\":\"True\",\"reason\":\"NewReplicaSetAvailable\"}]}}" >/dev/null
wait_until 60 "wave 4: gate forgejo-serving applied and Progressing" \
  gate_is cicd forgejo-serving Progressing
NEXT=/api/v1/namespaces/cicd/configmaps/next-app
log "gate forgejo-serving Progressing: $(field "$GATES/namespaces/cicd/wavegates/forgejo-serving" status.health.message)"
stays_absent 8 "$NEXT" "the forgejo-serving gate was Progressing"
log "wave 5 held for 8s; now a Forgejo pod turns Ready"
t0=$(now_ms)
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: forgejo-0
  namespace: cicd
  labels: {app: gitea, app.kubernetes.io/name: gitea, app.kubernetes.io/instance: forgejo}
spec:
  nodeName: wavegate-node
  containers: [{name: forgejo, image: codeberg.org/forgejo/forgejo:11, ports: [{name: http, containerPort: 3000}]}]
YAML
kubectl -n cicd patch pod forgejo-0 --subresource=status --type merge -p '{"status":{"phase":"Running",
  "podIP":"10.244.0.10","podIPs":[{"ip":"10.244.0.10"}],
  "conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"},{"type":"PodScheduled","status":"True"}]}}' >/dev/null
release "$t0" "seed-001 wave 4 gate forgejo-serving (pod created and Ready) -> wave 5 ConfigMap" \
  gate_is cicd forgejo-serving Healthy -- "$NEXT"
wait_until 60 "seed-001 operation Succeeded" phase_matches seed-001-forgejo Succeeded
log "seed 001: operation Succeeded"

# ------------------------------------------------------------ 2. Degraded fails ----
log "failing gate: Application created"
application e2e-fail fail e2e-fail
wait_until 120 "e2e-fail operation finished" phase_matches e2e-fail 'Failed|Error|Succeeded'
phase="$(app_phase e2e-fail)"
msg="$(field "$APPS/e2e-fail" status.operationState.message)"
[[ "$phase" == Failed ]] || fail "e2e-fail operation is $phase ($msg), want Failed"
[[ "$(gate_health e2e-fail never-ready)" == Degraded ]] || fail "gate never-ready is $(gate_health e2e-fail never-ready), want Degraded"
gate_msg="$(field "$GATES/namespaces/e2e-fail/wavegates/never-ready" status.health.message)"
# Argo CD records the failing resource's health message in its sync result; the operation message
# itself is generic ("one or more synchronization tasks completed unsuccessfully").
result="$(api_get "$APPS/e2e-fail" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["status"]["operationState"]["syncResult"]["resources"]:
    if r["kind"] == "WaveGate" and r["name"] == "never-ready":
        print(r.get("hookPhase", "") + "|" + r.get("message", ""))')"
[[ "$result" == "Failed|timed out after 3s"* ]] \
  || fail "Argo CD's sync result for the gate does not carry wavegate's reason: '$result' (gate: $gate_msg; operation: $msg)"
exists /api/v1/namespaces/e2e-fail/configmaps/consumer && fail "the consumer wave was applied after a Degraded gate"
log "Degraded gate failed the sync: $msg; WaveGate result: ${result#*|}"
# wavegate's Event for the timeout (src/events.rs), in the API server: a Warning TimedOut on the
# gate with the gate's message.
timed_out_event() { api_get /apis/events.k8s.io/v1/namespaces/e2e-fail/events | python3 -c 'import json,sys
msg = sys.argv[1]
ok = [e for e in json.load(sys.stdin)["items"]
      if e["regarding"]["kind"] == "WaveGate" and e["regarding"]["name"] == "never-ready"
      and e.get("reason") == "TimedOut" and e.get("type") == "Warning"
      and e.get("reportingController") == "wavegate" and e.get("note") == msg]
sys.exit(0 if ok else 1)' "$gate_msg"; }
wait_until 10 "a Warning TimedOut Event on WaveGate e2e-fail/never-ready" timed_out_event
log "WaveGate e2e-fail/never-ready carries a Warning TimedOut Event with its message"

# ------------------------------------------- 3. proxy extension, real session ----
# Local users (argocd-cm accounts.*, set up by scripts/argocd.sh): alice may see seed-001-forgejo
# and invoke the wavegate extension, bob may see it but not invoke. Passwords are set here, as
# an admin would: bcrypt hashes in argocd-secret.
log "proxy extension through argocd-server with real session tokens"
SERVER="$WAVEGATE_ARGOCD_SERVER"
pw_alice="$(openssl rand -hex 12)"; pw_bob="$(openssl rand -hex 12)"
hash() { ARGOCD_BINARY_NAME=argocd "$WAVEGATE_ARGOCD_BIN" account bcrypt --password "$1"; }
kubectl -n argocd patch secret argocd-secret --type merge -p "{\"stringData\":{
  \"accounts.alice.password\":\"$(hash "$pw_alice")\",\"accounts.bob.password\":\"$(hash "$pw_bob")\"}}" >/dev/null
login() { curl -sf --max-time 5 -X POST "$SERVER/api/v1/session" -H 'Content-Type: application/json' \
  -d "{\"username\":\"$1\",\"password\":\"$2\"}" | jqget token; }
alice_can_log_in() { [[ -n "$(login alice "$pw_alice" 2>/dev/null)" ]]; }
wait_until 30 "alice can log in to argocd-server" alice_can_log_in
tok_alice="$(login alice "$pw_alice")"; tok_bob="$(login bob "$pw_bob")"
[[ -n "$tok_alice" && -n "$tok_bob" ]] || fail "no session token for alice or bob"
ext() { # token app -> "code body-file"
  curl -s --max-time 10 -o "$WORK/ext.body" -w '%{http_code}' -H "Cookie: argocd.token=$1" \
    -H "Argocd-Application-Name: argocd:$2" -H "Argocd-Project-Name: default" \
    "$SERVER/extensions/wavegate/api/v1/waves"
}
code="$(ext "$tok_alice" seed-001-forgejo)"
[[ "$code" == 200 ]] || fail "alice: /extensions/wavegate/api/v1/waves for seed-001-forgejo answered $code: $(head -c 300 "$WORK/ext.body")"
[[ "$(jqget name <"$WORK/ext.body")" == seed-001-forgejo ]] || fail "wavegate answered for another app: $(head -c 300 "$WORK/ext.body")"
grep -q '"forgejo-serving"' "$WORK/ext.body" || fail "the waves view of seed-001-forgejo lacks its gate forgejo-serving: $(head -c 300 "$WORK/ext.body")"
log "alice: 200, waves of seed-001-forgejo through argocd-server"
# The waves' timeline of that sync (issue 12): the real Argo CD applies with its field manager
# argocd-controller, so the API server's managedFields stamps time the waves inside the sync.
timeline_ok() { python3 - "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["timeline"]
assert t["sync"] and t["sync"]["startedAt"], t["sync"]
waves = [w["wave"] for w in t["waves"]]
assert waves == sorted(waves), waves
applied = [w for w in t["waves"] if w["applied"] == "applied"]
assert applied, t["waves"]
assert all(t["sync"]["startedAt"] <= w["appliedAt"] <= t["now"] for w in applied), t["waves"]
print(" ".join("wave %d %s" % (w["wave"], w["appliedAt"] or w["applied"]) for w in t["waves"]))
PY
}
stamps="$(timeline_ok "$WORK/ext.body")" || fail "the timeline of seed-001-forgejo does not time its waves from argocd-controller's managedFields: $(head -c 600 "$WORK/ext.body")"
log "timeline of seed-001-forgejo: $stamps"
code="$(ext "$tok_bob" seed-001-forgejo)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "bob (no extensions/invoke) got $code: $(head -c 300 "$WORK/ext.body")"
log "bob (may see the app, may not invoke the extension): $code"
code="$(ext "$tok_alice" e2e-fail)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "alice asking about e2e-fail (not hers to see) got $code: $(head -c 300 "$WORK/ext.body")"
log "alice asking about an app she may not see: $code"
code="$(ext "not-a-token" seed-001-forgejo)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "a forged token got $code"

# ------------------------------- 3b. the gate's Events in Argo CD's Events tab ----
# What the UI's Events tab asks argocd-server for a resource (ListResourceEvents, server/
# application/application.go: core/v1 Events whose involvedObject is the resource, read from the
# destination cluster, for a resource in the app's tree). wavegate sent them through the
# events.k8s.io API on the gate's transitions; they come back here with the same message.
gate_uid="$(field "$GATES/namespaces/ddb/wavegates/databases-created" metadata.uid)"
gate_msg="$(field "$GATES/namespaces/ddb/wavegates/databases-created" status.health.message)"
argo_events() {
  curl -sf --max-time 10 -H "Cookie: argocd.token=$tok_alice" \
    "$SERVER/api/v1/applications/seed-001-forgejo/events?resourceName=databases-created&resourceNamespace=ddb&resourceUID=$gate_uid"
}
gate_events_in_argo() { argo_events | python3 -c 'import json,sys
msg = sys.argv[1]
items = sorted(json.load(sys.stdin).get("items") or [], key=lambda e: e.get("eventTime") or "")
mine = [(e.get("reason"), e.get("type")) for e in items if e.get("reportingComponent") == "wavegate"]
healthy = [e for e in items if e.get("reason") == "Healthy" and e.get("message") == msg]
sys.exit(0 if mine[:1] == [("Progressing", "Normal")] and mine[-1:] == [("Healthy", "Normal")] and healthy else 1)' "$gate_msg"; }
wait_until 15 "argocd-server lists the gate's Progressing and Healthy Events" gate_events_in_argo
log "argocd-server's Events for WaveGate ddb/databases-created: $(argo_events | python3 -c 'import json,sys
print(", ".join(e["type"] + " " + e["reason"] for e in sorted(json.load(sys.stdin)["items"], key=lambda e: e.get("eventTime") or "")))')"

# ------------------------------------------------------------------ 4. re-sync ----
log "re-sync: the Forgejo pod goes not Ready, then a new commit is synced"
pod_ready() { # ns name True|False
  kubectl -n "$1" patch pod "$2" --subresource=status --type merge -p "{\"status\":{\"conditions\":[
    {\"type\":\"Ready\",\"status\":\"$3\"},{\"type\":\"ContainersReady\",\"status\":\"$3\"},{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}" >/dev/null
}
pod_ready cicd forgejo-0 False
wait_until 30 "gate forgejo-serving Progressing again" gate_is cicd forgejo-serving Progressing
sed -i 's#forgejo: http://forgejo.cicd.svc:3000#forgejo: http://forgejo.cicd.svc:3000/v2#' "$REPO/seed-001/05-next-app.yaml"
git -C "$REPO" -c user.name=e2e -c user.email=e2e@wavegate.invalid commit -q -am "next app v2"
rev2="$(git -C "$REPO" rev-parse HEAD)"
kubectl -n argocd annotate application seed-001-forgejo argocd.argoproj.io/refresh=normal --overwrite >/dev/null
second_sync_running() { [[ "$(field "$APPS/seed-001-forgejo" status.operationState.operation.sync.revision)" == "$rev2" ]]; }
wait_until 60 "a second sync of seed-001 to $rev2" second_sync_running
next_app_v2() { [[ "$(field "$NEXT" data.forgejo)" == */v2 ]]; }
end=$(( $(now_ms) + 8000 ))
while (( $(now_ms) < end )); do
  next_app_v2 && fail "the second sync applied wave 5 while the forgejo-serving gate was Progressing (a verdict from the first sync?)"
  sleep 0.2
done
[[ "$(app_phase seed-001-forgejo)" == Running ]] || fail "second sync is $(app_phase seed-001-forgejo), want Running while the gate holds"
log "second sync held at wave 4 for 8s by the current truth; the pod turns Ready again"
pod_ready cicd forgejo-0 True
wait_until 60 "wave 5 of the second sync applied (next-app v2)" next_app_v2
wait_until 60 "second sync Succeeded" phase_matches seed-001-forgejo Succeeded
log "re-sync: released once the pod was Ready again, Succeeded"

# ------------------------------------------------------------- 5. app-of-apps ----
log "app-of-apps: parent with a child Application in wave 0"
application e2e-parent parent e2e-aoa
CHILD="$APPS/e2e-child"
wait_until 60 "wave 0: child Application applied" exists "$CHILD"
child_compared() { [[ -n "$(field "$CHILD" status.sync.status)" ]]; }
wait_until 60 "the child's first comparison" child_compared
AFTER=/api/v1/namespaces/e2e-aoa/configmaps/after-child
stays_absent 8 "$AFTER" "the child Application was not synced ($(field "$CHILD" status.sync.status))"
exists /api/v1/namespaces/e2e-aoa/configmaps/child-config && fail "the child synced on its own (no automated policy)"
log "parent held for 8s while the child was $(field "$CHILD" status.sync.status); now the child syncs"
t0=$(now_ms)
kubectl -n argocd patch application e2e-child --type merge \
  -p '{"operation":{"initiatedBy":{"username":"e2e"},"sync":{"revision":"main"}}}' >/dev/null
child_done() { [[ "$(field "$CHILD" status.sync.status)" == Synced && "$(field "$CHILD" status.health.status)" == Healthy ]]; }
release "$t0" "app-of-apps: child synced -> parent's next wave" child_done -- "$AFTER"
wait_until 60 "parent sync Succeeded" phase_matches e2e-parent Succeeded

# argo-cd #4577: the parent's new revision points the child at a new source. Right after the
# parent applies it, the child is still Synced and Healthy — compared to the OLD source; Argo CD
# alone would move on. The project's Application Lua holds the parent until the child has
# synced what its spec now asks for.
log "app-of-apps: a new parent revision points the child at a new source"
sed -i 's#path: child}#path: child-v2}#' "$REPO/parent/all.yaml"
printf 'data:\n  child: v2\n' >>"$REPO/parent/all.yaml"
mkdir -p "$REPO/child-v2"
sed 's/name: child-config/name: child-config-v2/' "$REPO/child/all.yaml" >"$REPO/child-v2/all.yaml"
git -C "$REPO" add -A
git -C "$REPO" -c user.name=e2e -c user.email=e2e@wavegate.invalid commit -q -m "child v2"
rev_parent="$(git -C "$REPO" rev-parse HEAD)"
kubectl -n argocd annotate application e2e-parent argocd.argoproj.io/refresh=normal --overwrite >/dev/null
child_points_at_v2() { [[ "$(field "$CHILD" spec.source.path)" == child-v2 ]]; }
wait_until 60 "the parent's second sync applied the child's new source" child_points_at_v2
after_v2() { [[ "$(field "$AFTER" data.child)" == v2 ]]; }
end=$(( $(now_ms) + 8000 ))
while (( $(now_ms) < end )); do
  after_v2 && fail "the parent advanced while the child had not synced its new source (argo-cd #4577)"
  sleep 0.2
done
exists /api/v1/namespaces/e2e-aoa/configmaps/child-config-v2 && fail "the child synced on its own"
[[ "$(field "$APPS/e2e-parent" status.operationState.operation.sync.revision)" == "$rev_parent" ]] \
  || fail "the parent is not syncing $rev_parent"
log "parent held for 8s while the child was $(field "$CHILD" status.sync.status) against $(field "$CHILD" status.sync.comparedTo.source.path); now the child syncs child-v2"
# With prune: child-config is no longer in the child's source, and a child that skipped the
# prune stays OutOfSync — which the parent rightly keeps waiting for.
kubectl -n argocd patch application e2e-child --type merge \
  -p '{"operation":{"initiatedBy":{"username":"e2e"},"sync":{"revision":"main","prune":true}}}' >/dev/null
child_done_v2() { child_done && [[ "$(field "$CHILD" status.sync.comparedTo.source.path)" == child-v2 ]]; }
wait_until 60 "the child synced child-v2" child_done_v2
t_ok=$(now_ms)
wait_until 60 "the parent's next wave of $rev_parent applied" after_v2
log "app-of-apps: parent's next wave applied $(( $(now_ms) - t_ok )) ms after the child was seen synced to its new source"
wait_until 60 "parent's second sync Succeeded" phase_matches e2e-parent Succeeded

# ------------------------------------- 5b. app-of-apps, child with failed resources ----
log "app-of-apps: a child whose sync fails on one resource (argo-cd #27917 shape)"
application e2e-parent-bad parent-bad e2e-aoa-bad
BAD_CHILD="$APPS/e2e-child-bad"
wait_until 60 "wave 0: child Application e2e-child-bad applied" exists "$BAD_CHILD"
wait_until 120 "the child's own sync Failed" phase_matches e2e-child-bad 'Failed|Error'
exists /api/v1/namespaces/e2e-aoa-bad/configmaps/child-bad-config || fail "the child's live resource was not applied"
exists /apis/apps/v1/namespaces/e2e-aoa-bad/deployments/rejected && fail "the API server accepted the invalid Deployment"
# What Argo CD itself says of the child once it has recompared after the failed sync.
child_compared_after_failure() { [[ -n "$(field "$BAD_CHILD" status.health.status)" && "$(field "$BAD_CHILD" status.sync.status)" == OutOfSync ]]; }
wait_until 60 "the child compared after its failed sync" child_compared_after_failure
child_health="$(field "$BAD_CHILD" status.health.status)"
log "Argo CD $WAVEGATE_ARGOCD_VERSION says of the failed child: health $child_health, sync $(field "$BAD_CHILD" status.sync.status), operation $(app_phase e2e-child-bad)"
# From 3.4 on (controller/health.go: `res.Live == nil && Missing` is skipped) the child reports
# Healthy; before, a kind with a health check that is not live makes it Missing. Asserted, so the
# test notices when a release changes it.
if version_ge "$WAVEGATE_ARGOCD_VERSION" 3.4.0; then
  [[ "$child_health" == Healthy ]] || fail "Argo CD $WAVEGATE_ARGOCD_VERSION reports the child with a failed resource as $child_health; the #27917 shape (Healthy) was expected from 3.4 on"
else
  [[ "$child_health" == Missing ]] || fail "Argo CD $WAVEGATE_ARGOCD_VERSION reports the child with a failed resource as $child_health, want Missing before 3.4"
fi
AFTER_BAD=/api/v1/namespaces/e2e-aoa-bad/configmaps/after-bad-child
wait_until 120 "the parent's sync finished" phase_matches e2e-parent-bad 'Failed|Error|Succeeded'
[[ "$(app_phase e2e-parent-bad)" == Failed ]] || fail "the parent's sync is $(app_phase e2e-parent-bad) ($(field "$APPS/e2e-parent-bad" status.operationState.message)), want Failed"
exists "$AFTER_BAD" && fail "the parent's next wave was applied although its child's sync failed (argo-cd #27917)"
bad_result="$(api_get "$APPS/e2e-parent-bad" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["status"]["operationState"]["syncResult"]["resources"]:
    if r["kind"] == "Application" and r["name"] == "e2e-child-bad":
        print(r.get("message", ""))')"
[[ "$bad_result" == *"last sync Failed"* ]] || fail "the parent's sync result for the child lacks the project's reason: '$bad_result'"
stays_absent 5 "$AFTER_BAD" "the parent's sync had failed on its child"
log "parent's sync Failed on the child (Lua: $bad_result); its next wave was never applied"

# --------------------------------------------------------- 6. annotation mode ----
log "annotation mode: an annotated Service in wave 0"
application e2e-annot annotated e2e-annot
SVC=/api/v1/namespaces/e2e-annot/services/api
wait_until 60 "wave 0: Service api applied" exists "$SVC"
annotated() { [[ -n "$(api_get "$SVC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get("annotations",{}).get("wavegate.dev/health-status",""))')" ]]; }
wait_until 30 "wavegate's verdict on Service api" annotated
CLIENT=/api/v1/namespaces/e2e-annot/configmaps/api-client
stays_absent 8 "$CLIENT" "the annotated Service had no ready endpoint"
log "wave 1 held for 8s by the Service's annotation; now a pod backs it"
t0=$(now_ms)
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: api-0, namespace: e2e-annot, labels: {app: api}}
spec:
  nodeName: wavegate-node
  containers: [{name: api, image: registry.invalid/api:1, ports: [{containerPort: 8080}]}]
YAML
kubectl -n e2e-annot patch pod api-0 --subresource=status --type merge -p '{"status":{"phase":"Running",
  "podIP":"10.244.0.20","podIPs":[{"ip":"10.244.0.20"}],
  "conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"},{"type":"PodScheduled","status":"True"}]}}' >/dev/null
svc_healthy() { api_get "$SVC" | grep -q '"wavegate.dev/health-status": *"Healthy"'; }
release "$t0" "annotation mode: pod Ready -> Service annotated Healthy -> next wave" svc_healthy -- "$CLIENT"
wait_until 60 "annotated app Succeeded" phase_matches e2e-annot Succeeded

# -------------------------------------------------- 7. without wavegate (native) ----
log "for comparison, Argo CD's native health: a Deployment in wave 0"
application e2e-native native e2e-native
BACKEND=/apis/apps/v1/namespaces/e2e-native/deployments/backend
wait_until 60 "wave 0: Deployment backend applied" exists "$BACKEND"
sleep 3   # Argo CD is now waiting for the Deployment
BCLIENT=/api/v1/namespaces/e2e-native/configmaps/backend-client
exists "$BCLIENT" && fail "wave 1 applied before the Deployment was available"
gen="$(field "$BACKEND" metadata.generation)"
t0=$(now_ms)
kubectl -n e2e-native patch deployment backend --subresource=status --type merge -p "{\"status\":{
  \"observedGeneration\":$gen,\"replicas\":1,\"updatedReplicas\":1,\"readyReplicas\":1,\"availableReplicas\":1,
  \"conditions\":[{\"type\":\"Available\",\"status\":\"True\",\"reason\":\"MinimumReplicasAvailable\"}]}}" >/dev/null
# Argo CD's native Deployment health needs nothing but this status: "Healthy" is t0 itself.
true_now() { true; }
release "$t0" "native (no wavegate): Deployment status available -> next wave" true_now -- "$BCLIENT"
wait_until 60 "native app Succeeded" phase_matches e2e-native Succeeded

log "PASS"
echo "release timeline (label, ms to Healthy seen, ms to next wave applied, ms between):" >&2
cat "$LAT" >&2
