#!/usr/bin/env bash
# Every test wavegate has, against real parts: formatting and lints, Rust unit tests, end-to-end
# tests on the local control plane (started here if it is not up), Argo CD's Lua VM on every
# health script, Argo CD's own settings and health code on the argocd-cm patch, the real Argo CD
# syncing with wavegate in the loop, and the browser tests of the dashboard and the UI extension.
#
# Two lanes run at once, because each spends most of its time waiting on something else (a
# watch, a sync wave, a browser) and the machine has two cores:
#
#   the Argo CD lane (background, from the first second): the builds its real Argo CD tests need
#     (the pinned release with its web UI, and the other releases it runs), then the monitoring,
#     Lua and release checks and the real Argo CD of each release in its own network namespace,
#     on a private control plane of its own. Beside all that, at a lower priority, each
#     release's own code judges the shipped Lua (CPU-heavy Go builds nothing else needs: they
#     take the CPU the other builds and the waiting tests leave);
#   the cluster lane (foreground): the shared local control plane (built and started in the
#     background), fmt and clippy, one build of every test binary, the offline tests, the
#     end-to-end binary (its tests concurrently, each in its own namespace or private control
#     plane), the dashboard in chromium, README's first command.
#
# The lanes share nothing but the built binaries and the control plane's executables: the Argo CD
# lane waits for the cluster lane's `wavegate` build and control plane before it starts Argo CD.
# Its output goes to $TEST_OUTPUT/argocd-lane.log and is printed when it ends; a failure in
# either lane fails the run (and stops the other). The Go builds take one lock
# ($WAVEGATE_CACHE/build.lock), so they run one at a time, each on every core.
#
# Environment: WAVEGATE_E2E_THREADS (default 8: concurrent end-to-end tests; they mostly wait),
# WAVEGATE_ARGOCD_E2E (the releases whose real controllers run; default the pinned and the newest).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export TEST_OUTPUT=${TEST_OUTPUT:-$here/test-output}
mkdir -p "$TEST_OUTPUT"
# Each background lane gets a process group of its own, so a failure can stop all it started.
set -m

