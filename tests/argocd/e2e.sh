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
#      message carries wavegate's reason, the consumer wave is never applied.
#
# Runs inside Argo CD's network namespace (re-executes itself there). Fails, never skips, when
# Argo CD is not up. Timings go to $TEST_OUTPUT/argocd/latency.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="${WAVEGATE_ARGOCD_NETNS:-wavegate-argocd}"

fail() { echo "e2e-argocd: FAIL: $*" >&2; dump_state >&2 || true; exit 1; }
log() { echo "e2e-argocd: $*" >&2; }

if [[ "$(ip netns identify $$ 2>/dev/null)" != "$NETNS" ]]; then
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS" \
    || fail "Argo CD is not up: no network namespace $NETNS (run: scripts/argocd.sh up)"
  exec ip netns exec "$NETNS" "$0" "$@"
fi

eval "$("$ROOT/scripts/argocd.sh" env)"
export KUBECONFIG="$WAVEGATE_ARGOCD_KUBECONFIG"
OUT="${TEST_OUTPUT:-$ROOT/test-output}/argocd"
WAVEGATE="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-argocd-e2e.XXXXXX")"
mkdir -p "$OUT"
now_ms() { date +%s%3N; }

"$ROOT/scripts/argocd.sh" status >/dev/null || { "$ROOT/scripts/argocd.sh" status >&2 || true; fail "Argo CD is not up (run: scripts/argocd.sh up)"; }
# Applications only after the controller answers /healthz.
curl -sf --max-time 3 "$WAVEGATE_ARGOCD_CONTROLLER_METRICS/healthz" | grep -qx ok || fail "application-controller /healthz does not answer"
[[ -x "$WAVEGATE" ]] || fail "$WAVEGATE missing (cargo build --bin wavegate)"

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
for ns in ddb cicd e2e-fail; do
  kubectl -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
done
kubectl delete namespace ddb cicd e2e-fail --ignore-not-found --wait=true --timeout=90s >/dev/null
wait_until 60 "AppProject default (argocd-server creates it)" exists /apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects/default

# ----------------------------------------------------------------- wavegate ----
"$WAVEGATE" serve --listen "127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT" --resync 2s >"$OUT/wavegate.log" 2>&1 &
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
# Polls (every 100 ms) until an object exists; prints the ms since $1.
appear_after() { # t0_ms path timeout_s
  local t0="$1" path="$2" deadline=$(( $(date +%s) + $3 ))
  until exists "$path"; do
    (( $(date +%s) < deadline )) || fail "$path did not appear within $3s"
    sleep 0.1
  done
  echo $(( $(now_ms) - t0 ))
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
  \"phase\":\"Cluster in healthy state\",\"instances\":3,\"readyInstances\":2,
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
kubectl -n ddb patch cluster ddb-cluster --subresource=status --type merge -p "{\"status\":{\"readyInstances\":3,
  \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"ClusterIsReady\",\"message\":\"Cluster is Ready\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
wait_until 30 "gate databases-created Healthy" gate_is ddb databases-created Healthy
t_healthy=$(now_ms)
ms=$(appear_after "$t_healthy" "$DEPLOY" 60)
log "wave 3 (Deployment forgejo) applied ${ms} ms after the gate was seen Healthy"
echo "databases-created Healthy -> wave 3 applied: ${ms} ms" >>"$LAT"

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
wait_until 30 "gate forgejo-serving Healthy" gate_is cicd forgejo-serving Healthy
t_healthy=$(now_ms)
ms=$(appear_after "$t_healthy" "$NEXT" 60)
log "wave 5 (next-app) applied ${ms} ms after the gate was seen Healthy"
echo "forgejo-serving Healthy -> wave 5 applied: ${ms} ms" >>"$LAT"
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
code="$(ext "$tok_bob" seed-001-forgejo)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "bob (no extensions/invoke) got $code: $(head -c 300 "$WORK/ext.body")"
log "bob (may see the app, may not invoke the extension): $code"
code="$(ext "$tok_alice" e2e-fail)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "alice asking about e2e-fail (not hers to see) got $code: $(head -c 300 "$WORK/ext.body")"
log "alice asking about an app she may not see: $code"
code="$(ext "not-a-token" seed-001-forgejo)"
[[ "$code" == 401 || "$code" == 403 ]] || fail "a forged token got $code"

log "PASS"
cat "$LAT" >&2
