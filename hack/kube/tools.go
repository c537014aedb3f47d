//go:build tools

// Package tools pins the Kubernetes control-plane commands that
// scripts/control-plane.sh builds (see hack/kube/gen-gomod.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
