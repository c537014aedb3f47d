package luaharness

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// HealthCheck is one folder of resource_customizations: a script and the cases that pin it down.
type HealthCheck struct {
	// Key is Argo CD's override key: "group/Kind", or "Kind" for the core group.
	Key    string
	Dir    string
	Script string
	Tests  []HealthTest
}

// HealthTest is one entry of health_test.yaml, in Argo CD's upstream format.
type HealthTest struct {
	HealthStatus HealthStatus `json:"healthStatus"`
	InputPath    string       `json:"inputPath"`
}

// ConfigMapKey is the argocd-cm data key for this check. Argo CD's convertToOverrideKey
// (util/settings/settings.go) splits the suffix on "_": "group_Kind" → "group/Kind", and a bare
// "Kind" for the core group. "_Service" would become "/Service" and match nothing.
func (c HealthCheck) ConfigMapKey() string {
	return "resource.customizations.health." + strings.ReplaceAll(c.Key, "/", "_")
}

// LoadHealthChecks finds every health.lua under root, in key order. A folder without a
// health_test.yaml, or with no cases in it, is an error: every script ships with its evidence.
func LoadHealthChecks(root string) ([]HealthCheck, error) {
	var checks []HealthCheck
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "health.lua" {
			return err
		}
		dir := filepath.Dir(path)
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		script, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			return fmt.Errorf("%s has no health_test.yaml: %w", rel, err)
		}
		var file struct {
			Tests []HealthTest `json:"tests"`
		}
		if err := yaml.UnmarshalStrict(raw, &file); err != nil {
			return fmt.Errorf("%s/health_test.yaml: %w", rel, err)
		}
		if len(file.Tests) == 0 {
			return fmt.Errorf("%s/health_test.yaml lists no tests", rel)
		}
		checks = append(checks, HealthCheck{
			Key: filepath.ToSlash(rel), Dir: dir, Script: string(script), Tests: file.Tests,
		})
		return nil
	})
	sort.Slice(checks, func(i, j int) bool { return checks[i].Key < checks[j].Key })
	return checks, err
}
