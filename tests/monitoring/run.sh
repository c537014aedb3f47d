#!/usr/bin/env bash
# deploy/monitoring against the real thing: `wavegate serve` on the local control plane judges a
# gate that turns Healthy, one whose timeout fires and an annotated Service, answers an ask and
# refuses one; its /metrics scrape is saved, and hack/promql checks that every PromQL expression
# in the PrometheusRule and the Grafana dashboard parses with Prometheus's own parser and reads
# only metrics that scrape exposes. Needs the control plane (scripts/control-plane.sh up).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${TEST_OUTPUT:-$here/test-output}
mkdir -p "$out"
# A free port, not a fixed one: other test runs may share this machine.
port=${WAVEGATE_MONITORING_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
ns=monitoring-$RANDOM$RANDOM
tmp=$(mktemp -d)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
die() { echo "tests/monitoring: $*" >&2; exit 1; }

kubectl apply --server-side -k deploy/crd >/dev/null
kubectl wait --for=condition=Established --timeout=30s crd/wavegates.wavegate.dev >/dev/null
kubectl create namespace "$ns" >/dev/null
kubectl label namespace "$ns" wavegate.dev/test=e2e >/dev/null
kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: $ns, labels: {app: web}}
spec:
  nodeName: wavegate-node
  containers: [{name: main, image: example.invalid/app:1}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: $ns
  annotations: {wavegate.dev/annotate: "true"}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: web-up, namespace: $ns}
spec:
  checks: [{name: web, service: {name: web}}]
---
apiVersion: wavegate.dev/v1alpha1
kind: WaveGate
metadata: {name: db-up, namespace: $ns}
spec:
  timeout: 2s
  checks: [{name: db, service: {name: db}}]
YAML

head -c 24 /dev/urandom | base64 | tr -d '=+/' >"$tmp/token"
cargo build --quiet --bin wavegate
# shellcheck source=tests/private-copy.sh
source tests/private-copy.sh
private_copy target/debug/wavegate "$tmp/wavegate" || die "no private copy of target/debug/wavegate to test (above: why)"
"$tmp/wavegate" serve --listen "127.0.0.1:$port" --namespaces "$ns" --resync 1s \
  --status-validity 4s --annotate --token-file "$tmp/token" >"$out/monitoring-serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
  kill -0 "$serve_pid" 2>/dev/null || die "wavegate serve exited: $(tail -3 "$out/monitoring-serve.log")"
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done

gate_status() {
  kubectl -n "$ns" get wavegate "$1" -o jsonpath='{.status.health.status}' 2>/dev/null || true
}
wait_for() { # gate status
  for _ in $(seq 1 150); do
    [ "$(gate_status "$1")" = "$2" ] && return 0
    sleep 0.2
  done
  die "WaveGate $ns/$1 did not become $2 (is: $(gate_status "$1"))"
}
wait_for web-up Progressing
kubectl -n "$ns" patch pod web-0 --subresource=status --type=merge -p '{"status": {
  "phase": "Running", "podIP": "10.244.31.1", "podIPs": [{"ip": "10.244.31.1"}],
  "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
                 {"type": "PodScheduled", "status": "True"}]}}' >/dev/null
wait_for web-up Healthy
wait_for db-up Degraded

# One ask answered, one refused (no token).
curl -fsS -H "Authorization: Bearer $(cat "$tmp/token")" \
  "http://127.0.0.1:$port/api/v1/health/services/$ns/web" >/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/v1/health/services/$ns/web")
[ "$code" = 401 ] || die "an ask without the token got $code, not 401"

curl -fsS -H "Authorization: Bearer $(cat "$tmp/token")" "http://127.0.0.1:$port/metrics" \
  >"$out/wavegate-metrics.txt"
echo "tests/monitoring: /metrics saved to $out/wavegate-metrics.txt ($(grep -vc '^#' "$out/wavegate-metrics.txt") samples)"

# Same GOCACHE as the other Go tests; the module is small.
(cd hack/promql && WAVEGATE_METRICS="$out/wavegate-metrics.txt" \
  GOCACHE="${WAVEGATE_CACHE:-$HOME/.cache/wavegate}/go-build" go test -count=1 -v ./... 2>&1 |
  tee "$out/promql-test.log" | grep -E '^(=== RUN|--- |ok|FAIL|\s+promql_test)')
