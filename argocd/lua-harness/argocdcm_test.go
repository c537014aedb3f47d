package luaharness

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

const committedPatch = "../argocd-cm/argocd-cm-patch.yaml"
const committedHelmValues = "../argocd-cm/argo-cd-values.yaml"

func TestArgoCDHelmValuesIsUpToDate(t *testing.T) {
	checks, err := LoadHealthChecks(customizations)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ArgoCDHelmValues(checks)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committedHelmValues)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run `go run ./cmd/gencm` in argocd/lua-harness and commit the result", committedHelmValues)
	}
}

// The argo-cd chart copies configs.cm into argocd-cm's data key by key: the values must carry
// exactly the patch's keys and scripts, so both install paths give Argo CD the same checks.
func TestArgoCDHelmValuesCarryThePatchKeys(t *testing.T) {
	rawPatch, err := os.ReadFile(committedPatch)
	if err != nil {
		t.Fatal(err)
	}
	rawValues, err := os.ReadFile(committedHelmValues)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	var values struct {
		Configs struct {
			CM map[string]string `json:"cm"`
		} `json:"configs"`
	}
	if err := yaml.Unmarshal(rawPatch, &cm); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(rawValues, &values); err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) == 0 || len(values.Configs.CM) != len(cm.Data) {
		t.Fatalf("values have %d configs.cm keys, the patch %d data keys", len(values.Configs.CM), len(cm.Data))
	}
	for k, v := range cm.Data {
		if values.Configs.CM[k] != v {
			t.Errorf("configs.cm[%q] differs from the patch's data[%q]", k, k)
		}
	}
}

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
