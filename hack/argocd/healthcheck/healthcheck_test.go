// Package healthcheck judges wavegate's argocd-cm patch with Argo CD's own code, not a replica:
// the shipped argocd/argocd-cm/argocd-cm-patch.yaml is read by Argo CD's SettingsManager (the
// same key parsing the application-controller does), and every testdata object under
// argocd/resource_customizations is evaluated by gitops-engine's health.GetResourceHealth with
// Argo CD's lua.ResourceHealthOverrides — the call controller/health.go makes — so the argocd-cm
// sandbox (no string/math unless useOpenLibs), deletion handling and the object conversion are
// Argo CD's. The gopher-lua harness in argocd/lua-harness stays as the fast replica.
package healthcheck

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

// The project root: WAVEGATE_REPO, since the test runs in a release's build module assembled
// outside the tree (hack/argocd/versions.sh, `scripts/argocd.sh test` sets it); the relative
// default serves an editor that opens hack/argocd/healthcheck in place. The gitops-engine import
// is rewritten there to the release's own module path.
var (
	repo           = repoRoot()
	patchFile      = filepath.Join(repo, "argocd", "argocd-cm", "argocd-cm-patch.yaml")
	customizations = filepath.Join(repo, "argocd", "resource_customizations")
)

func repoRoot() string {
	if r := os.Getenv("WAVEGATE_REPO"); r != "" {
		return r
	}
	return filepath.Join("..", "..", "..")
}

// The SettingsManager logs each informer start at info level; keep the test output to findings.
func TestMain(m *testing.M) {
	log.SetLevel(log.WarnLevel)
	os.Exit(m.Run())
}

