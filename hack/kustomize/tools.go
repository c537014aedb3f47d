//go:build tools

// Package tools pins kustomize's command (sigs.k8s.io/kustomize/kustomize/v5) for
// scripts/tools.sh, which builds it into ~/.cache/wavegate/bin. Argo CD's repo-server runs the
// `kustomize` binary for Kustomize sources (argo-cd util/kustomize/kustomize.go, getBinaryPath),
// and its image ships the version in hack/tool-versions.sh (kustomize5_version=5.7.0 for v3.2).
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
