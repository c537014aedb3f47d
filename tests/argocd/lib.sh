# Shared by tests/argocd/no-lua.sh and tests/argocd/install.sh (sourced, not run): the real Argo
# CD of scripts/argocd.sh, its private control plane, and the parts of a cluster that this
# control plane lacks, played or run as honestly as this machine allows.
#
# What is REAL: the API server, Argo CD's application-controller / repo-server, and
# kube-controller-manager's Job, Deployment, ReplicaSet and disruption controllers
# (start_workload_controllers runs a second kube-controller-manager with only those, for the
# length of the test; the private control plane's own one runs the EndpointSlice, namespace, GC
# and ServiceAccount controllers).
# What is PLAYED, because there is no scheduler, kubelet or container runtime: binding a pod to
# the fake node, its phase and readiness — and for a pod that runs the wavegate image
# (kubelet_run), the container itself: the binary under test is run with the pod's args and env,
# as uid 65532 on a read-only root, with a token for the pod's ServiceAccount bound to the pod
# where the kubelet would project it, and the pod's status is then written from its exit code.

# Callers set ROOT, NETNS and LOG_PREFIX first.
fail() {
  echo "$LOG_PREFIX: FAIL: $*" >&2
  if declare -F dump_state >/dev/null; then dump_state >&2 || true; fi
  exit 1
}
log() { echo "$LOG_PREFIX: $*" >&2; }
now_ms() { date +%s%3N; }

# Re-execute the calling script inside Argo CD's network namespace.
enter_argocd_netns() { # script args...
  if [[ "$(ip netns identify $$ 2>/dev/null)" != "$NETNS" ]]; then
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS" \
      || fail "Argo CD is not up: no network namespace $NETNS (run: scripts/argocd.sh up)"
    exec ip netns exec "$NETNS" "$@"
  fi
}

# The application-controller's /healthz, for up to 60 s: on 2 busy cores (the CI lanes side by
# side) one answer can take longer than a request's 3 s, and that is no failure of Argo CD's.
controller_answers() {
  local i
  for i in $(seq 60); do
    curl -sf --max-time 3 "$WAVEGATE_ARGOCD_CONTROLLER_METRICS/healthz" | grep -qx ok && return 0
    sleep 1
  done
  return 1
}

# After enter_argocd_netns: the API server, Argo CD up, helpers for reading objects.
argocd_env() {
  eval "$("$ROOT/scripts/argocd.sh" env)"
  export KUBECONFIG="$WAVEGATE_ARGOCD_KUBECONFIG"
  "$ROOT/scripts/argocd.sh" status >/dev/null || { "$ROOT/scripts/argocd.sh" status >&2 || true; fail "Argo CD is not up (run: scripts/argocd.sh up)"; }
  controller_answers || fail "application-controller /healthz does not answer (60 s)"
  API="$(sed -n 's/^ *server: //p' "$KUBECONFIG" | head -n1)"
  TOKEN="$(sed -n 's/^ *token: //p' "$KUBECONFIG" | head -n1)"
  sed -n 's/^ *certificate-authority-data: //p' "$KUBECONFIG" | head -n1 | base64 -d >"$WORK/ca.crt"
  chmod 644 "$WORK/ca.crt"
}

api_get() { curl -sf --max-time 5 --cacert "$WORK/ca.crt" -H "Authorization: Bearer $TOKEN" "$API$1"; }
api_post() { curl -sf --max-time 5 --cacert "$WORK/ca.crt" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -X POST -d "$2" "$API$1"; }
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
    sleep 0.2
  done
}

APPS=/apis/argoproj.io/v1alpha1/namespaces/argocd/applications
app_phase() { field "$APPS/$1" status.operationState.phase; }
phase_matches() { [[ "$(app_phase "$1")" =~ ^($2)$ ]]; }                  # app regex

git_repo_commit() { # repo message
  git -C "$1" add -A
  git -C "$1" -c user.name=e2e -c user.email=e2e@wavegate.invalid commit -q -m "$2"
}

# Delete Applications (without touching what they deployed) and namespaces left by a run.
clean_slate() { # "apps..." "namespaces..."
  local app ns
  for app in $1; do
    kubectl -n argocd patch application "$app" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    kubectl -n argocd delete application "$app" --ignore-not-found --wait=true --timeout=60s >/dev/null
  done
  [[ -n "$2" ]] || return 0
  # shellcheck disable=SC2086
  kubectl delete namespace $2 --ignore-not-found --wait=false >/dev/null
  # Pods bound to the fake node stay Terminating (no kubelet), and so would their namespace; so
  # would a hook Job that still carries Argo CD's hook finalizer once its Application is gone
  # (Argo CD removes it only when the hook finishes).
  namespaces_gone() {
    local n j
    for n in $2; do
      kubelet_reap "$n"
      drop_pod_finalizers "$n"
      for j in $(kubectl -n "$n" get jobs -o name 2>/dev/null); do
        kubectl -n "$n" patch "$j" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
      done
      kubectl get namespace "$n" >/dev/null 2>&1 && return 1
    done
    return 0
  }
  wait_until 120 "namespaces $2 deleted" namespaces_gone "$1" "$2"
}

