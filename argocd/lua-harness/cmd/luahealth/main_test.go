package main

import (
	"bytes"
	"strings"
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
	want := luaharness.HealthStatus{Status: "Degraded", Message: "1 of 2 checks healthy; crdb: prod/cockroachdb: split cluster — 2 cluster IDs among 2 pods"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestMissingObjectFileIsAnError(t *testing.T) {
	if _, err := run("../../../resource_customizations/wavegate.dev/WaveGate/health.lua", "does-not-exist.json"); err == nil {
		t.Fatal("want an error for a missing object file")
	}
}

// Batch mode answers each line in order, and a bad line is an answer, not the end.
func TestBatchAnswersEveryLineInOrder(t *testing.T) {
	script := "../../../resource_customizations/wavegate.dev/WaveGate/health.lua"
	in := strings.Join([]string{
		`{"script": "` + script + `", "object": {"metadata": {"name": "g", "namespace": "n", "generation": 2}, "status": {"observedGeneration": 2, "health": {"status": "Healthy", "message": "ok"}}}}`,
		`not json`,
		`{"script": "` + script + `", "object": {"metadata": {"name": "g", "namespace": "n", "generation": 3}, "status": {"observedGeneration": 2, "health": {"status": "Healthy"}}}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := serveBatch(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d answers: %q", len(lines), out.String())
	}
	if lines[0] != `{"status":"Healthy","message":"ok"}` {
		t.Errorf("answer 1: %s", lines[0])
	}
	if !strings.HasPrefix(lines[1], `{"error":"bad request: `) {
		t.Errorf("answer 2: %s", lines[1])
	}
	if !strings.HasPrefix(lines[2], `{"status":"Progressing"`) {
		t.Errorf("answer 3: %s", lines[2])
	}
}
