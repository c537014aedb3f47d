package luaharness

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

const committedPatch = "../argocd-cm/argocd-cm-patch.yaml"

func TestArgoCDCMPatchIsUpToDate(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ArgoCDCMPatch(checks)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committedPatch)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run `go run ./cmd/gencm` in argocd/lua-harness and commit the result", committedPatch)
	}
}

// The patch must hand Argo CD each script byte for byte, under the key Argo CD looks up.
func TestArgoCDCMPatchCarriesEachScriptUnderItsKey(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(committedPatch)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind     string            `json:"kind"`
		Metadata map[string]string `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata["name"] != "argocd-cm" || cm.Metadata["namespace"] != "argocd" {
		t.Fatalf("patch targets %s %s/%s, want ConfigMap argocd/argocd-cm", cm.Kind, cm.Metadata["namespace"], cm.Metadata["name"])
	}
	if len(cm.Data) != len(checks) {
		t.Errorf("patch has %d keys, there are %d scripts", len(cm.Data), len(checks))
	}
	for _, c := range checks {
		if cm.Data[c.ConfigMapKey()] != c.Script {
			t.Errorf("%s does not hold %s/health.lua verbatim", c.ConfigMapKey(), c.Key)
		}
	}
}

func TestCoreGroupKeyHasNoUnderscorePrefix(t *testing.T) {
	// settings.go convertToOverrideKey("_Service") yields "/Service", which matches nothing.
	core := HealthCheck{Key: "Service"}
	if got := core.ConfigMapKey(); got != "resource.customizations.health.Service" {
		t.Fatalf("core key = %q", got)
	}
	grouped := HealthCheck{Key: "postgresql.cnpg.io/Database"}
	if got := grouped.ConfigMapKey(); got != "resource.customizations.health.postgresql.cnpg.io_Database" {
		t.Fatalf("grouped key = %q", got)
	}
}
