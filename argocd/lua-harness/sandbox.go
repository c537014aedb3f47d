// Package luaharness runs health.lua scripts the way Argo CD runs a health check it loaded from
// argocd-cm, so a script that passes here behaves the same inside the application controller.
//
// The sandbox is rebuilt from Argo CD's util/lua/lua.go (VM.runLua, ExecuteHealthLua,
// decodeValue) and util/lua/oslib_safe.go. A script from argocd-cm runs with
// ResourceOverride.UseOpenLibs false (the default), which means:
//
//   - lua.NewState(lua.Options{SkipOpenLibs: true}), then only package, base and table are
//     opened: no string, no math, no io, no full os, no debug, no coroutine.
//   - OpenSafeOs is then called, but it registers its functions under lua.TabLibName ("table"),
//     which is already loaded, so it adds nothing: the global `os` stays nil. Only
//     `require("os")` works, through l.PreloadModule("os", SafeOsLoader), and yields time/date.
//   - A one-second context deadline bounds each run.
//   - The object reaches Lua through decodeValue: maps to tables (RawSetH), arrays to tables
//     (Append), numbers to LNumber (float64), JSON null to nil.
//   - The returned table is JSON-encoded and decoded into {status, message}; a status outside
//     the six Argo CD knows becomes Unknown with "Lua returned an invalid health status".
package luaharness

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// HealthStatus is Argo CD's health verdict as a script returns it.
type HealthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// invalidHealthStatus is the message Argo CD gives a script that returns an unknown status.
const invalidHealthStatus = "Lua returned an invalid health status"

// scriptDeadline is Argo CD's per-run limit (context.WithTimeout(…, 1*time.Second) in runLua).
const scriptDeadline = time.Second

var validStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true,
	"Suspended": true, "Missing": true, "Unknown": true,
}

// newSandbox builds a VM with exactly the libraries an argocd-cm health script gets.
func newSandbox() *lua.LState {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, openSafeOs},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			panic(fmt.Sprintf("opening %s: %v", lib.name, err))
		}
	}
	l.PreloadModule(lua.OsLibName, safeOsLoader)
	return l
}

// RunHealth runs script against obj (a decoded JSON object) and returns the verdict as Argo CD
// would record it.
func RunHealth(script string, obj map[string]any) (HealthStatus, error) {
	l := newSandbox()
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), scriptDeadline)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return HealthStatus{}, err
	}
	ret := l.Get(-1)
	table, ok := ret.(*lua.LTable)
	if !ok {
		return HealthStatus{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	encoded, err := json.Marshal(fromLua(table))
	if err != nil {
		return HealthStatus{}, err
	}
	var hs HealthStatus
	if err := json.Unmarshal(encoded, &hs); err != nil {
		return HealthStatus{}, fmt.Errorf("health script returned %s: %w", encoded, err)
	}
	if !validStatuses[hs.Status] {
		return HealthStatus{Status: "Unknown", Message: invalidHealthStatus}, nil
	}
	return hs, nil
}

// ParseObject turns JSON or YAML bytes into the map Argo CD holds (numbers as float64).
func ParseObject(data []byte) (map[string]any, error) {
	obj := map[string]any{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// toLua mirrors Argo CD's decodeValue.
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(toLua(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), toLua(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// fromLua converts a returned table for JSON encoding, as layeh.com/gopher-json does: a table
// with only a sequence becomes an array, anything else an object keyed by string.
func fromLua(value lua.LValue) any {
	switch v := value.(type) {
	case lua.LBool:
		return bool(v)
	case lua.LNumber:
		return float64(v)
	case lua.LString:
		return string(v)
	case *lua.LTable:
		if n := v.MaxN(); n > 0 {
			arr := make([]any, 0, n)
			for i := 1; i <= n; i++ {
				arr = append(arr, fromLua(v.RawGetInt(i)))
			}
			return arr
		}
		m := map[string]any{}
		v.ForEach(func(k, item lua.LValue) { m[k.String()] = fromLua(item) })
		return m
	}
	return nil
}