// healthTest is Argo CD's health_test.yaml format (resource_customizations upstream).
type healthTest struct {
	Tests []struct {
		HealthStatus struct {
			Status  health.HealthStatusCode `json:"status"`
			Message string                  `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	} `json:"tests"`
}

// overridesFromShippedPatch loads the committed argocd-cm patch into a fake API server and reads
// it back through Argo CD's SettingsManager, as the application-controller does.
func overridesFromShippedPatch(t *testing.T) map[string]v1alpha1.ResourceOverride {
	t.Helper()
	raw, err := os.ReadFile(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		t.Fatalf("%s: %v", patchFile, err)
	}
	if cm.Name != "argocd-cm" || cm.Namespace != "argocd" {
		t.Fatalf("%s patches %s/%s, want argocd/argocd-cm", patchFile, cm.Namespace, cm.Name)
	}
	// Argo CD's own labels select its ConfigMaps and Secrets; the patch merges into an
	// installed argocd-cm that carries them.
	cm.Labels = map[string]string{"app.kubernetes.io/part-of": "argocd"}
	secret := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: "argocd", Labels: cm.Labels},
		Data:       map[string][]byte{"server.secretkey": []byte("test")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	mgr := settings.NewSettingsManager(ctx, fake.NewClientset(&cm, &secret), "argocd")
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		t.Fatalf("Argo CD's settings code rejects %s: %v", patchFile, err)
	}
	return overrides
}

func loadObject(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

func TestShippedPatchCarriesEveryScriptUnderArgoCDsKey(t *testing.T) {
	overrides := overridesFromShippedPatch(t)
	dirs, err := filepath.Glob(filepath.Join(customizations, "*", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	grouped, err := filepath.Glob(filepath.Join(customizations, "*", "*", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, grouped...)
	if len(dirs) == 0 {
		t.Fatalf("no health.lua under %s", customizations)
	}
	for _, script := range dirs {
		rel, _ := filepath.Rel(customizations, filepath.Dir(script))
		// Argo CD's key: "group/Kind", or the bare Kind for the core group.
		o, ok := overrides[rel]
		if !ok || o.HealthLua == "" {
			t.Errorf("Argo CD reads no health.lua for %s from the patch (keys: %v)", rel, keys(overrides))
			continue
		}
		want, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		if o.HealthLua != string(want) {
			t.Errorf("Argo CD reads a different script for %s than %s", rel, script)
		}
		if o.UseOpenLibs {
			t.Errorf("%s: useOpenLibs is on; the scripts are written for the default sandbox", rel)
		}
	}
}

func TestEveryTestdataObjectThroughArgoCDsHealthPath(t *testing.T) {
	overrides := lua.ResourceHealthOverrides(overridesFromShippedPatch(t))
	files, err := filepath.Glob(filepath.Join(customizations, "*", "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	grouped, err := filepath.Glob(filepath.Join(customizations, "*", "*", "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, grouped...)
	cases := 0
	for _, file := range files {
		dir := filepath.Dir(file)
		rel, _ := filepath.Rel(customizations, dir)
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var ht healthTest
		if err := yaml.UnmarshalStrict(raw, &ht); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, tc := range ht.Tests {
			cases++
			t.Run(rel+"/"+tc.InputPath, func(t *testing.T) {
				obj := loadObject(t, filepath.Join(dir, tc.InputPath))
				if _, ok := overrides[lua.GetConfigMapKey(obj.GroupVersionKind())]; !ok {
					t.Fatalf("no override under Argo CD's key %q for %s", lua.GetConfigMapKey(obj.GroupVersionKind()), obj.GroupVersionKind())
				}
				got, err := health.GetResourceHealth(obj, overrides)
				if err != nil {
					t.Fatalf("Argo CD's health path failed: %v", err)
				}
				if got == nil {
					t.Fatal("Argo CD's health path returned no health")
				}
				if got.Status != tc.HealthStatus.Status || got.Message != tc.HealthStatus.Message {
					t.Errorf("Argo CD says %s %q\nhealth_test.yaml expects %s %q",
						got.Status, got.Message, tc.HealthStatus.Status, tc.HealthStatus.Message)
				}
			})
		}
	}
	if cases == 0 {
		t.Fatalf("no health_test.yaml cases under %s", customizations)
	}
	t.Logf("%d cases from %d health_test.yaml files judged by Argo CD's own health path", cases, len(files))
}

// gitops-engine answers "Pending deletion" before any script runs: a gate being deleted holds
// its wave no matter what its status says.
func TestDeletedObjectIsPendingDeletionBeforeAnyScript(t *testing.T) {
	overrides := lua.ResourceHealthOverrides(overridesFromShippedPatch(t))
	obj := loadObject(t, filepath.Join(customizations, "wavegate.dev", "WaveGate", "testdata", "healthy.yaml"))
	before, err := health.GetResourceHealth(obj, overrides)
	if err != nil || before == nil || before.Status != health.HealthStatusHealthy {
		t.Fatalf("healthy.yaml should be Healthy first, got %v, %v", before, err)
	}
	now := metav1.Now()
	obj.SetDeletionTimestamp(&now)
	got, err := health.GetResourceHealth(obj, overrides)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != health.HealthStatusProgressing || got.Message != "Pending deletion" {
		t.Errorf("a WaveGate being deleted is %s %q, want Progressing \"Pending deletion\"", got.Status, got.Message)
	}
}

func keys(m map[string]v1alpha1.ResourceOverride) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// What the release's own bundled CNPG Database check says on each of wavegate's Database
// testdata objects, with no argocd-cm at all. Argo CD 3.6 bundles one
// (resource_customizations/postgresql.cnpg.io/Database/health.lua, argo-cd #29511); 3.4 and 3.5
// have none, so there a Database has no health and never holds a wave. wavegate's argocd-cm key
// replaces the bundled script on every release; docs/argocd.md says where the two differ and why
// wavegate keeps its own. A release that changes its rules fails here instead of silently.
var bundledDatabase = map[string]struct {
	status  health.HealthStatusCode
	message string
}{
	// wavegate's verdict in annotation mode: the bundled script never reads it.
	"annotated-degraded.yaml":                       {health.HealthStatusHealthy, ""},
	"annotated-degraded-current.yaml":               {health.HealthStatusDegraded, `role "forgejo" does not exist`},
	"annotated-degraded-cluster-deleted-since.yaml": {health.HealthStatusProgressing, "cluster resource has been deleted, skipping reconciliation"},
	"annotated-no-verdict.yaml":                     {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	"annotated-stale-generation.yaml":               {health.HealthStatusHealthy, ""},
	"opt-in-removed.yaml":                           {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	// CNPG's own status alone.
	"no-status.yaml":                  {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	"empty-status.yaml":               {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	"stale-generation.yaml":           {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	"applied.yaml":                    {health.HealthStatusHealthy, ""},
	"applied-unknown.yaml":            {health.HealthStatusProgressing, "Waiting for CloudNativePG to reconcile Database"},
	"applied-without-generation.yaml": {health.HealthStatusHealthy, ""},
	"not-applied.yaml":                {health.HealthStatusDegraded, `while creating database "forgejo": role "forgejo" does not exist`},
}

func TestBundledDatabaseCheckBesideWavegates(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(customizations, "postgresql.cnpg.io", "Database", "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Database testdata (%v)", err)
	}
	// No argocd-cm: what the release bundles, and nothing else.
	none := lua.ResourceHealthOverrides{}
	script, _, err := lua.VM{}.GetHealthScript(loadObject(t, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	bundles := script != ""
	t.Logf("this release bundles a Database health check: %v", bundles)
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			got, err := health.GetResourceHealth(loadObject(t, file), none)
			if err != nil {
				t.Fatalf("Argo CD's health path failed: %v", err)
			}
			if !bundles {
				if got != nil {
					t.Fatalf("no bundled script, yet Argo CD says %s %q", got.Status, got.Message)
				}
				return
			}
			want, ok := bundledDatabase[name]
			if !ok {
				t.Fatalf("%s is not in bundledDatabase: Argo CD says %s %q (add it, and to docs/argocd.md if it differs from wavegate's)", name, got.Status, got.Message)
			}
			if got == nil || got.Status != want.status || got.Message != want.message {
				t.Errorf("the bundled Database check says %v\nwant %s %q", got, want.status, want.message)
			}
		})
	}
}
