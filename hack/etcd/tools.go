//go:build tools

// Package tools pins etcd's server command (go.etcd.io/etcd/server/v3 is
// itself the `etcd` main package; it calls etcdmain.Main) for
// scripts/control-plane.sh. Kept apart from hack/kube so that etcd's and
// Kubernetes' dependency versions never have to agree.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
