#!/usr/bin/env bash
# The no-Lua path with the real Argo CD (scripts/argocd.sh up): argocd/examples/no-lua as
# shipped — a CNPG Database in wave 0, a Sync hook Job running `wavegate wait` in wave 1, the app
# in wave 2 — synced from a local git repository by the real application-controller while
# argocd-cm holds NONE of wavegate's health scripts (they are removed for the test and put back
# at its end), so Argo CD judges the Database Healthy on sight and only the hook Job holds.
#
#   1. Held: the hook Job is created while CNPG has not applied the Database (Argo CD did not
#      hold wave 0 itself); `wavegate wait`, running as the Job's pod with the Job's
#      ServiceAccount, keeps waiting; for 8 s the app is not applied, the Job has no Complete
#      condition, the operation is Running.
#   2. Released: CNPG (played) applies the Database; `wavegate wait` exits 0, the pod Succeeded,
#      the real Job controller marks the Job Complete, Argo CD's built-in Job health says
#      Healthy, wave 2 is applied, the operation Succeeds.
#   3. Fails fast: the same app with --timeout=3s and a Database never applied: `wavegate wait`
#      exits 124, the Job's podFailurePolicy fails the Job at once (no retry), Argo CD fails the
#      sync with the Job's message, wave 2 is never applied.
#   4. Least privilege: the hook's ServiceAccount may read Databases and Clusters in its
#      namespace and nothing else (no Secrets, no writes, no other namespace).
#
# Real: API server, Argo CD, kube-controller-manager's Job/Deployment/ReplicaSet controllers,
# wavegate (target/debug/wavegate) with a TokenRequest token bound to the hook's pod. Played
# (tests/argocd/lib.sh): scheduler and kubelet (binding, pod status from the exit code), CNPG.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="${WAVEGATE_ARGOCD_NETNS:-wavegate-argocd}"
LOG_PREFIX=e2e-no-lua
# shellcheck source=tests/argocd/lib.sh
source "$ROOT/tests/argocd/lib.sh"
enter_argocd_netns "$0" "$@"

OUT="${TEST_OUTPUT:-$ROOT/test-output}/argocd"
WAVEGATE="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-no-lua.XXXXXX")"
# Until the cleanup below is set: WORK holds a copy of the binary (99 MB in a debug build).
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
mkdir -p "$OUT"
argocd_env
# shellcheck source=tests/private-copy.sh
source "$ROOT/tests/private-copy.sh"
private_copy "$WAVEGATE" "$WORK/wavegate" || fail "no private copy of $WAVEGATE to test (above: why)"
WAVEGATE="$WORK/wavegate"
command -v bwrap >/dev/null || fail "bwrap missing (apt-get install bubblewrap)"

NS=e2e-nolua
NS_FAIL=e2e-nolua-fail
CM_PATCH="$ROOT/argocd/argocd-cm/argocd-cm-patch.yaml"

dump_state() {
  echo "---- Applications ----"
  kubectl -n argocd get applications -o yaml 2>&1 | grep -A40 'operationState:' | head -n 100
  echo "---- Jobs / pods ----"
  kubectl get jobs,pods -n "$NS" -o wide 2>&1; kubectl get jobs,pods -n "$NS_FAIL" -o wide 2>&1
  kubectl -n "$NS" get job wait-for-database -o jsonpath='{.status}' 2>&1; echo
  echo "---- wavegate wait (hook pod) ----"
  tail -n 20 "$OUT"/no-lua-hook*.log 2>/dev/null
  echo "---- kube-controller-manager (workloads) ----"
  tail -n 20 "$OUT/kcm-workloads.log" 2>/dev/null
  echo "---- application-controller ----"
  tail -n 20 "$WAVEGATE_ARGOCD_STATE/logs/application-controller.log" 2>/dev/null
}

