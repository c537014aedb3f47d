#!/usr/bin/env bash
# wavegate installed the way Argo CD users install add-ons, with the real Argo CD
# (scripts/argocd.sh up): the shipped Applications argocd/install/wavegate-helm.yaml (Helm chart
# deploy/helm/wavegate, rendered by Argo CD's repo-server with the real `helm`) and
# argocd/install/wavegate-kustomize.yaml (deploy/base, rendered with the real `kustomize`), each
# from a local git repository holding this repository's deploy/ at a tag, as their repoURL would.
#
# For each, in turn, on a cluster without the WaveGate CRD:
#   1. The first sync operation succeeds, every resource Synced; Argo CD applied (its own sync
#      result, in the order it recorded) wavegate's ClusterRole and then the admission policy
#      that narrows it in sync wave -1, before everything else; the Namespace before what lives
#      in it; the CRD before the Service and Deployment; and the CRD is Established.
#   2. Argo CD's own health (argocd-server's resource tree): everything Healthy except the
#      Deployment, whose pods need a kubelet (and the PodDisruptionBudget until the disruption
#      controller's first status: Argo CD's PDB script counts InsufficientPods as Healthy,
#      resource_customizations/policy/PodDisruptionBudget); once the kubelet (played)
#      reports the pods the real ReplicaSet controller created as Ready, the real Deployment and
#      disruption controllers update their status and the Application is Healthy.
#   3. The image is the one the Application sets.
#   4. Uninstall (delete the Application, cascading): every object is gone except the CRD, and a
#      WaveGate created meanwhile survives — Argo CD never deletes a CRD on cascade.
#
# Real: API server, Argo CD, helm and kustomize built from their Go modules, the Deployment,
# ReplicaSet and disruption controllers. Played (tests/argocd/lib.sh): scheduler and kubelet.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="${WAVEGATE_ARGOCD_NETNS:-wavegate-argocd}"
LOG_PREFIX=e2e-install
# shellcheck source=tests/argocd/lib.sh
source "$ROOT/tests/argocd/lib.sh"
enter_argocd_netns "$0" "$@"

OUT="${TEST_OUTPUT:-$ROOT/test-output}/argocd"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-install.XXXXXX")"
mkdir -p "$OUT"
argocd_env

NS=wavegate
USER_NS=e2e-install-user
CRD=/apis/apiextensions.k8s.io/v1/customresourcedefinitions/wavegates.wavegate.dev
SERVER="$WAVEGATE_ARGOCD_SERVER"

dump_state() {
  echo "---- Application wavegate ----"
  kubectl -n argocd get application wavegate -o yaml 2>&1 | sed -n '/^status:/,$p' | head -n 80
  echo "---- objects ----"
  kubectl -n "$NS" get all,pdb 2>&1 | head -n 30
  echo "---- repo-server ----"
  tail -n 20 "$WAVEGATE_ARGOCD_STATE/logs/repo-server.log" 2>/dev/null
  echo "---- application-controller ----"
  tail -n 20 "$WAVEGATE_ARGOCD_STATE/logs/application-controller.log" 2>/dev/null
}
cleanup() {
  [[ -z "${WATCH_PID:-}" ]] || kill "$WATCH_PID" 2>/dev/null || true
  clean_slate "wavegate" "$NS $USER_NS" || true
  stop_workload_controllers
  rm -rf "$WORK"
}
trap cleanup EXIT

start_workload_controllers
log "removing what an earlier run left (and the WaveGate CRD: this is a first install)"
clean_slate "wavegate" "$NS $USER_NS"
kubectl delete --ignore-not-found --wait=true --timeout=60s customresourcedefinition wavegates.wavegate.dev >/dev/null