# --------------------------------------------- workload controllers (real) ----
# kube-controller-manager from the private control plane's build, with only the controllers a
# Job hook, a Deployment and its PodDisruptionBudget need. Stopped by stop_workload_controllers
# (call it from an EXIT trap): other tests on this control plane expect no Deployment or Job
# controller.
start_workload_controllers() {
  local kv kcm
  kv="$(sed -n 's#^require k8s\.io/kubernetes v\([^[:space:]]*\)$#\1#p' "$ROOT/hack/kube/go.mod")"
  kcm="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}/bin/kube-v$kv/kube-controller-manager"
  [[ -x "$kcm" ]] || fail "$kcm missing (scripts/argocd.sh up builds it)"
  mkdir -p "$WORK/kcm-certs"
  # Its own serving port (the private control plane's kcm has 10357), on loopback in the netns.
  setsid "$kcm" --kubeconfig "$KUBECONFIG" \
    --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
    --authentication-skip-lookup --authorization-always-allow-paths /healthz \
    --bind-address 127.0.0.1 --secure-port 10367 --cert-dir "$WORK/kcm-certs" \
    --controllers job-controller,deployment-controller,replicaset-controller,disruption-controller \
    --leader-elect=false --use-service-account-credentials=false --profiling=false \
    >"$OUT/kcm-workloads.log" 2>&1 </dev/null &
  KCM_WORKLOADS_PID=$!
  wait_until 60 "kube-controller-manager (job, deployment, replicaset) healthy" \
    curl -sfk --max-time 1 https://127.0.0.1:10367/healthz -o /dev/null
}
stop_workload_controllers() {
  [[ -n "${KCM_WORKLOADS_PID:-}" ]] || return 0
  kill "$KCM_WORKLOADS_PID" 2>/dev/null || true
  wait "$KCM_WORKLOADS_PID" 2>/dev/null || true
  KCM_WORKLOADS_PID=
}

# ------------------------------------------------------- kubelet (played) ----
NODE=wavegate-node

pods_of() { # ns label-selector -> pod names
  kubectl -n "$1" get pods -l "$2" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null
}

# What the scheduler does: bind the pod to the (fake) node.
kubelet_bind() { # ns pod
  [[ -n "$(field "/api/v1/namespaces/$1/pods/$2" spec.nodeName)" ]] && return 0
  api_post "/api/v1/namespaces/$1/pods/$2/binding" \
    "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":\"$2\"},\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"$NODE\"}}" >/dev/null
}

