#!/usr/bin/env bash
# wavegate inside Argo CD's own web UI: the real argocd-server (scripts/argocd.sh up, built with the
# UI from its Go module's ui/ folder and wavegate's UI extension installed from its ConfigMap)
# opened in Debian's chromium, logged in through Argo CD's login page.
#
# This script sets the stage and plays the operators up to the middle of seed 001's sync (the
# forgejo-serving gate of wave 4 Progressing, wave 5 not applied), with seed 000's CrdbCluster in a
# second application; then tests/browser/argocd-ui.test.mjs drives the browser and plays the
# kubelet itself (a Forgejo pod turns Ready) to watch the UI change without a reload.
#
# Runs inside Argo CD's network namespace (re-executes itself there), after tests/argocd/e2e.sh or
# alone. Fails, never skips, when Argo CD or chromium is missing. Screenshots go to
# $TEST_OUTPUT/screenshots/argocd-ui-*.png.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="$("$ROOT/scripts/argocd.sh" env | sed -n 's/^export WAVEGATE_ARGOCD_NETNS=//p')"

fail() { echo "ui-argocd: FAIL: $*" >&2; exit 1; }
log() { echo "ui-argocd: $*" >&2; }

if [[ "$(ip netns identify $$ 2>/dev/null)" != "$NETNS" ]]; then
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS" \
    || fail "Argo CD is not up: no network namespace $NETNS (run: scripts/argocd.sh up)"
  exec ip netns exec "$NETNS" "$0" "$@"
fi

eval "$("$ROOT/scripts/argocd.sh" env)"
export KUBECONFIG="$WAVEGATE_ARGOCD_KUBECONFIG"
export TEST_OUTPUT="${TEST_OUTPUT:-$ROOT/test-output}"
OUT="$TEST_OUTPUT/argocd"
WAVEGATE="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-argocd-ui.XXXXXX")"
# Until wavegate runs (the trap then stops it too): WORK holds a copy of the binary.
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

"$ROOT/scripts/argocd.sh" status >/dev/null || fail "Argo CD is not up (run: scripts/argocd.sh up)"
# shellcheck source=tests/private-copy.sh
source "$ROOT/tests/private-copy.sh"
private_copy "$WAVEGATE" "$WORK/wavegate" || fail "no private copy of $WAVEGATE to test (above: why)"
WAVEGATE="$WORK/wavegate"
# The real UI, not the placeholder page the Go module embeds. Asked for 60 s: with the Rust e2e
# tests and another Argo CD release's tests on the same 2 cores, one request can miss its 5 s.
served() { # url pattern [curl args...]
  local url="$1" pattern="$2"; shift 2
  local deadline=$(( $(date +%s) + 60 ))
  local body
  # Read whole, then matched: under pipefail, `curl | grep -q` fails when grep exits at its
  # match before curl has written everything (curl's write error, 23).
  until body=$(curl -sf --max-time 5 "$@" "$url") && grep -q "$pattern" <<<"$body"; do
    (( $(date +%s) < deadline )) || return 1
    sleep 1
  done
}
served "$WAVEGATE_ARGOCD_SERVER/applications" 'main.*\.js' -H 'Accept: text/html' \
  || fail "argocd-server serves no built UI (scripts/argocd.sh build embeds it; WAVEGATE_ARGOCD_UI=placeholder?)"
served "$WAVEGATE_ARGOCD_SERVER/extensions.js" "registerResourceExtension(GateTab" \
  || fail "argocd-server's /extensions.js does not carry wavegate's extension"

API="$(sed -n 's/^ *server: //p' "$KUBECONFIG" | head -n1)"
TOKEN="$(sed -n 's/^ *token: //p' "$KUBECONFIG" | head -n1)"
sed -n 's/^ *certificate-authority-data: //p' "$KUBECONFIG" | head -n1 | base64 -d >"$WORK/ca.crt"
api_get() { curl -sf --max-time 5 --cacert "$WORK/ca.crt" -H "Authorization: Bearer $TOKEN" "$API$1"; }
exists() { api_get "$1" >/dev/null; }
field() { api_get "$1" 2>/dev/null | python3 -c 'import json,sys
d=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else (d if isinstance(d, str) else json.dumps(d)))' "$2" 2>/dev/null || true; }
wait_until() { # timeout_s description command...
  local timeout="$1" what="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@"; do
    (( $(date +%s) < deadline )) || fail "timed out after ${timeout}s waiting for: $what"
    sleep 0.2
  done
}
GATES=/apis/wavegate.dev/v1alpha1
gate_is() { [[ "$(field "$GATES/namespaces/$1/wavegates/$2" status.health.status)" == "$3" ]]; }