restore_lua() {
  kubectl apply --server-side --force-conflicts --field-manager wavegate-health -f "$CM_PATCH" >/dev/null 2>&1 || true
}
cleanup() {
  [[ -n "${HOOK_PID:-}" ]] && kill "$HOOK_PID" 2>/dev/null || true
  clean_slate "no-lua no-lua-fail" "$NS $NS_FAIL" || true
  stop_workload_controllers
  restore_lua
  rm -rf "$WORK"
}
trap cleanup EXIT

start_workload_controllers
log "removing what an earlier run left"
clean_slate "no-lua no-lua-fail" "$NS $NS_FAIL"

# ------------------------------------------------------ argocd-cm without Lua ----
# scripts/argocd.sh merged wavegate's health scripts into argocd-cm by server-side apply with
# the field manager wavegate-health. Applying that manager's argocd-cm with no data removes every
# key it owns and nothing else — an argocd-cm as a managed Argo CD offering leaves it.
kubectl apply --server-side --force-conflicts --field-manager wavegate-health -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: argocd
YAML
left="$(kubectl -n argocd get configmap argocd-cm -o json | python3 -c 'import json,sys
print(" ".join(k for k in json.load(sys.stdin).get("data", {}) if k.startswith("resource.customizations")))')"
[[ -z "$left" ]] || fail "argocd-cm still has resource customizations: $left"
log "argocd-cm has no resource customizations (wavegate's health scripts removed for this test)"


