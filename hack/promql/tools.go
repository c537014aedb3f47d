// Package promql checks wavegate's shipped PromQL (deploy/monitoring) with Prometheus's own
// parser and rule validation (github.com/prometheus/prometheus, pinned in go.mod). The test is
// promql_test.go; tests/monitoring/run.sh runs it after saving a real /metrics scrape.
package promql
