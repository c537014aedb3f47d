package luaharness

import (
	"strings"
	"testing"
)

func run(t *testing.T, script string) (HealthStatus, error) {
	t.Helper()
	return RunHealth(script, map[string]any{"metadata": map[string]any{"name": "x", "generation": float64(3)}})
}

func TestScriptCallingStringFindFailsInTheArgoCDCMSandbox(t *testing.T) {
	_, err := run(t, `if string.find("wavegate", "gate") then return {status="Healthy"} end`)
	if err == nil || !strings.Contains(err.Error(), "non-table object(nil) with key 'find'") {
		t.Fatalf("string.find must not exist in the argocd-cm sandbox, got err=%v", err)
	}
}

func TestStringMethodSyntaxFailsToo(t *testing.T) {
	// Without OpenString there is no string metatable, so s:find is as absent as string.find.
	_, err := run(t, `local s = "wavegate"; if s:find("gate") then return {status="Healthy"} end`)
	if err == nil {
		t.Fatal(`("…"):find must fail without the string library`)
	}
}

func TestScriptCallingMathFloorFailsInTheArgoCDCMSandbox(t *testing.T) {
	_, err := run(t, `return {status="Healthy", message=tostring(math.floor(obj.metadata.generation))}`)
	if err == nil || !strings.Contains(err.Error(), "non-table object(nil) with key 'floor'") {
		t.Fatalf("math.floor must not exist in the argocd-cm sandbox, got err=%v", err)
	}
}

func TestOnlyBaseTableAndPackageAreGlobal(t *testing.T) {
	got, err := run(t, `
		local absent = {}
		for _, name in ipairs({"string", "math", "io", "os", "debug", "coroutine", "channel"}) do
			if _G[name] ~= nil then table.insert(absent, name) end
		end
		if table.time ~= nil then table.insert(absent, "table.time") end
		return {status="Healthy", message=table.concat(absent, ",")}`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Message != "" {
		t.Fatalf("libraries present that Argo CD does not open for argocd-cm scripts: %s", got.Message)
	}
}

func TestRequireOsGivesOnlyTimeAndDate(t *testing.T) {
	got, err := run(t, `
		local os = require("os")
		local names = {}
		for k, _ in pairs(os) do table.insert(names, k) end
		table.sort(names)
		return {status="Healthy", message=table.concat(names, ",") .. ":" .. tostring(os.time() > 0)}`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Message != "date,time:true" {
		t.Fatalf("require(\"os\") = %q, want date,time", got.Message)
	}
}

func TestBaseConversionsAreAvailableForAnnotationNumbers(t *testing.T) {
	got, err := run(t, `return {status="Healthy", message=tostring(tonumber("3") == obj.metadata.generation)}`)
	if err != nil || got.Message != "true" {
		t.Fatalf("tonumber/tostring must work on annotation strings: %+v %v", got, err)
	}
}

func TestGenerationIsAnIntegerLNumberInMessages(t *testing.T) {
	// JSON numbers arrive as float64; gopher-lua prints integral values without ".0".
	got, err := run(t, `return {status="Progressing", message="generation " .. obj.metadata.generation}`)
	if err != nil || got.Message != "generation 3" {
		t.Fatalf("got %+v %v", got, err)
	}
}

func TestInvalidStatusBecomesUnknownLikeArgoCD(t *testing.T) {
	got, err := run(t, `return {status="Ready", message="x"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got != (HealthStatus{Status: "Unknown", Message: invalidHealthStatus}) {
		t.Fatalf("got %+v", got)
	}
}

func TestNonTableReturnIsAnError(t *testing.T) {
	if _, err := run(t, `return "Healthy"`); err == nil {
		t.Fatal("a script returning a string must be rejected")
	}
}

func TestRunawayScriptIsStoppedByTheDeadline(t *testing.T) {
	if _, err := run(t, `while true do end`); err == nil {
		t.Fatal("an endless loop must be cut off by the one-second deadline")
	}
}

func TestJSONNullArrivesAsNil(t *testing.T) {
	obj, err := ParseObject([]byte(`{"status": null, "spec": {"n": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := RunHealth(`obj = obj; return {status="Healthy", message=tostring(obj.status == nil) .. tostring(obj.spec.n + 1)}`, obj)
	if err != nil || got.Message != "true3" {
		t.Fatalf("got %+v %v", got, err)
	}
}