# An admin session on argocd-server, for the resource tree (Argo CD 3.x keeps per-resource health
# out of the Application's status; the UI reads it from here).
pw="$(openssl rand -hex 12)"
hash="$(ARGOCD_BINARY_NAME=argocd "$WAVEGATE_ARGOCD_BIN" account bcrypt --password "$pw")"
kubectl -n argocd patch secret argocd-secret --type merge -p "{\"stringData\":{
  \"admin.password\":\"$hash\",\"admin.passwordMtime\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}}" >/dev/null
login() { curl -sf --max-time 5 -X POST "$SERVER/api/v1/session" -H 'Content-Type: application/json' \
  -d "{\"username\":\"admin\",\"password\":\"$pw\"}" | jqget token; }
admin_can_log_in() { [[ -n "$(login 2>/dev/null)" ]]; }
wait_until 30 "admin can log in to argocd-server" admin_can_log_in
SESSION="$(login)"

# ------------------------------------------------------------ git repository ----
# This repository's deploy/ (the chart's crds/ symlink into deploy/crd included) at a tag.
REPO="$WORK/repo"
mkdir -p "$REPO"
cp -a "$ROOT/deploy" "$REPO/deploy"
git -C "$REPO" init -q -b main
git_repo_commit "$REPO" "wavegate deploy/"
git -C "$REPO" tag v0.1.0

install_app() { # shipped Application file
  grep -q 'repoURL: https://git.example.com/platform/wavegate.git' "$1" || fail "$1 has no placeholder repoURL"
  sed "s#repoURL: https://git.example.com/platform/wavegate.git#repoURL: file://$REPO#" "$1" | kubectl apply -f - >/dev/null
}

watch_app() { # file: every version of the Application, in order, as the API server's watch sends it
  curl -sfN --cacert "$WORK/ca.crt" -H "Authorization: Bearer $TOKEN" \
    "$API$APPS?watch=true&fieldSelector=metadata.name%3Dwavegate" >"$1" 2>/dev/null &
  WATCH_PID=$!
}
operations() { # watch file -> one JSON line per sync operation: the last version seen of each
  # A later operation replaces status.operationState, so reading the Application after the first
  # sync may show another one: with selfHeal, when Argo CD's cache has not yet seen the last object
  # it created (the admission policy, applied last and with no health to wait for), the next
  # comparison finds it missing and self-heal re-applies just that one (a "Partial sync").
  python3 - "$1" <<'PY'
import json, sys
ops = []
for line in open(sys.argv[1]):
    try:
        obj = json.loads(line)["object"]
    except (ValueError, KeyError):
        continue  # a line cut short while curl writes it
    st = (obj.get("status") or {}).get("operationState")
    if not st:
        continue
    if ops and ops[-1]["startedAt"] == st.get("startedAt"):
        ops[-1] = st
    else:
        ops.append(st)
for st in ops:
    print(json.dumps(st))
PY
}
first_operation_done() { # watch file
  operations "$1" | sed -n 1p | python3 -c 'import json,sys
sys.exit(json.load(sys.stdin)["phase"] not in ("Succeeded", "Failed", "Error"))' 2>/dev/null
}
sync_result() { # watch file -> "index kind name status" lines of the first operation, in the order
  # Argo CD recorded them (gitops-engine sorts its results by the order it set them in,
  # sync_context.go GetState).
  operations "$1" | sed -n 1p | python3 -c 'import json,sys
rs = json.load(sys.stdin)["syncResult"]["resources"]
for i, r in enumerate(rs):
    print(i, r["kind"], r["name"], r.get("status", ""), r.get("hookPhase", ""))'
}
later_operations() { # watch file -> one line per operation after the first: what it applied
  operations "$1" | tail -n +2 | python3 -c 'import json,sys
for line in sys.stdin:
    st = json.loads(line)
    rs = (st.get("syncResult") or {}).get("resources") or []
    print(st.get("phase", "?"), ("partial" if st["operation"]["sync"].get("resources") else "full") + ":",
          " ".join(r["kind"] + "/" + r["name"] for r in rs))'
}
tree_health() { # -> "kind name status" for every managed resource, from argocd-server
  curl -sf --max-time 10 -H "Cookie: argocd.token=$SESSION" "$SERVER/api/v1/applications/wavegate/resource-tree" \
    | python3 -c 'import json,sys
for n in json.load(sys.stdin).get("nodes", []):
    if n.get("parentRefs"):
        continue
    print(n["kind"], n["name"], (n.get("health") or {}).get("status", "-"))'
}
app_field() { field "$APPS/wavegate" "$1"; }

