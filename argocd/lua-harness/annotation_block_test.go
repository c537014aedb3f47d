package luaharness

import (
	"strings"
	"testing"
)

const (
	blockBegin = "-- BEGIN wavegate annotation mode"
	blockEnd   = "-- END wavegate annotation mode"
)

// annotationModeKinds are the kinds contracts.md puts under annotation mode.
var annotationModeKinds = []string{
	"Service",
	"argoproj.io/Application",
	"crdb.cockroachlabs.com/CrdbCluster",
	"postgresql.cnpg.io/Database",
}

// Scripts in argocd-cm cannot require a shared file, so the annotation-mode block is repeated
// in each script; this test is what keeps the copies one rule.
func TestAnnotationModeBlockIsIdenticalInEveryScript(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]HealthCheck{}
	for _, c := range checks {
		byKey[c.Key] = c
	}
	var first, firstKey string
	for _, key := range annotationModeKinds {
		check, ok := byKey[key]
		if !ok {
			t.Errorf("%s: no health.lua", key)
			continue
		}
		start := strings.Index(check.Script, blockBegin)
		end := strings.Index(check.Script, blockEnd)
		if start < 0 || end < start {
			t.Errorf("%s: annotation-mode block missing", key)
			continue
		}
		block := check.Script[start : end+len(blockEnd)]
		if first == "" {
			first, firstKey = block, key
		} else if block != first {
			t.Errorf("%s: annotation-mode block differs from %s's", key, firstKey)
		}
	}
}
