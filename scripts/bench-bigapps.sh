#!/usr/bin/env bash
# Big applications, measured on the local control plane; rewrites the "Big applications" section
# of docs/benchmarks.md (the rest of the file is scripts/bench.sh's):
#   - benches/bigapps.rs against a fresh `wavegate serve` (as a bench identity whose API-server
#     requests its FlowSchema counts): the waves view + timeline of Applications of 2,000, 1,000
#     and 200 resources in 20 waves, of parents of 200 and 100 child Applications of 10 resources,
#     `GET /api/v1/applications`, and the dashboard's whole refresh;
#   - tests/browser/render-bench.mjs: chromium's own time to render those in the dashboard and in
#     the UI extension's Waves tab.
#
#   scripts/bench-bigapps.sh     # ~10 minutes on 2 cores once built; raw output under target/bench/
#
# Knobs (env): BENCH_PROFILE (release) — the cargo profile wavegate and the bench are built with
# (`dev` for the debug build; the section says which); BENCH_PORT (18190; this uses +3);
# BENCH_ASKS (50) warm requests per view, BENCH_REFRESHES (10) per list and dashboard refresh.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

profile=${BENCH_PROFILE:-release}
port=$((${BENCH_PORT:-18190} + 3))
asks=${BENCH_ASKS:-50}
refreshes=${BENCH_REFRESHES:-10}
out=$here/target/bench/bigapps-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
private=$(mktemp -d) # the bench identity's kubeconfig (a token) lives only here
pids=()

started=$(date +%s)
step() { printf '\n== [%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
k() { kubectl --request-timeout=30s "$@"; }

cleanup() {
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  if [ -n "${KUBECONFIG:-}" ]; then
    # The bench's namespace, kept for chromium or left by a failed run.
    for ns in $(k get namespaces -o name 2>/dev/null | sed -n 's#^namespace/\(wgbench-bigapps-.*\)#\1#p'); do
      k delete namespace "$ns" --wait=false >/dev/null 2>&1
    done
    k delete flowschema wgbench-wavegate --ignore-not-found >/dev/null 2>&1
    k delete clusterrolebinding wgbench-wavegate --ignore-not-found >/dev/null 2>&1
  fi
  rm -rf "$private"
}
trap cleanup EXIT

step "control plane"
scripts/control-plane.sh up >"$out/control-plane.log"
eval "$(scripts/control-plane.sh env)"

step "build (profile $profile)"
built() { # bin|bench name → the executable
  cargo build --quiet --profile "$profile" "--$1" "$2" --message-format=json |
    jq -r --arg n "$2" 'if .reason == "compiler-message" then (.message.rendered | stderr | empty)
      elif .reason == "compiler-artifact" and .target.name == $n and .executable != null then .executable
      else empty end' | tail -1
}
wavegate=$(built bin wavegate)
bigapps_bin=$(built bench bigapps)

step "a bench identity for wavegate"
scripts/bench-identity.sh "$private"

# wavegate watches only the bench's namespace: what other clients of a shared control plane do
# elsewhere (a thousand WaveGates its gate controller would judge and write) is not its cost.
ns=wgbench-bigapps-$(date +%s)
step "wavegate D (fresh: its first requests are the first after its start; --namespaces $ns)"
KUBECONFIG=$private/kubeconfig "$wavegate" serve --listen "127.0.0.1:$port" --namespaces "$ns" >"$out/d.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { echo "wavegate did not start; see $out/d.log" >&2; exit 1; }

step "benches/bigapps.rs"
"$bigapps_bin" --wavegate "http://127.0.0.1:$port" --pid "$pid" --namespace "$ns" --asks "$asks" \
  --refreshes "$refreshes" --keep true | tee "$out/bigapps.txt" >&2
bench_line() { # file name key → value from "BENCH name key=value …"
  awk -v n="$2" -v k="$3" '$1 == "BENCH" && $2 == n {for (i = 3; i <= NF; i++) {split($i, kv, "="); if (kv[1] == k) print substr($i, length(k) + 2)}}' "$1" | tail -1
}
b=$out/bigapps.txt
kept=$(bench_line "$b" bigapps.namespace name)

step "chromium: the dashboard and the extension's Waves tab"
[ -d tests/browser/node_modules/playwright-core ] || tests/browser/install.sh >"$out/browser-install.log" 2>&1
WAVEGATE_URL="http://127.0.0.1:$port/" BIGAPPS_NS=$kept node tests/browser/render-bench.mjs >"$out/render.txt" 2>"$out/render.log" ||
  { cat "$out/render.log" >&2; exit 1; }
cat "$out/render.log" >&2
r=$out/render.txt

step "docs/benchmarks.md"
ok() { # value <=|>= target → ✅ or ❌
  awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
    met = (v != "") && ((op == "<=") ? (v + 0 <= t + 0) : (v + 0 >= t + 0)); print (met ? "✅" : "❌") }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0) printf "%.2f", a / b; else print "?"}'; }