check_install() { # label image watchfile
  local label="$1" image="$2" watched="$3" t0
  t0=$(now_ms)
  wait_until 180 "$label: the first operation finished" first_operation_done "$watched"
  local t_sync=$(( $(now_ms) - t0 )) first
  first="$(operations "$watched" | sed -n 1p)"
  [[ "$(jqget phase <<<"$first")" == Succeeded ]] \
    || fail "$label: the first operation $(jqget phase <<<"$first"): $(jqget message <<<"$first")"
  local result; result="$(sync_result "$watched")"
  echo "$result" >"$OUT/install-$label-sync-result.txt"
  awk '$4 != "Synced" {exit 1}' <<<"$result" || fail "$label: not every resource Synced:
$result"
  # Argo CD's own record of the order it applied in.
  python3 - "$result" <<'PY' || fail "$label: Argo CD applied out of order:
$result"
import sys
kinds = [l.split()[1] for l in sys.argv[1].splitlines()]
first = lambda k: kinds.index(k)
# Sync wave -1: the ClusterRole carrying wavegate's mark (and its binding), then the admission
# policy that recognises the mark; wave 0 after both, the Deployment included. The Namespace
# before what lives in it (gitops-engine applies it in the earliest wave), the CRD before the
# Service and Deployment.
for policy in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
    for role in ("ClusterRole", "ClusterRoleBinding"):
        assert first(role) < first(policy), (role, policy, kinds)
    for later in ("NetworkPolicy", "ServiceAccount", "CustomResourceDefinition", "Deployment"):
        assert first(policy) < first(later), (policy, later, kinds)
for namespaced in ("NetworkPolicy", "ServiceAccount", "Role", "Service", "Deployment"):
    assert first("Namespace") < first(namespaced), (namespaced, kinds)
for later in ("Service", "Deployment"):
    assert first("CustomResourceDefinition") < first(later), (later, kinds)
PY
  [[ "$(field "$CRD" status.conditions | python3 -c 'import json,sys
print(any(c["type"] == "Established" and c["status"] == "True" for c in json.load(sys.stdin)))')" == True ]] \
    || fail "$label: CRD wavegates.wavegate.dev is not Established"
  app_synced() { [[ "$(app_field status.sync.status)" == Synced ]] && phase_matches wavegate 'Succeeded'; }
  wait_until 60 "$label: the Application Synced, its last operation Succeeded" app_synced
  log "$label: synced in $t_sync ms, clean and in order: $(awk '$2 != last {printf "%s%s", (NR>1?" → ":""), $2; last = $2}' <<<"$result")"
  local later; later="$(later_operations "$watched")"
  [[ -z "$later" ]] || log "$label: then Argo CD's self-heal ran again (seen when its cache lags behind what it just applied): $later"

  # Argo CD's judgement before any kubelet.
  local tree not_healthy
  # Argo CD's cache follows the API server (the CRD's Established condition, the disruption
  # controller's first PDB status) within moments; without a kubelet nothing else can change, so
  # the state it settles in is the one judged.
  settled() {
    tree="$(tree_health)" || return 1
    not_healthy="$(awk '$3 != "Healthy" && $3 != "-" {print $1}' <<<"$tree" | sort -u | paste -sd' ')"
    [[ "$not_healthy" == "Deployment" ]]
  }
  local deadline=$(( $(date +%s) + 30 ))
  until settled; do
    (( $(date +%s) < deadline )) || fail "$label: before any kubelet, Argo CD finds unhealthy: '$not_healthy'; want only the Deployment:
$tree"
    sleep 0.5
  done
  log "$label: before the kubelet, Argo CD's health: only $not_healthy not Healthy (pods need a kubelet)"
  [[ "$(field "/apis/apps/v1/namespaces/$NS/deployments/wavegate" spec.template.spec.containers | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["image"])')" == "$image" ]] \
    || fail "$label: the Deployment's image is not $image"

  # The kubelet (played) for the pods the real ReplicaSet controller created.
  local want pods i=20 p
  want="$(field "/apis/apps/v1/namespaces/$NS/deployments/wavegate" spec.replicas)"
  all_pods() { [[ "$(pods_of "$NS" app.kubernetes.io/name=wavegate | wc -l)" -ge "$want" ]]; }
  wait_until 60 "$label: the ReplicaSet controller created $want pods" all_pods
  for p in $(pods_of "$NS" app.kubernetes.io/name=wavegate); do
    kubelet_bind "$NS" "$p"
    kubelet_running "$NS" "$p" "10.244.2.$((i++))" True
  done
  app_healthy() { [[ "$(app_field status.health.status)" == Healthy ]]; }
  wait_until 120 "$label: Application Healthy by Argo CD's judgement" app_healthy
  tree="$(tree_health)"
  awk '$3 != "Healthy" && $3 != "-" {exit 1}' <<<"$tree" || fail "$label: Application Healthy, but:
$tree"
  log "$label: Healthy by Argo CD's judgement once the played kubelet reported $want pods Ready ($(awk '$3 == "-"' <<<"$tree" | awk '{print $1}' | sort -u | tr '\n' ' ')have no health check)"
}

uninstall() { # label
  local label="$1"
  kubectl get namespace "$USER_NS" >/dev/null 2>&1 || kubectl create namespace "$USER_NS" >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: users-gate, namespace: $USER_NS}
spec:
  checks:
    - name: web
      service: {name: web}
YAML
  kubectl -n argocd delete application wavegate --wait=false >/dev/null
  app_gone() { kubelet_reap "$NS"; ! exists "$APPS/wavegate"; }
  wait_until 120 "$label: the Application deleted with its resources (cascade)" app_gone
  gone() { ! exists "/apis/apps/v1/namespaces/$NS/deployments/wavegate" && ! exists /apis/rbac.authorization.k8s.io/v1/clusterroles/wavegate; }
  wait_until 60 "$label: the Deployment and ClusterRole deleted by the cascade" gone
  exists "$CRD" || fail "$label: uninstalling deleted the CRD (and with it every WaveGate)"
  exists "/apis/wavegate.dev/v1alpha1/namespaces/$USER_NS/wavegates/users-gate" || fail "$label: the user's WaveGate is gone"
  log "$label: uninstalled; the CRD and the user's WaveGate stay"
}

# ------------------------------------------------------------------ 1. Helm ----
log "Helm: Application argocd/install/wavegate-helm.yaml"
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create secret generic wavegate-api-token --from-literal=token="$(openssl rand -hex 16)" >/dev/null
watch_app "$WORK/helm-watch.jsonl"
install_app "$ROOT/argocd/install/wavegate-helm.yaml"
check_install helm ghcr.io/OWNER/wavegate:0.1.0 "$WORK/helm-watch.jsonl"
kill "$WATCH_PID" 2>/dev/null || true
uninstall helm

# -------------------------------------------------------------- 2. Kustomize ----
log "Kustomize: Application argocd/install/wavegate-kustomize.yaml"
clean_slate "" "$NS"
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create secret generic wavegate-api-token --from-literal=token="$(openssl rand -hex 16)" >/dev/null
watch_app "$WORK/kustomize-watch.jsonl"
install_app "$ROOT/argocd/install/wavegate-kustomize.yaml"
check_install kustomize ghcr.io/OWNER/wavegate:0.1.0 "$WORK/kustomize-watch.jsonl"
kill "$WATCH_PID" 2>/dev/null || true
uninstall kustomize

log "PASS"
