//go:build tools

// Package tools pins the Argo CD multi-call binary that scripts/argocd.sh builds
// (see hack/argocd/gen-gomod.sh).
package tools

import (
	_ "github.com/argoproj/argo-cd/v3/cmd"
)