mib() { awk -v k="${1:-0}" 'BEGIN {printf "%.1f", k / 1024}'; }
row() { # shape what how
  local n=bigapps.$1 p95
  p95=$(bench_line "$b" "$n" p95_ms)
  echo "| $2 | warm p95 **$p95 ms** $(ok "$p95" '<=' 200) (p50 $(bench_line "$b" "$n" p50_ms), max $(bench_line "$b" "$n" max_ms); n=$(bench_line "$b" "$n" n)); first after start **$(bench_line "$b" "$n" first_ms) ms**; **$(bench_line "$b" "$n" apiserver_requests)** API-server requests over the warm requests; **$(bench_line "$b" "$n" cpu_ms_per_request) ms CPU** per request; RSS $(mib "$(bench_line "$b" "$n" rss_kib)") MiB after; $(bench_line "$b" "$n" bytes) bytes; rest of the machine $(bench_line "$b" "$n" others_busy_pct)% busy, load $(bench_line "$b" "$n" load1) | warm p95 ≤ 200 ms | $3 |"
}
render_row() { # page what how
  local n=render.$1 p95 long
  p95=$(bench_line "$r" "$n" p95_ms)
  long=$(bench_line "$r" "$n" longest_task_ms)
  echo "| $2 | per update p95 **$p95 ms** $(ok "$p95" '<=' 100) (p50 $(bench_line "$r" "$n" p50_ms), max $(bench_line "$r" "$n" max_ms); n=$(bench_line "$r" "$n" n)); longest task **$long ms** $(ok "$long" '<=' 100); $(bench_line "$r" "$n" rows) resource rows drawn; first update $(bench_line "$r" "$n" first_cycle_ms) ms, rows shown $(bench_line "$r" "$n" shown_ms) ms after opening the page; opening a closed wave $(bench_line "$r" "$n" open_wave_ms) ms to the next frame | ≤ 100 ms per update | $3 |"
}
big=bigapps.waves-timeline.2000
half=bigapps.waves-timeline.1000
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain -- src benches Cargo.toml Cargo.lock | wc -l)
[ "$dirty" -gt 0 ] && commit="$commit (+ $dirty uncommitted files under src/, benches/ or Cargo.*, as built)"
case $profile in
  release) built_as="release build" ;;
  dev) built_as="**debug build** (profile \`dev\`: unoptimised, so CPU and latency are several times a release build's)" ;;
  *) built_as="profile \`$profile\` (Cargo.toml)" ;;
