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
	if err := writeScripts(&b, checks, "  "); err != nil {
		return "", err
	}
	return b.String(), nil
}

// ArgoCDHelmValues renders the same keys as values for Argo CD installed with the argo-cd Helm
// chart (argoproj/argo-helm): the chart owns argocd-cm and writes each key of `configs.cm` into
// its data as is (templates/_helpers.tpl, "argo-cd.config.cm"), so a patch on top of it would be
// undone by the next chart upgrade. Merge this file's configs.cm into your values.
func ArgoCDHelmValues(checks []HealthCheck) (string, error) {
	var b strings.Builder
	b.WriteString("# Generated from argocd/resource_customizations by `go run ./cmd/gencm` in argocd/lua-harness.\n")
	b.WriteString("# Do not edit: change the health.lua and regenerate (TestArgoCDHelmValuesIsUpToDate checks).\n")
	b.WriteString("#\n# wavegate's health checks for Argo CD installed with the argo-cd Helm chart: merge configs.cm\n")
	b.WriteString("# into the chart's values (helm upgrade argocd argo/argo-cd -n argocd -f argo-cd-values.yaml,\n")
	b.WriteString("# or spec.source.helm.valueFiles of the Application that installs Argo CD). The keys are the\n")
	b.WriteString("# ones argocd-cm-patch.yaml beside this file adds for Argo CD installed with Kustomize.\n")
	b.WriteString("configs:\n  cm:\n")
	if err := writeScripts(&b, checks, "    "); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeScripts(b *strings.Builder, checks []HealthCheck, indent string) error {
	for _, c := range checks {
		if strings.Contains(c.Script, "\t") || strings.Contains(c.Script, "\r") {
			return fmt.Errorf("%s/health.lua: tabs or carriage returns do not survive a YAML literal block", c.Key)
		}
		fmt.Fprintf(b, "%s%s: |\n", indent, c.ConfigMapKey())
		for _, line := range strings.Split(strings.TrimRight(c.Script, "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
			} else {
				b.WriteString(indent + "  " + line + "\n")
			}
		}
	}
	return nil
}
