#!/usr/bin/env bash
# `wavegate lint`'s apply order checked against the real Argo CD (scripts/argocd.sh up): the
# manifests of tests/argocd/order/ — PreSync hooks in negative and positive waves, a Helm
# pre-install hook, negative waves, a sync-wave that is not a number (Helm hook weight instead),
# a PostSync hook, a Skip hook, and a Namespace that gitops-engine moves before the first object
# in it — are synced by the real application-controller from a local git repository, and the
# order the API server saw (each object's creationTimestamp) must be the order
# `wavegate lint -o order` printed beforehand:
#   - an object of an earlier (phase, wave) was created in an earlier second than every object
#     of a later one: Argo CD sleeps 2 s after applying each (phase, wave) but the last
#     (argo-cd controller/sync.go delayBetweenSyncWaves), and creationTimestamp has a resolution
#     of 1 s, so moments are compared, never objects within one;
#   - within one (phase, wave), in lint's order, no object was created in an earlier second
#     than the one before it: gitops-engine applies a moment in runs of one kind, one run after
#     another, in its kind order (`runTasks`, `processCreateTasks`) — it waits for each run to
#     be applied, not for it to be healthy;
#   - the Skip hook was never created.
# Runs inside Argo CD's network namespace (re-executes itself there). Fails, never skips, when
# Argo CD is not up. The table of predicted and seen times goes to $TEST_OUTPUT/argocd/order.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NETNS="$("$ROOT/scripts/argocd.sh" env | sed -n 's/^export WAVEGATE_ARGOCD_NETNS=//p')"
LOG_PREFIX=e2e-order
# shellcheck source=tests/argocd/lib.sh
source "$ROOT/tests/argocd/lib.sh"
enter_argocd_netns "$0" "$@"

OUT="${TEST_OUTPUT:-$ROOT/test-output}/argocd"
WAVEGATE="${WAVEGATE_BIN:-$ROOT/target/debug/wavegate}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wavegate-order.XXXXXX")"
# Until the cleanup below is set: WORK holds a copy of the binary (99 MB in a debug build).
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
mkdir -p "$OUT"
argocd_env
# shellcheck source=tests/private-copy.sh
source "$ROOT/tests/private-copy.sh"
private_copy "$WAVEGATE" "$WORK/wavegate" || fail "no private copy of $WAVEGATE to test (above: why)"
WAVEGATE="$WORK/wavegate"

NS=e2e-order
MANIFESTS="$ROOT/tests/argocd/order/manifests.yaml"

dump_state() {
  echo "---- Application order ----"
  kubectl -n argocd get application order -o yaml 2>&1 | grep -A60 'operationState:' | head -n 80
  echo "---- application-controller ----"
  tail -n 20 "$WAVEGATE_ARGOCD_STATE/logs/application-controller.log" 2>/dev/null
}
cleanup() {
  clean_slate "order" "$NS" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

log "removing what an earlier run left"
clean_slate "order" "$NS"

# What lint predicts, before anything is applied.
"$WAVEGATE" lint -o order "$MANIFESTS" >"$WORK/predicted" || fail "wavegate lint -o order failed"
log "lint predicts $(awk '{print $1" "$2}' "$WORK/predicted" | uniq | wc -l) moments for $(wc -l <"$WORK/predicted") objects"

REPO="$WORK/repo"
mkdir -p "$REPO/order"
cp "$MANIFESTS" "$REPO/order/"
git -C "$REPO" init -q -b main
git_repo_commit "$REPO" "order"

kubectl apply -f - >/dev/null <<YAML
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: order
  namespace: argocd
spec:
  project: default
  source: {repoURL: "file://$REPO", targetRevision: main, path: order}
  destination: {server: https://kubernetes.default.svc, namespace: $NS}
  syncPolicy:
    automated: {}
    retry: {limit: 0}
YAML
log "Application order created (automated sync)"
wait_until 180 "the sync of order to finish" phase_matches order "Succeeded|Failed|Error"
[[ "$(app_phase order)" == Succeeded ]] \
  || fail "the sync of order is $(app_phase order): $(field "$APPS/order" status.operationState.message)"

# What the API server saw: each predicted object's creationTimestamp ("absent" if none).
while read -r phase wave kind target; do
  ns="${target%%/*}" name="${target#*/}"
  # group/Kind → Kind.group, as kubectl names a kind.
  if [[ "$kind" == */* ]]; then kind="${kind#*/}.${kind%/*}"; fi
  args=(get "$kind" "$name" -o 'jsonpath={.metadata.creationTimestamp}')
  [[ "$ns" == - ]] || args+=(-n "$ns")
  created="$(kubectl "${args[@]}" 2>/dev/null || true)"
  echo "$phase $wave $kind $target ${created:-absent}"
done <"$WORK/predicted" >"$WORK/seen"

python3 - "$WORK/seen" "$OUT/order.txt" <<'PY' || fail "Argo CD's order differs from lint's (table: $OUT/order.txt)"
import sys
from datetime import datetime
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
moments, seen = [], []
for phase, wave, kind, target, created in rows:
    m = (phase, int(wave))
    if m not in moments:
        moments.append(m)
    t = None if created == "absent" else datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").timestamp()
    seen.append((moments.index(m), f"{phase} {wave}", f"{kind} {target}", created, t))
with open(sys.argv[2], "w") as out:
    out.write("lint's moment     object                                        created (API server)\n")
    for _, m, o, c, _ in seen:
        out.write(f"{m:<17} {o:<45} {c}\n")
print(open(sys.argv[2]).read(), end="")
errors = []
for i, m, o, c, t in seen:
    if t is None:
        errors.append(f"{o} ({m}) was never created")
for a in seen:
    for b in seen:
        if a[4] is None or b[4] is None:
            continue
        if a[0] < b[0] and not a[4] < b[4]:
            errors.append(f"{a[2]} ({a[1]}, created {a[3]}) should come before {b[2]} ({b[1]}, created {b[3]})")
for a, b in zip(seen, seen[1:]):
    if a[0] == b[0] and a[4] is not None and b[4] is not None and b[4] < a[4]:
        errors.append(f"{b[2]} (created {b[3]}) was created before {a[2]} (created {a[3]}), which lint orders first in {a[1]}")
if len(moments) < 8:
    errors.append(f"only {len(moments)} moments predicted: the manifests no longer exercise the order")
for e in errors:
    print("MISMATCH:", e)
sys.exit(1 if errors else 0)
PY
# The Skip hook is not in lint's order, and Argo CD never applied it either.
grep -q '/never$' "$WORK/predicted" && fail "lint orders the Skip hook"
kubectl -n "$NS" get configmap never >/dev/null 2>&1 && fail "Argo CD applied the Skip hook"
log "PASS: the real Argo CD applied $(wc -l <"$WORK/seen") objects in the $(awk '{print $1" "$2}' "$WORK/predicted" | uniq | wc -l) moments lint predicted"
