package luaharness

import (
	"os"
	"path/filepath"
	"testing"
)

const customizations = "../resource_customizations"

// TestHealthScripts runs every case of every health_test.yaml in the argocd-cm sandbox, the way
// Argo CD's own util/lua/health_test.go runs its built-in scripts — except that Argo CD tests
// those with UseOpenLibs: true, which would hide a script that needs string or math.
func TestHealthScripts(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) == 0 {
		t.Fatalf("no health.lua found under %s", customizations)
	}
	for _, check := range checks {
		for _, tc := range check.Tests {
			check, tc := check, tc
			t.Run(check.Key+"/"+tc.InputPath, func(t *testing.T) {
				t.Parallel()
				raw, err := os.ReadFile(filepath.Join(check.Dir, tc.InputPath))
				if err != nil {
					t.Fatal(err)
				}
				obj, err := ParseObject(raw)
				if err != nil {
					t.Fatalf("parsing %s: %v", tc.InputPath, err)
				}
				got, err := RunHealth(check.Script, obj)
				if err != nil {
					t.Fatalf("script failed in the argocd-cm sandbox: %v", err)
				}
				if got != tc.HealthStatus {
					t.Errorf("got  %+v\nwant %+v", got, tc.HealthStatus)
				}
			})
		}
	}
}

// TestEveryTestdataFileIsUsed keeps testdata/ honest: an object nobody asserts on is noise.
func TestEveryTestdataFileIsUsed(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range checks {
		used := map[string]bool{}
		for _, tc := range check.Tests {
			used[filepath.Clean(tc.InputPath)] = true
		}
		files, _ := filepath.Glob(filepath.Join(check.Dir, "testdata", "*.yaml"))
		for _, f := range files {
			rel, _ := filepath.Rel(check.Dir, f)
			if !used[rel] {
				t.Errorf("%s: %s is not referenced by health_test.yaml", check.Key, rel)
			}
		}
	}
}
