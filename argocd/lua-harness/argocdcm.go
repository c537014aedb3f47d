package luaharness

import (
	"fmt"
	"strings"
)

// ArgoCDCMPatch renders the argocd-cm patch that installs every check: one
// resource.customizations.health.<group>_<Kind> key per script, the script text as a literal
// block so the ConfigMap reads like the .lua file it came from.
func ArgoCDCMPatch(checks []HealthCheck) (string, error) {
	var b strings.Builder
	b.WriteString("# Generated from argocd/resource_customizations by `go run ./cmd/gencm` in argocd/lua-harness.\n")
	b.WriteString("# Do not edit: change the health.lua and regenerate (TestArgoCDCMPatchIsUpToDate checks).\n")
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n")
	for _, c := range checks {
		if strings.Contains(c.Script, "\t") || strings.Contains(c.Script, "\r") {
			return "", fmt.Errorf("%s/health.lua: tabs or carriage returns do not survive a YAML literal block", c.Key)
		}
		fmt.Fprintf(&b, "  %s: |\n", c.ConfigMapKey())
		for _, line := range strings.Split(strings.TrimRight(c.Script, "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
			} else {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	return b.String(), nil
}
