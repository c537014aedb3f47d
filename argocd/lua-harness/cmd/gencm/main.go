// Command gencm writes argocd/argocd-cm/argocd-cm-patch.yaml (Argo CD installed with Kustomize
// or plain manifests) and argocd/argocd-cm/argo-cd-values.yaml (the argo-cd Helm chart's
// configs.cm) from the health scripts.
//
//	cd argocd/lua-harness && go run ./cmd/gencm
package main

import (
	"flag"
	"fmt"
	"os"

	luaharness "wavegate.dev/argocd/lua-harness"
)

func main() {
	root := flag.String("root", "../resource_customizations", "folder holding <group>/<Kind>/health.lua")
	out := flag.String("out", "../argocd-cm/argocd-cm-patch.yaml", "patch file to write")
	values := flag.String("values", "../argocd-cm/argo-cd-values.yaml", "argo-cd Helm chart values file to write")
	flag.Parse()
	if err := run(*root, *out, *values); err != nil {
		fmt.Fprintln(os.Stderr, "gencm:", err)
		os.Exit(1)
	}
}

func run(root, out, values string) error {
	checks, err := luaharness.LoadHealthChecks(root)
	if err != nil {
		return err
	}
	patch, err := luaharness.ArgoCDCMPatch(checks)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(patch), 0o644); err != nil {
		return err
	}
	helmValues, err := luaharness.ArgoCDHelmValues(checks)
	if err != nil {
		return err
	}
	return os.WriteFile(values, []byte(helmValues), 0o644)
}