# The kubelet's status for a running container set: Running, ready or not, with a pod IP.
kubelet_running() { # ns pod ip True|False
  local ts containers
  ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  containers="$(api_get "/api/v1/namespaces/$1/pods/$2" | python3 -c 'import json,sys
p = json.load(sys.stdin); ready = sys.argv[1] == "True"; ts = sys.argv[2]
print(json.dumps([{"name": c["name"], "image": c["image"], "imageID": "", "ready": ready, "started": True,
  "restartCount": 0, "state": {"running": {"startedAt": ts}}} for c in p["spec"]["containers"]]))' "$4" "$ts")"
  kubectl -n "$1" patch pod "$2" --subresource=status --type merge -p "{\"status\":{\"phase\":\"Running\",
    \"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}],\"hostIP\":\"10.0.0.1\",\"startTime\":\"$ts\",
    \"containerStatuses\":$containers,
    \"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"$ts\"},
      {\"type\":\"Initialized\",\"status\":\"True\",\"lastTransitionTime\":\"$ts\"},
      {\"type\":\"ContainersReady\",\"status\":\"$4\",\"lastTransitionTime\":\"$ts\"},
      {\"type\":\"Ready\",\"status\":\"$4\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
}

# The kubelet's status for a pod whose only container exited with `code` (restartPolicy Never):
# what the Job controller counts, and what a podFailurePolicy's onExitCodes reads.
kubelet_exited() { # ns pod code
  local ts phase reason name image
  ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if [[ "$3" == 0 ]]; then phase=Succeeded reason=Completed; else phase=Failed reason=Error; fi
  name="$(field "/api/v1/namespaces/$1/pods/$2" spec.containers | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])')"
  image="$(field "/api/v1/namespaces/$1/pods/$2" spec.containers | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["image"])')"
  kubectl -n "$1" patch pod "$2" --subresource=status --type merge -p "{\"status\":{\"phase\":\"$phase\",
    \"containerStatuses\":[{\"name\":\"$name\",\"image\":\"$image\",\"imageID\":\"\",\"ready\":false,\"started\":false,\"restartCount\":0,
      \"state\":{\"terminated\":{\"exitCode\":$3,\"reason\":\"$reason\",\"startedAt\":\"$ts\",\"finishedAt\":\"$ts\"}}}],
    \"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"$ts\"},
      {\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"PodCompleted\",\"lastTransitionTime\":\"$ts\"},
      {\"type\":\"ContainersReady\",\"status\":\"False\",\"reason\":\"PodCompleted\",\"lastTransitionTime\":\"$ts\"}]}}" >/dev/null
}

# What the kubelet does once a deleted pod's containers have stopped: remove the pod object.
# Without it a pod on the fake node stays Terminating, and so does whatever waits for it
# (foreground deletion of its Deployment, the namespace).
kubelet_reap() { # ns
  local p
  for p in $(kubectl -n "$1" get pods -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null | awk 'NF == 2 {print $1}'); do
    kubectl -n "$1" delete pod "$p" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  done
}

# Cleanup only: a deleted Job's pods keep the Job controller's tracking finalizer until that
# controller runs again; a test that failed before starting it (or after stopping it) clears it.
drop_pod_finalizers() { # ns
  local p
  for p in $(kubectl -n "$1" get pods -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null | awk 'NF == 2 {print $1}'); do
    kubectl -n "$1" patch pod "$p" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
}

# Run the container of a pod that uses the wavegate image, as the kubelet would: the args and
# env of its pod spec (fieldRef metadata.namespace/name resolved), uid/gid 65532, read-only root
# (bubblewrap in an unprivileged user namespace entered as uid 65532, so the process is not
# root on the host either), and a token for the pod's ServiceAccount — requested with
# TokenRequest and bound to this pod, as the kubelet's projected volume is — at
# /var/run/secrets/kubernetes.io/serviceaccount with KUBERNETES_SERVICE_HOST/PORT set, so
# wavegate uses its in-cluster configuration. Prints the exit code; output goes to `log`.
kubelet_run() { # ns pod logfile -> exit code on stdout
  local ns="$1" pod="$2" logf="$3" spec sa uid sadir port
  spec="$(api_get "/api/v1/namespaces/$ns/pods/$pod")" || fail "pod $ns/$pod not found"
  sa="$(jqget spec.serviceAccountName <<<"$spec")"; uid="$(jqget metadata.uid <<<"$spec")"
  [[ "$(jqget spec.automountServiceAccountToken <<<"$spec")" == true ]] || fail "pod $ns/$pod does not mount a ServiceAccount token"
  sadir="$(mktemp -d "$WORK/sa.XXXXXX")"
  kubectl -n "$ns" create token "$sa" --bound-object-kind Pod --bound-object-name "$pod" \
    --bound-object-uid "$uid" --duration 1h >"$sadir/token" || fail "TokenRequest for $ns/$sa failed"
  cp "$WORK/ca.crt" "$sadir/ca.crt"; printf '%s' "$ns" >"$sadir/namespace"
  chmod 755 "$sadir"; chmod 644 "$sadir"/*
  port="${API##*:}"
  local -a cmd
  mapfile -t cmd < <(python3 - "$spec" <<'PY'
import json, sys
p = json.loads(sys.argv[1]); c = p["spec"]["containers"][0]
refs = {"metadata.namespace": p["metadata"]["namespace"], "metadata.name": p["metadata"]["name"]}
for e in c.get("env", []):
    if "value" in e:
        v = e["value"]
    else:
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        if path not in refs:
            sys.exit("kubelet_run: unsupported fieldRef %s" % path)
        v = refs[path]
    print("--setenv"); print(e["name"]); print(v)
print("--"); print(c.get("command", ["/wavegate"])[0])
for a in c.get("command", [])[1:] + c.get("args", []):
    print(a)
PY
  ) || fail "cannot read the container of $ns/$pod"
  # cmd: --setenv NAME VALUE ... -- /wavegate ARGS...; the image's /wavegate is the binary under
  # test ($WAVEGATE, the test's private copy, run from where it lies: the host's root, read-only).
  local i sep=0 args=() envs=()
  for (( i=0; i<${#cmd[@]}; i++ )); do
    if (( sep )); then args+=("${cmd[$i]}"); elif [[ "${cmd[$i]}" == -- ]]; then sep=1; else envs+=("${cmd[$i]}"); fi
  done
  [[ "${args[0]}" == /wavegate ]] || fail "pod $ns/$pod runs ${args[0]}, not the wavegate image's /wavegate"
  args[0]="$WAVEGATE"
  local rc=0
  setpriv --reuid=65532 --regid=65532 --clear-groups \
    bwrap --unshare-user --uid 65532 --gid 65532 --unshare-pid --die-with-parent \
      --ro-bind / / --dev /dev --proc /proc --tmpfs /run \
      --ro-bind "$sadir" /run/secrets/kubernetes.io/serviceaccount --remount-ro /run \
      --clearenv --setenv KUBERNETES_SERVICE_HOST 127.0.0.1 --setenv KUBERNETES_SERVICE_PORT "$port" \
      "${envs[@]}" -- "${args[@]}" >"$logf" 2>&1 </dev/null || rc=$?
  echo "$rc"
}
