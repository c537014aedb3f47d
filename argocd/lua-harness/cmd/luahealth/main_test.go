package main

import (
	"testing"

	luaharness "wavegate.dev/argocd/lua-harness"
)

// The end-to-end test feeds a live WaveGate through this command; the verdict must be
// wavegate's status.health, unchanged.
func TestLiveShapedWaveGateVerdictIsWavegatesOwn(t *testing.T) {
	got, err := run("../../../resource_customizations/wavegate.dev/WaveGate/health.lua",
		"../../../resource_customizations/wavegate.dev/WaveGate/testdata/degraded-split-cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := luaharness.HealthStatus{Status: "Degraded", Message: "crdb: prod/cockroachdb: split cluster, 2 cluster IDs among 2 pods"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestMissingObjectFileIsAnError(t *testing.T) {
	if _, err := run("../../../resource_customizations/wavegate.dev/WaveGate/health.lua", "does-not-exist.json"); err == nil {
		t.Fatal("want an error for a missing object file")
	}
}