# ------------------------------------------------------------- clean slate ----
log "removing what an earlier run left"
for app in $(kubectl -n argocd get applications -o name 2>/dev/null); do
  kubectl -n argocd patch "$app" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
done
kubectl -n argocd delete applications --all --wait=true --timeout=60s >/dev/null
NAMESPACES="ddb cicd prod"
for ns in $NAMESPACES; do
  kubectl -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
done
# shellcheck disable=SC2086
kubectl delete namespace $NAMESPACES --ignore-not-found --wait=true --timeout=90s >/dev/null

# ----------------------------------------------------------------- wavegate ----
# --notices: Argo CD 3.5's notice banner while a gate holds the sync (src/notice.rs), linking to
# wavegate's waves view at the address the browser reaches it by.
"$WAVEGATE" serve --listen "127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT" --resync 2s \
  --notices --notice-interval 1s --public-url "http://127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT" \
  >"$OUT/wavegate-ui.log" 2>&1 &
WAVEGATE_PID=$!
trap 'kill $WAVEGATE_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
wait_until 30 "wavegate /healthz" curl -sf --max-time 1 "http://127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT/healthz" -o /dev/null

# ------------------------------------------------------------ git repository ----
# Seed 001 as shipped (minus its Job hooks: no kubelet runs Jobs here) with a ConfigMap standing in
# for the next app in wave 5, and seed 000 as shipped.
REPO="$WORK/repo"
mkdir -p "$REPO/seed-001" "$REPO/seed-000"
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
for f in "$ROOT"/argocd/examples/seed-000-cockroachdb/*.yaml; do
  [[ "$(basename "$f")" == kustomization.yaml ]] || cp "$f" "$REPO/seed-000/"
done
git -C "$REPO" init -q -b main
git -C "$REPO" add -A
git -C "$REPO" -c user.name=e2e -c user.email=e2e@wavegate.invalid commit -q -m "seeds 000 and 001"

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
    retry: {limit: 0}
YAML
}

# -------------------------------------------------- seed 001 to the middle ----
# Wave 0's CNPG Cluster exists, with the status its operator writes, before Argo CD applies it
# (and adopts it). Argo CD's built-in health check for postgresql.cnpg.io/Cluster (its
# resource_customizations/postgresql.cnpg.io/Cluster/health.lua, the same in 3.4.7, 3.5.1 and
# 3.6.1) indexes obj.status.phaseReason on a Cluster that has no status yet: a Lua error, which
# Argo CD makes a ComparisonError that ends the running sync (phase Error; automated sync does
# not retry the revision). The real operator writes status within moments; a test playing it
# from outside loses that race to the controller's first look after applying wave 0.
ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
cluster_ready() {
  kubectl -n ddb patch cluster ddb-cluster --subresource=status --type merge -p "{\"status\":{
  \"phase\":\"Cluster in healthy state\",\"instances\":3,\"readyInstances\":3,\"currentPrimary\":\"ddb-cluster-1\",\"targetPrimary\":\"ddb-cluster-1\",
  \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"ClusterIsReady\",\"message\":\"Cluster is Ready\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
}
kubectl create namespace ddb >/dev/null
kubectl apply -f "$REPO/seed-001/00-cnpg-cluster.yaml" >/dev/null
cluster_ready
log "seed 001 and seed 000 Applications created (automated sync)"
application seed-001-forgejo seed-001 cicd
application seed-000-cockroachdb seed-000 prod
cluster_applied() { # Argo CD's annotation tracking marks what it applied
  [[ -n "$(kubectl -n ddb get cluster ddb-cluster -o jsonpath='{.metadata.annotations.argocd\.argoproj\.io/tracking-id}' 2>/dev/null)" ]]
}
wait_until 120 "wave 0: CNPG Cluster ddb-cluster applied by Argo CD" cluster_applied
DB=/apis/postgresql.cnpg.io/v1/namespaces/ddb/databases
wait_until 60 "wave 1: Database forgejo applied" exists "$DB/forgejo"
wait_until 10 "wave 1: Database authentik applied" exists "$DB/authentik"
for db in forgejo authentik; do
  gen="$(field "$DB/$db" metadata.generation)"
  kubectl -n ddb patch database "$db" --subresource=status --type merge \
    -p "{\"status\":{\"applied\":true,\"observedGeneration\":$gen}}" >/dev/null
done
DEPLOY=/apis/apps/v1/namespaces/cicd/deployments/forgejo
wait_until 90 "wave 3: Deployment forgejo applied" exists "$DEPLOY"
# The Deployment controller's view (Argo CD's own health: available), while no pod backs the Service.
gen="$(field "$DEPLOY" metadata.generation)"
kubectl -n cicd patch deployment forgejo --subresource=status --type merge -p "{\"status\":{
  \"observedGeneration\":$gen,\"replicas\":1,\"updatedReplicas\":1,\"readyReplicas\":1,\"availableReplicas\":1,
  \"conditions\":[{\"type\":\"Available\",\"status\":\"True\",\"reason\":\"MinimumReplicasAvailable\"},
                  {\"type\":\"Progressing\",\"status\":\"True\",\"reason\":\"NewReplicaSetAvailable\"}]}}" >/dev/null
wait_until 60 "wave 4: gate forgejo-serving Progressing" gate_is cicd forgejo-serving Progressing
CRDB=/apis/crdb.cockroachlabs.com/v1beta1/namespaces/prod/crdbclusters/cockroachdb
wait_until 60 "seed 000: CrdbCluster cockroachdb applied" exists "$CRDB"
# Play the CockroachDB operator as in the field report: initialized, both nodes ready by its count.
# Argo CD moves on to wave 3; wavegate's gate there finds no pod to probe and holds.
gen="$(field "$CRDB" metadata.generation)"
kubectl -n prod patch crdbcluster cockroachdb --subresource=status --type merge -p "{\"status\":{
  \"observedGeneration\":$gen,\"readyNodes\":2,\"version\":\"v25.4.2\",
  \"conditions\":[{\"type\":\"Initialized\",\"status\":\"True\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
wait_until 60 "seed 000 wave 3: gate crdb-single-cluster Progressing" gate_is prod crdb-single-cluster Progressing
exists /api/v1/namespaces/cicd/configmaps/next-app && fail "wave 5 was applied while the gate was Progressing"
log "mid-sync: $(field "$GATES/namespaces/cicd/wavegates/forgejo-serving" status.health.message)"

# ------------------------------------------------------------------ users ----
# Local users (argocd-cm accounts.*, scripts/argocd.sh): alice may invoke the extension, bob may
# not. Passwords as an admin sets them: bcrypt hashes in argocd-secret.
pw_alice="$(openssl rand -hex 12)"; pw_bob="$(openssl rand -hex 12)"
hash() { ARGOCD_BINARY_NAME=argocd "$WAVEGATE_ARGOCD_BIN" account bcrypt --password "$1"; }
kubectl -n argocd patch secret argocd-secret --type merge -p "{\"stringData\":{
  \"accounts.alice.password\":\"$(hash "$pw_alice")\",\"accounts.bob.password\":\"$(hash "$pw_bob")\"}}" >/dev/null
can_log_in() {
  curl -sf --max-time 5 -X POST "$WAVEGATE_ARGOCD_SERVER/api/v1/session" -H 'Content-Type: application/json' \
    -d "{\"username\":\"alice\",\"password\":\"$pw_alice\"}" -o /dev/null
}
wait_until 30 "alice can log in to argocd-server" can_log_in

# ---------------------------------------------------------------- browser ----
# tests/browser/install.sh runs outside (the netns cannot reach npm or Debian).
[[ -d "$ROOT/tests/browser/node_modules/playwright-core" ]] || fail "playwright-core missing: run tests/browser/install.sh first"
[[ -x "${CHROMIUM:-/usr/bin/chromium}" ]] || fail "chromium missing: run tests/browser/install.sh first"
log "chromium against the real argocd-server"
ARGOCD_URL="$WAVEGATE_ARGOCD_SERVER/" ALICE_PASSWORD="$pw_alice" BOB_PASSWORD="$pw_bob" \
  WAVEGATE_DIRECT_URL="http://127.0.0.1:$WAVEGATE_ARGOCD_WAVEGATE_PORT/" \
  node --test --test-concurrency=1 "$ROOT/tests/browser/argocd-ui.test.mjs"
log "passed"