# ------------------------------------------------------------ git repository ----
# The example as shipped, as a directory app (its kustomization.yaml only pins the image tag
# the manifests already carry); a copy whose hook gives up after 3 s for the failing sync.
REPO="$WORK/repo"
mkdir -p "$REPO/no-lua" "$REPO/no-lua-fail"
for f in "$ROOT"/argocd/examples/no-lua/*.yaml; do
  [[ "$(basename "$f")" == kustomization.yaml ]] || cp "$f" "$REPO/no-lua/"
done
cp "$REPO"/no-lua/*.yaml "$REPO/no-lua-fail/"
grep -q -- '--timeout=10m' "$REPO/no-lua-fail/01-wait-for-database.yaml" || fail "the example's hook has no --timeout=10m"
sed -i 's/--timeout=10m/--timeout=3s/' "$REPO/no-lua-fail/01-wait-for-database.yaml"
git -C "$REPO" init -q -b main
git_repo_commit "$REPO" "no-lua example"

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
    retry: {limit: 0}
YAML
}

# The platform's CNPG Cluster `pg` that the Database names exists before the app (played CNPG).
cluster() { # ns
  kubectl create namespace "$1" >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: pg, namespace: $1}
spec: {instances: 1}
YAML
  local ts; ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  kubectl -n "$1" patch cluster pg --subresource=status --type merge -p "{\"status\":{
    \"phase\":\"Cluster in healthy state\",\"instances\":1,\"readyInstances\":1,\"currentPrimary\":\"pg-1\",\"targetPrimary\":\"pg-1\",
    \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"ClusterIsReady\",\"message\":\"Cluster is Ready\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
}

job_condition() { # ns job -> "Type=Status reason" of its Complete/Failed condition, if any
  field "/apis/batch/v1/namespaces/$1/jobs/$2" status.conditions | python3 -c 'import json,sys
t = sys.stdin.read().strip()
for c in (json.loads(t) if t else []):
    if c["type"] in ("Complete", "Failed") and c["status"] == "True":
        print(c["type"], c.get("reason", ""))' 2>/dev/null || true
}
hook_pod() { pods_of "$1" batch.kubernetes.io/job-name=wait-for-database | head -n1; }
has_hook_pod() { [[ -n "$(hook_pod "$1")" ]]; }

# Start the hook's pod as the kubelet would; HOOK_PID's exit status file is $WORK/$1.rc.
run_hook() { # ns
  local pod; pod="$(hook_pod "$1")"
  kubelet_bind "$1" "$pod"
  kubelet_running "$1" "$pod" 10.244.1.10 False
  ( kubelet_run "$1" "$pod" "$OUT/no-lua-hook-$1.log" >"$WORK/$1.rc" ) &
  HOOK_PID=$!
  HOOK_POD="$pod"
}
hook_exited() { [[ -s "$WORK/$1.rc" ]]; }

# ---------------------------------------------------------------- 1. held ----
cluster "$NS"
log "no-lua: Application created (automated sync, argocd-cm without Lua)"
application no-lua no-lua "$NS"
DBP="/apis/postgresql.cnpg.io/v1/namespaces/$NS/databases/app"
JOB="/apis/batch/v1/namespaces/$NS/jobs/wait-for-database"
APPD="/apis/apps/v1/namespaces/$NS/deployments/app"
wait_until 120 "wave 0: Database applied" exists "$DBP"
wait_until 60 "wave 1: hook Job wait-for-database created" exists "$JOB"
[[ -z "$(field "$DBP" status.applied)" ]] || fail "the Database was applied before the test played CNPG"
log "Argo CD moved past wave 0 with the Database not applied (no Lua: Healthy on sight); hook Job created"
wait_until 30 "the Job controller created the hook's pod" has_hook_pod "$NS"
run_hook "$NS"
log "hook pod $NS/$HOOK_POD running \`$(field "/api/v1/namespaces/$NS/pods/$HOOK_POD" spec.containers | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)[0]["args"]))')\`"
end=$(( $(now_ms) + 8000 ))
while (( $(now_ms) < end )); do
  exists "$APPD" && fail "wave 2 (Deployment app) was applied while the hook was waiting"
  hook_exited "$NS" && fail "wavegate wait exited ($(cat "$WORK/$NS.rc")) while the Database was not applied: $(tail -n 5 "$OUT/no-lua-hook-$NS.log")"
  sleep 0.2
done
[[ -z "$(job_condition "$NS" wait-for-database)" ]] || fail "the hook Job finished early: $(job_condition "$NS" wait-for-database)"
[[ "$(app_phase no-lua)" == Running ]] || fail "no-lua operation is $(app_phase no-lua), want Running while the hook holds"
hook_result() { # app -> "phase|message" of the hook Job in the operation's sync result
  api_get "$APPS/$1" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["status"]["operationState"].get("syncResult", {}).get("resources", []):
    if r["kind"] == "Job" and r["name"] == "wait-for-database":
        print(r.get("hookPhase", "") + "|" + r.get("message", ""))'
}
[[ "$(hook_result no-lua)" == Running* ]] || fail "Argo CD's result for the hook is '$(hook_result no-lua)', want Running"
log "held for 8s: the hook is Running in Argo CD, wave 2 absent; wavegate wait: $(grep -m1 -o 'Progressing.*' "$OUT/no-lua-hook-$NS.log" | head -c 160)"

# -------------------------------------------------------------- 2. released ----
t0=$(now_ms)
gen="$(field "$DBP" metadata.generation)"
kubectl -n "$NS" patch database app --subresource=status --type merge \
  -p "{\"status\":{\"applied\":true,\"observedGeneration\":$gen}}" >/dev/null
wait_until 30 "wavegate wait exits after CNPG applied the Database" hook_exited "$NS"
rc="$(cat "$WORK/$NS.rc")"; t_exit=$(now_ms)
[[ "$rc" == 0 ]] || fail "wavegate wait exited $rc, want 0: $(tail -n 5 "$OUT/no-lua-hook-$NS.log")"
kubelet_exited "$NS" "$HOOK_POD" 0
job_complete() { [[ "$(job_condition "$NS" wait-for-database)" == Complete* ]]; }
wait_until 30 "the Job controller marks the hook Job Complete" job_complete
t_job=$(now_ms)
wait_until 60 "wave 2: Deployment app applied" exists "$APPD"
t_app=$(now_ms)
log "released: wavegate wait exited 0 after $((t_exit - t0)) ms; Job Complete after $((t_job - t0)) ms; wave 2 applied after $((t_app - t0)) ms"
printf 'no-lua hook\t%s\t%s\t%s\n' "$((t_exit - t0))" "$((t_job - t0))" "$((t_app - t0))" >>"$OUT/latency.txt"
# The kubelet for the app's pod, so the Deployment is available by the real controllers' count.
has_app_pod() { [[ -n "$(pods_of "$NS" app.kubernetes.io/name=app)" ]]; }
wait_until 30 "the ReplicaSet controller created the app's pod" has_app_pod
pod="$(pods_of "$NS" app.kubernetes.io/name=app | head -n1)"
kubelet_bind "$NS" "$pod"
kubelet_running "$NS" "$pod" 10.244.1.11 True
wait_until 60 "no-lua operation Succeeded" phase_matches no-lua Succeeded
[[ "$(hook_result no-lua)" == Succeeded* ]] || fail "Argo CD's result for the hook is '$(hook_result no-lua)', want Succeeded"
log "no-lua: operation Succeeded; hook result $(hook_result no-lua)"

# ------------------------------------------------------------ 3. fails fast ----
cluster "$NS_FAIL"
log "no-lua-fail: the hook gives up after 3s on a Database that is never applied"
application no-lua-fail no-lua-fail "$NS_FAIL"
wait_until 120 "no-lua-fail: hook Job created" exists "/apis/batch/v1/namespaces/$NS_FAIL/jobs/wait-for-database"
wait_until 30 "the Job controller created the hook's pod" has_hook_pod "$NS_FAIL"
run_hook "$NS_FAIL"
wait_until 30 "wavegate wait gives up" hook_exited "$NS_FAIL"
rc="$(cat "$WORK/$NS_FAIL.rc")"
[[ "$rc" == 124 ]] || fail "wavegate wait exited $rc, want 124 (timeout): $(tail -n 5 "$OUT/no-lua-hook-$NS_FAIL.log")"
kubelet_exited "$NS_FAIL" "$HOOK_POD" 124
job_failed() { [[ "$(job_condition "$NS_FAIL" wait-for-database)" == Failed* ]]; }
wait_until 30 "the Job controller fails the hook Job" job_failed
cond="$(job_condition "$NS_FAIL" wait-for-database)"
[[ "$cond" == "Failed PodFailurePolicy" ]] || fail "the Job failed with '$cond', want the podFailurePolicy's FailJob (no retry on a timeout)"
[[ "$(pods_of "$NS_FAIL" batch.kubernetes.io/job-name=wait-for-database | wc -l)" == 1 ]] || fail "the Job retried a definite failure"
wait_until 60 "no-lua-fail operation finished" phase_matches no-lua-fail 'Failed|Error|Succeeded'
[[ "$(app_phase no-lua-fail)" == Failed ]] || fail "no-lua-fail operation is $(app_phase no-lua-fail), want Failed"
result="$(hook_result no-lua-fail)"
[[ "$result" == Failed\|*124* ]] || fail "Argo CD's result for the hook does not carry the exit code: '$result'"
exists "/apis/apps/v1/namespaces/$NS_FAIL/deployments/app" && fail "wave 2 was applied after the hook failed"
log "no-lua-fail: Job $cond, operation Failed; hook result: ${result#*|}"

# ------------------------------------------------------- 4. least privilege ----
SA="system:serviceaccount:$NS:wavegate-wait"
for allowed in "get databases.postgresql.cnpg.io" "watch clusters.postgresql.cnpg.io"; do
  # shellcheck disable=SC2086
  [[ "$(kubectl auth can-i $allowed -n "$NS" --as "$SA")" == yes ]] || fail "$SA may not $allowed"
done
for denied in "get secrets" "list pods" "patch databases.postgresql.cnpg.io" "create jobs.batch"; do
  # shellcheck disable=SC2086
  [[ "$(kubectl auth can-i $denied -n "$NS" --as "$SA" 2>/dev/null || true)" == no ]] || fail "$SA may $denied"
done
[[ "$(kubectl auth can-i get databases.postgresql.cnpg.io -n "$NS_FAIL" --as "$SA" 2>/dev/null || true)" == no ]] \
  || fail "$SA may read Databases in another namespace"
log "hook ServiceAccount: reads Databases and Clusters in its namespace, nothing else"

log "PASS"