step() { printf '\n== %s\n' "$*"; }
started=$(date +%s)
elapsed() { local s=$(( $(date +%s) - started )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

lanes=()
stop_lanes() {
  local pid
  for pid in "${lanes[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
trap stop_lanes EXIT

built_marker="$TEST_OUTPUT/.wavegate-built"
rm -f "$built_marker"

# ---------------------------------------------------------------------------- the Argo CD lane --

# The Argo CD releases of the version matrix (scripts/argocd.sh versions, oldest first). Every one
# judges the shipped Lua and argocd-cm with its own code (hack/argocd's test in that release's
# build module); the real-controller end-to-end test runs on WAVEGATE_ARGOCD_E2E (default: the
# pinned release and the newest, docs/argocd.md).
mapfile -t argocd_versions < <(scripts/argocd.sh versions)
pinned=$(scripts/argocd.sh versions --pinned)
argocd_e2e=${WAVEGATE_ARGOCD_E2E:-"$pinned ${argocd_versions[-1]}"}

# Each release's own code judges the shipped Lua and argocd-cm: the releases whose Argo CD is
# not built here first, then the built ones newest first, so that by their turn their build has
# filled the Go build cache these tests share (same GOCACHE, CGO and -trimpath).
argocd_matrix() {
  local i v order=()
  for v in "${argocd_versions[@]}"; do
    [[ " $argocd_e2e " == *" $v "* ]] || order+=("$v")
  done
  for (( i=${#argocd_versions[@]}-1; i>=0; i-- )); do
    v=${argocd_versions[$i]}
    [[ " $argocd_e2e " == *" $v "* ]] && order+=("$v")
  done
  for v in "${order[@]}"; do
    step "argocd-cm judged by Argo CD $v's own settings and health code (hack/argocd) [$(elapsed)]"
    # In the release's assembled module with its own Go toolchain (3.6.1: go1.27.3).
    WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh test || return 1
  done
}

argocd_lane() {
  set -euo pipefail
  # At nice 10: these soak up what the builds and the waiting tests leave, and never hold up
  # the builds the tests wait for.
  local matrix_log="$TEST_OUTPUT/argocd-matrix.log"
  ( renice -n 10 -p "$BASHPID" >/dev/null; argocd_matrix ) >"$matrix_log" 2>&1 &
  local matrix=$!
  # Argo CD with its web UI takes the longest to build (npm downloads, the UI's production build,
  # then Go): it starts at once, beside the other releases' builds.
  step "Argo CD $pinned and its web UI: building [$(elapsed)]"
  scripts/argocd.sh build >"$TEST_OUTPUT/argocd-build.log" 2>&1 &
  local build=$! v others=()
  # The control plane's binaries first: every real Argo CD here runs on a private control plane
  # of them, and the Go builds take one lock (whichever lane asks first builds them).
  step "the control plane's binaries (Argo CD's private control planes run them) [$(elapsed)]"
  scripts/control-plane.sh build
  for v in $argocd_e2e; do
    [[ "$v" == "$pinned" ]] && continue
    others+=("$v")
    step "Argo CD $v: building [$(elapsed)]"
    WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh build
  done
  step "Argo CD lane: waiting for the cluster lane's wavegate build and control plane [$(elapsed)]"
  until [[ -f "$built_marker" ]]; do sleep 1; done
  # This lane started before the cluster lane brought the shared control plane up (the marker
  # comes after that): the monitoring check judges on it.
  eval "$(scripts/control-plane.sh env)"

  step "deploy/monitoring: PromQL parsed by Prometheus's parser, metrics a real /metrics exposes [$(elapsed)]"
  tests/monitoring/run.sh
  step "Lua health checks in Argo CD's sandbox (gopher-lua) [$(elapsed)]"
  (cd argocd/lua-harness && go test -count=1 ./...)
  step "release: workflows pass actionlint; the image's rootfs (Debian packages + binary) runs as uid 65532, read-only [$(elapsed)]"
  tests/release/run.sh

  # The other releases' real Argo CD runs beside the pinned one's build and tests: each has its
  # own network namespace, private control plane, state and output folder, and both mostly wait
  # on sync waves.
  local -A other_pid=()
  for v in "${others[@]}"; do
    step "real Argo CD $v in the loop, in the background (log: $TEST_OUTPUT/argocd-e2e-v$v.log) [$(elapsed)]"
    ( WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh up
      WAVEGATE_ARGOCD_VERSION=$v tests/argocd/e2e.sh
      # Stopped on success; a failure leaves it up for a look (scripts/argocd.sh status).
      WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh down ) >"$TEST_OUTPUT/argocd-e2e-v$v.log" 2>&1 &
    other_pid[$v]=$!
  done

  step "Argo CD $pinned and its web UI: waiting for the build [$(elapsed)]"
  wait "$build" || { tail -n 40 "$TEST_OUTPUT/argocd-build.log"; echo "test.sh: building Argo CD with its web UI failed" >&2; return 1; }
  if [[ " $argocd_e2e " == *" $pinned "* ]]; then
    v=$pinned
    step "real Argo CD $v in the loop (scripts/argocd.sh: private control plane in its own netns) [$(elapsed)]"
    WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh up
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/e2e.sh
    step "wavegate in Argo CD $v's own web UI (chromium against the real argocd-server) [$(elapsed)]"
    tests/browser/install.sh
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/ui.sh
    step "no custom Lua: a Sync hook Job running wavegate wait holds and releases a wave (real Argo CD $v) [$(elapsed)]"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/no-lua.sh
    step "wavegate lint's apply order is the one real Argo CD $v applies (creation times of a synced app) [$(elapsed)]"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/order.sh
    step "installed by Argo CD: Applications from the Helm chart and the Kustomize base (real Argo CD $v) [$(elapsed)]"
    WAVEGATE_ARGOCD_VERSION=$v tests/argocd/install.sh
    # Stop it on success (2 cores): a failure leaves it up for a look (scripts/argocd.sh status).
    WAVEGATE_ARGOCD_VERSION=$v scripts/argocd.sh down
  fi
  for v in "${others[@]}"; do
    step "real Argo CD $v in the loop: waiting for it [$(elapsed)]"
    wait "${other_pid[$v]}" || { tail -n 80 "$TEST_OUTPUT/argocd-e2e-v$v.log"; echo "test.sh: the real Argo CD $v test failed" >&2; return 1; }
    tail -n 20 "$TEST_OUTPUT/argocd-e2e-v$v.log"
  done
  step "Argo CD lane: waiting for each release's own code on the shipped Lua [$(elapsed)]"
  wait "$matrix" || { cat "$matrix_log"; echo "test.sh: a release's own code refused the shipped Lua or argocd-cm" >&2; return 1; }
  cat "$matrix_log"
  step "Argo CD lane passed [$(elapsed)]"
}

argocd_log="$TEST_OUTPUT/argocd-lane.log"
step "the Argo CD lane: started in the background (log: $argocd_log)"
argocd_lane >"$argocd_log" 2>&1 &
argocd_pid=$!
lanes+=("$argocd_pid")
# The browser tests' npm packages download while the Rust code compiles.
tests/browser/install.sh >"$TEST_OUTPUT/browser-install.log" 2>&1 &
browser_install=$!

# The lane's exit status, waited for once: a second `wait` on a reaped pid fails ("not a child
# of this shell"), and the lane may well end before the e2e tests do.
argocd_rc=
argocd_lane_done() {
  if [[ -z "$argocd_rc" ]]; then
    wait "$argocd_pid" && argocd_rc=0 || argocd_rc=$?
  fi
  return "$argocd_rc"
}
argocd_lane_failed() {
  echo "test.sh: the Argo CD lane failed; its log ($argocd_log) ends:" >&2
  tail -n 80 "$argocd_log" >&2
  exit 1
}

# ---------------------------------------------------------------------------- the cluster lane --

# The control plane and Helm build (Go) while clippy and the Rust build run: nothing here needs
# them before the tests.
step "control plane and Helm (tests/offline/helm_chart.rs): building and starting in the background [$(elapsed)]"
scripts/control-plane.sh up >"$TEST_OUTPUT/control-plane-up.log" 2>&1 &
control_plane_up=$!
scripts/helm.sh build >"$TEST_OUTPUT/helm-build.log" 2>&1 &
helm_build=$!
lanes+=("$control_plane_up" "$helm_build")

step "cargo fmt / clippy [$(elapsed)]"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings

step "Rust: every test binary, the wavegate binary and the examples, built once [$(elapsed)]"
# The test binaries run directly below, not through cargo: cargo holds the target directory's
# lock while its tests run, which would stall every `cargo build` of the other lane.
cargo build --quiet --bin wavegate --examples
test_bins=$(cargo test --no-run --lib --bins --tests --examples --message-format=json 2>"$TEST_OUTPUT/cargo-build.log" |
  jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test == true)
         | "\(.target.name)\t\(.target.kind[0])\t\(.executable)"') ||
  { cat "$TEST_OUTPUT/cargo-build.log" >&2; exit 1; }

step "control plane: waiting for it [$(elapsed)]"
wait "$control_plane_up" || { cat "$TEST_OUTPUT/control-plane-up.log" >&2; echo "test.sh: the control plane did not come up" >&2; exit 1; }
cat "$TEST_OUTPUT/control-plane-up.log"
eval "$(scripts/control-plane.sh env)"
touch "$built_marker"
bin_of() { awk -F'\t' -v n="$1" -v k="$2" '$1 == n && $2 == k {print $3}' <<<"$test_bins"; }
# The offline tests render the Helm chart.
wait "$helm_build" || { cat "$TEST_OUTPUT/helm-build.log" >&2; echo "test.sh: building Helm failed" >&2; exit 1; }

step "Rust unit tests and the offline tests (oracles, parity, lint, API fuzz and load, manifests) [$(elapsed)]"
while IFS=$'\t' read -r name kind exe; do
  [[ "$kind" == test && "$name" == e2e ]] && continue
  echo "-- $kind $name"
  # api::timing measures the view after a change (asserting nothing): it is run by hand with
  # --profile bench-fast, as its ignore reason says; in a debug build it would only take time.
  skip=()
  [[ "$kind" == lib ]] && skip=(--skip api::timing::) && echo "-- (not run: the timing api::timing::waves_view_after_one_change)"
  "$exe" --include-ignored "${skip[@]}" 2>&1 | tee -a "$TEST_OUTPUT/cargo-test.log"
done <<<"$test_bins"

step "Rust end-to-end tests on the local control plane, ${WAVEGATE_E2E_THREADS:-8} at a time [$(elapsed)]"
e2e_bin=$(bin_of e2e test)
[[ -x "$e2e_bin" ]] || { echo "test.sh: no e2e test binary was built" >&2; exit 1; }
"$e2e_bin" --include-ignored --test-threads="${WAVEGATE_E2E_THREADS:-8}" 2>&1 | tee -a "$TEST_OUTPUT/cargo-test.log"
kill -0 "$argocd_pid" 2>/dev/null || argocd_lane_done || argocd_lane_failed

step "browser tests (Debian chromium, headless) [$(elapsed)]"
wait "$browser_install" || { cat "$TEST_OUTPUT/browser-install.log" >&2; exit 1; }
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
port=${WAVEGATE_TEST_PORT:-18080}
target/debug/wavegate serve --listen "127.0.0.1:$port" --verdict-ttl 10ms \
  >"$TEST_OUTPUT/wavegate-serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true; stop_lanes' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
WAVEGATE_URL="http://127.0.0.1:$port/" tests/browser/run.sh
kill "$serve_pid" 2>/dev/null || true

# README's first command, as a newcomer runs it (no KUBECONFIG): it builds, seeds and serves; the split
# CockroachDB (seed 000, played by the stand-ins run.sh starts) must read Degraded.
step "README's first command: scripts/run.sh serves the seed incidents [$(elapsed)]"
run_port=${WAVEGATE_RUN_PORT:-18181}
# A job in a process group of its own (set -m above), so `kill -- -$run_pid` stops run.sh and the
# wavegate it serves with. (Under set -m, `setsid` would fork into a session that kill misses,
# leaving a `wavegate serve` that writes the gates of the next control plane on this port.)
WAVEGATE_LISTEN="127.0.0.1:$run_port" env -u KUBECONFIG scripts/run.sh >"$TEST_OUTPUT/run-sh.log" 2>&1 &
run_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; kill -- -"$run_pid" 2>/dev/null || true; stop_lanes' EXIT
crdb="http://127.0.0.1:$run_port/api/v1/health/crdbclusters.crdb.cockroachlabs.com/prod/cockroachdb"
verdict=""
for _ in $(seq 1 600); do
  verdict=$(curl -sS --max-time 2 "$crdb" 2>/dev/null || true)
  case "$verdict" in *'"status":"Degraded"'*) break ;; esac
  sleep 0.2
done
kill -- -"$run_pid" 2>/dev/null || true
wait "$run_pid" 2>/dev/null || true
case "$verdict" in
  *'"status":"Degraded"'*) echo "scripts/run.sh: $verdict" ;;
  *)
    echo "test.sh: scripts/run.sh did not serve the split CockroachDB as Degraded within 120 s; last answer: ${verdict:-none}" >&2
    tail -30 "$TEST_OUTPUT/run-sh.log" >&2
    exit 1
    ;;
esac
step "cluster lane passed [$(elapsed)]"

step "waiting for the Argo CD lane [$(elapsed)]"
argocd_lane_done || argocd_lane_failed
cat "$argocd_log"
step "all tests passed [$(elapsed)]"