esac
section=$(
  cat <<SECTION
## Big applications: waves view, timeline, dashboard

Generated by \`scripts/bench-bigapps.sh\` ($(date -u +%Y-%m-%dT%H:%MZ), commit $commit) — rerun it to update this section.
wavegate: $built_as, a fresh \`wavegate serve --namespaces <the bench's>\` (otherwise defaults; so other clients of the shared control plane cost it nothing) as a ServiceAccount whose requests its own FlowSchema counts; on $(nproc) cores shared with the control plane, the client and whatever else runs (each row says how busy the rest of the machine was: CPU of all cores not used by wavegate or the client, and the load average).
Objects: ConfigMaps, Services (selecting no pods) and Deployments (no replicas) in turn, applied with Argo CD's field manager; each Application lists them in \`status.resources\` (wave = index mod 20) and in its last sync's \`syncResult\`. wavegate judges the Services and Deployments itself (two thirds) and follows Argo CD's recorded sync status for the ConfigMaps; the timeline reads the live objects it judged.

| metric | result | target | how measured |
| --- | --- | --- | --- |
$(row waves-timeline.2000 "waves view + timeline, $(bench_line "$b" $big resources) resources in 20 waves" "\`GET /api/v1/applications/{ns}/big/waves\` (view and timeline are one answer), one request at a time; the first is the first request after wavegate started (its watches list then); API-server requests from the \`wgbench-wavegate\` FlowSchema counter, CPU from \`/proc/PID/stat\`; benches/bigapps.rs")
$(row waves-timeline.1000 "the same, $(bench_line "$b" $half resources) resources" "p50 ×$(ratio "$(bench_line "$b" $big p50_ms)" "$(bench_line "$b" $half p50_ms)") and CPU ×$(ratio "$(bench_line "$b" $big cpu_ms_per_request)" "$(bench_line "$b" $half cpu_ms_per_request)") from 1,000 to 2,000 resources (2 is linear, 4 quadratic)")
$(row waves-timeline.200 "the same, $(bench_line "$b" bigapps.waves-timeline.200 resources) resources" "the same Application's first tenth")
$(row parent.200x10 "parent of $(bench_line "$b" bigapps.parent.200x10 resources) child Applications of 10 resources" "the parent's view and timeline: each child judged as an Application (synced, healthy, its resources' verdicts)")
$(row parent.100x10 "parent of $(bench_line "$b" bigapps.parent.100x10 resources) child Applications" "p50 ×$(ratio "$(bench_line "$b" bigapps.parent.200x10 p50_ms)" "$(bench_line "$b" bigapps.parent.100x10 p50_ms)"), CPU ×$(ratio "$(bench_line "$b" bigapps.parent.200x10 cpu_ms_per_request)" "$(bench_line "$b" bigapps.parent.100x10 cpu_ms_per_request)") from 100 to 200 children")
$(row applications "\`GET /api/v1/applications\`, $(bench_line "$b" bigapps.applications resources) resources in all Applications" "every Application's view (without timeline), a few at a time; $refreshes requests")
$(row dashboard "dashboard refresh, the same" "what the dashboard does every 2 s: gates and applications, then the waves view of each Application on its page (20 per page, by name: \`big\` and 19 children) 6 at a time (a browser's connections per host); the time until the last answer; $refreshes refreshes")
$(render_row dashboard "chromium: the dashboard, first page" "headless chromium (Debian's) on the dashboard: 20 Applications a page; over 200 resources on the page, each table lists its waves and draws the rows of the open ones (each blocking wave, at first); per refresh, the main thread's busy time (CDP \`Performance.getMetrics\` TaskDuration: parsing, script, style, layout) between the starts of two refreshes, and the longest task (\`longtask\` observer: what a click waits at worst); tests/browser/render-bench.mjs")
$(render_row extension "chromium: the extension's Waves tab, the 2,000-resource Application" "argocd/extension/extension-wavegate.js in the harness (React 18), polled every 5 s (the status panel polls the same view); rows of the open waves only, as on the dashboard; the same counters per poll")

Reading it: the target (warm p95 ≤ 200 ms) is for a release build; rows from a debug build show
the shape, not the speed. Every warm view reads only wavegate's watch cache (0 API-server
requests), the first after start waits for its watches' lists once (one \`--sync-wait\` at most,
never once per resource: reads run 32 at a time under one deadline), and CPU grows linearly
(the ratio rows: 2 is linear, 4 quadratic). Where a view's CPU goes (perf, debug build): each
object read from the cache is converted to JSON whole (\`cache.rs\` \`to_json\`) — the
2,000-resource Application (1.4 MB) once per request, each judged object for the verdict and again
for the timeline — and the answer is serialised (1 MB); \`GET /api/v1/applications\` computes every
Application's whole view to report its health and blocking wave.

Raw output of the run: \`target/bench/$(basename "$out")/\`.
SECTION
)
doc=docs/benchmarks.md
# This section replaces its previous version, in place; the rest of the file is left alone.
SECTION_TEXT=$section awk '
  BEGIN { section = ENVIRON["SECTION_TEXT"] }
  /^## / && replacing { replacing = 0 }
  /^## Big applications/ { replacing = 1; if (!done) { print section; print ""; done = 1 } ; next }
  /^## (Peers side by side|Real Argo CD)/ && !done { print section; print ""; done = 1 }
  !replacing { print }
  END { if (!done) { print ""; print section } }
' "$doc" >"$out/benchmarks.md"
cp "$out/benchmarks.md" "$doc"
printf '%s\n' "$section"
