package promql

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

var monitoring = filepath.Join("..", "..", "deploy", "monitoring")

var promql = parser.NewParser(parser.Options{})

// Grafana's variables, replaced by what Grafana would put there before Prometheus parses it.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$namespace", ".*",
)

type query struct{ where, expr string }

// The rule groups of the PrometheusRule, validated the way Prometheus loads a rule file
// (rulefmt.Parse: expressions, durations, label and annotation templates).
func ruleQueries(t *testing.T) []query {
	raw, err := os.ReadFile(filepath.Join(monitoring, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       yaml.Node
	}
	if err := yaml.Unmarshal(raw, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" {
		t.Fatalf("not a PrometheusRule: %s %s", cr.APIVersion, cr.Kind)
	}
	spec, err := yaml.Marshal(&cr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.Default())
	for _, e := range errs {
		t.Errorf("prometheusrule.yaml: %v", e)
	}
	if groups == nil {
		t.FailNow()
	}
	var out []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	return out
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// Every `expr` in the dashboard, and the selector inside each label_values() variable query.
func dashboardQueries(t *testing.T) []query {
	raw, err := os.ReadFile(filepath.Join(monitoring, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var out []query
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && k == "expr" {
					out = append(out, query{path, grafanaVars.Replace(s)})
				} else if s, ok := c.(string); ok && k == "definition" {
					m := labelValues.FindStringSubmatch(s)
					if m == nil {
						t.Errorf("%s: variable query %q is not label_values(selector, label)", path, s)
						continue
					}
					out = append(out, query{path + " (variable)", m[1]})
				} else {
					walk(path+"."+k, c)
				}
			}
		case []any:
			for i, c := range v {
				title := ""
				if m, ok := c.(map[string]any); ok {
					title, _ = m["title"].(string)
				}
				walk(fmt.Sprintf("%s[%d %s]", path, i, title), c)
			}
		}
	}
	walk("dashboard", dash)
	return out
}

// Metric names the expression reads.
func metricNames(t *testing.T, q query) []string {
	expr, err := promql.ParseExpr(q.expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
		return nil
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: %q selects series without naming a metric", q.where, q.expr)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// Sample names in a Prometheus/OpenMetrics text scrape.
func exposed(t *testing.T) map[string]bool {
	path := os.Getenv("WAVEGATE_METRICS")
	if path == "" {
		t.Fatal("WAVEGATE_METRICS must name a /metrics scrape saved after an end-to-end run (tests/monitoring/run.sh)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]
		names[name] = true
	}
	if len(names) == 0 {
		t.Fatalf("%s holds no samples", path)
	}
	return names
}

func TestShippedPromQLParsesAndReadsOnlyExposedMetrics(t *testing.T) {
	queries := append(ruleQueries(t), dashboardQueries(t)...)
	if len(queries) < 10 {
		t.Fatalf("found only %d expressions; the files changed shape?", len(queries))
	}
	have := exposed(t)
	used := map[string]bool{}
	for _, q := range queries {
		for _, name := range metricNames(t, q) {
			used[name] = true
			if !have[name] {
				t.Errorf("%s: %q reads %s, which /metrics does not expose", q.where, q.expr, name)
			}
		}
	}
	var list []string
	for n := range used {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d expressions; metrics they read: %s", len(queries), strings.Join(list, " "))
}

// The checker itself: a broken expression fails to parse, and a misspelt metric is found by
// name (the exposure check above then fails on it).
func TestCheckerCatchesTyposAndSyntaxErrors(t *testing.T) {
	if _, err := promql.ParseExpr(`sum by (resource) (rate(wavegate_watch_errors_total[5m]) > 0`); err == nil {
		t.Error("an unbalanced parenthesis parsed")
	}
	expr, err := promql.ParseExpr(`histogram_quantile(0.95, sum by (le) (rate(wavegate_probe_seconds_bucket[5m])))`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) != 1 || names[0] != "wavegate_probe_seconds_bucket" {
		t.Errorf("selectors found: %v", names)
	}
}
