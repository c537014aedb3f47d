#!/usr/bin/env bash
# Every test wavegate has, against real parts: formatting and lints, Rust unit tests, end-to-end
# tests on the local control plane (started here if it is not up), Argo CD's Lua VM on every
# health script, Argo CD's own settings and health code on the argocd-cm patch, the real Argo CD
# syncing with wavegate in the loop, and the browser tests of the dashboard and the UI extension.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export TEST_OUTPUT=${TEST_OUTPUT:-$here/test-output}
mkdir -p "$TEST_OUTPUT"

step() { printf '\n== %s\n' "$*"; }

# Argo CD with its web UI takes the longest to build (npm downloads, a webpack build, then Go):
# start it now so it overlaps everything up to the Argo CD step, which waits for it.
step "Argo CD and its web UI: building in the background (log: $TEST_OUTPUT/argocd-build.log)"
scripts/argocd.sh build >"$TEST_OUTPUT/argocd-build.log" 2>&1 &
argocd_build=$!

step "control plane"
scripts/control-plane.sh up
eval "$(scripts/control-plane.sh env)"

# The Argo CD releases of the version matrix (scripts/argocd.sh versions, oldest first). Every one
# judges the shipped Lua and argocd-cm with its own code (hack/argocd's test in that release's
# build module); the real-controller end-to-end test runs on WAVEGATE_ARGOCD_E2E (default: the
# pinned release and the newest; the oldest adds a cold Argo CD build and a ~3-minute run,
# docs/argocd.md). The Go work runs now, in the background, newest first, one step at a time (the
# builds take the Go build lock), so it fills the cores the Rust steps leave idle; it is awaited
# before the first Argo CD step.
mapfile -t argocd_versions < <(scripts/argocd.sh versions)
argocd_e2e=${WAVEGATE_ARGOCD_E2E:-"$(scripts/argocd.sh versions --pinned) ${argocd_versions[-1]}"}
argocd_matrix() {
  local i v dir
  for (( i=${#argocd_versions[@]}-1; i>=0; i-- )); do
    v=${argocd_versions[$i]}
    echo "== argocd-cm judged by Argo CD $v's own settings and health code (hack/argocd)"
    dir=$(WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh module) || return 1
    # Same GOCACHE, CGO and -trimpath as scripts/argocd.sh build, so shared packages compile once.
    (cd "$dir" && WAVEGATE_REPO="$here" GOCACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}/go-build" \
      CGO_ENABLED=0 go test -trimpath -count=1 ./...) || return 1
    if [[ " $argocd_e2e " == *" $v "* ]]; then
      WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh build || return 1
    fi
  done
}
argocd_matrix >"$TEST_OUTPUT/argocd-matrix.log" 2>&1 &
argocd_matrix_pid=$!

step "cargo fmt / clippy"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings

step "Helm built from its Go module (tests/helm_chart.rs renders the chart next to Kustomize)"
scripts/helm.sh build

step "Rust unit and end-to-end tests"
cargo test --lib --bins --tests --examples 2>&1 | tee "$TEST_OUTPUT/cargo-test.log"

step "deploy/monitoring: PromQL parsed by Prometheus's parser, metrics a real /metrics exposes"
tests/monitoring/run.sh

step "Lua health checks in Argo CD's sandbox (gopher-lua)"
(cd argocd/lua-harness && go test -count=1 ./...)

step "Argo CD releases: each one's own code judges the Lua (hack/argocd), builds (started after the control plane)"
argocd_rc=0
wait "$argocd_matrix_pid" || argocd_rc=$?
cat "$TEST_OUTPUT/argocd-matrix.log"
(( argocd_rc == 0 )) || { echo "test.sh: the Argo CD version matrix failed (above)" >&2; exit 1; }

wait "$argocd_build" || { tail -n 40 "$TEST_OUTPUT/argocd-build.log" >&2; echo "test.sh: building Argo CD with its web UI failed" >&2; exit 1; }
cargo build --quiet --bin wavegate
pinned=$(scripts/argocd.sh versions --pinned)
for v in $argocd_e2e; do
  step "real Argo CD $v in the loop (scripts/argocd.sh: private control plane in its own netns)"
  WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh up
  WAVEGATE_ARGOCD_VERSION=$v tests/argocd/e2e.sh
  if [[ "$v" == "$pinned" ]]; then
    step "wavegate in Argo CD $v's own web UI (chromium against the real argocd-server)"
    tests/browser/install.sh
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/ui.sh
    step "no custom Lua: a Sync hook Job running wavegate wait holds and releases a wave (real Argo CD $v)"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/no-lua.sh
    step "wavegate lint's apply order is the one real Argo CD $v applies (creation times of a synced app)"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/order.sh
    step "installed by Argo CD: Applications from the Helm chart and the Kustomize base (real Argo CD $v)"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/install.sh
  fi
  # Stop it on success (2 cores): a failure leaves it up for a look (scripts/argocd.sh status).
  WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh down
done

step "release: workflows pass actionlint; the image's rootfs (Debian packages + binary) runs as uid 65532, read-only"
tests/release/run.sh

step "browser tests (Debian chromium, headless)"
tests/browser/install.sh
# The end-to-end tests leave their namespaces (and WaveGates) behind; the dashboard should show
# the seed scenarios only.
# Pods on the fake node never finish graceful deletion (no kubelet), so force them first or the
# namespaces stay Terminating.
for ns in $(kubectl get namespace -l wavegate.dev/test=e2e -o jsonpath='{.items[*].metadata.name}'); do
  kubectl -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
done
kubectl delete namespace -l wavegate.dev/test=e2e --wait=true --timeout=90s >/dev/null ||
  echo "test.sh: warning: some test namespaces are still terminating; the dashboard shows them too" >&2
scripts/seed.sh
cargo build --quiet --bin wavegate
port=${WAVEGATE_TEST_PORT:-18080}
target/debug/wavegate serve --listen "127.0.0.1:$port" --verdict-ttl 10ms \
  >"$TEST_OUTPUT/wavegate-serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
WAVEGATE_URL="http://127.0.0.1:$port/" tests/browser/run.sh
kill "$serve_pid" 2>/dev/null || true

# README's first command, as a newcomer runs it (no KUBECONFIG): it builds, seeds and serves; the split
# CockroachDB (seed 000, played by the stand-ins run.sh starts) must read Degraded.
step "README's first command: scripts/run.sh serves the seed incidents"
run_port=${WAVEGATE_RUN_PORT:-18181}
WAVEGATE_LISTEN="127.0.0.1:$run_port" setsid env -u KUBECONFIG scripts/run.sh >"$TEST_OUTPUT/run-sh.log" 2>&1 &
run_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; kill -- -"$run_pid" 2>/dev/null || true' EXIT
crdb="http://127.0.0.1:$run_port/api/v1/health/crdbclusters.crdb.cockroachlabs.com/prod/cockroachdb"
verdict=""
for _ in $(seq 1 600); do
  verdict=$(curl -sS --max-time 2 "$crdb" 2>/dev/null || true)
  case "$verdict" in *'"status":"Degraded"'*) break ;; esac
  sleep 0.2
done
kill -- -"$run_pid" 2>/dev/null || true
case "$verdict" in
  *'"status":"Degraded"'*) echo "scripts/run.sh: $verdict" ;;
  *)
    echo "test.sh: scripts/run.sh did not serve the split CockroachDB as Degraded within 120 s; last answer: ${verdict:-none}" >&2
    tail -30 "$TEST_OUTPUT/run-sh.log" >&2
    exit 1
    ;;
esac

step "all tests passed"
