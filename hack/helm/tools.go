//go:build tools

// Package tools pins Helm's command (helm.sh/helm/v3/cmd/helm) for scripts/helm.sh, which builds
// it into ~/.cache/wavegate/bin so tests/offline/helm_chart.rs can render deploy/helm/wavegate with the
// real Helm. Kept apart from hack/kube so that Helm's and Kubernetes' dependency versions never
// have to agree.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
