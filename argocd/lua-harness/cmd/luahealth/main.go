// Command luahealth runs one health.lua against one object in Argo CD's argocd-cm sandbox and
// prints the verdict as Argo CD would record it:
//
//	go run ./cmd/luahealth --script ../resource_customizations/wavegate.dev/WaveGate/health.lua --object gate.json
//	{"status":"Healthy","message":"2 of 2 checks healthy"}
//
// --object takes JSON or YAML (kubectl get -o json output works as is); "-" reads stdin.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	luaharness "wavegate.dev/argocd/lua-harness"
)

func main() {
	script := flag.String("script", "", "path to health.lua")
	object := flag.String("object", "", `path to the object (JSON or YAML), or "-" for stdin`)
	flag.Parse()
	if *script == "" || *object == "" {
		flag.Usage()
		os.Exit(2)
	}
	verdict, err := run(*script, *object)
	if err != nil {
		fmt.Fprintln(os.Stderr, "luahealth:", err)
		os.Exit(1)
	}
	// Messages quote objects and selectors verbatim: keep <, > and & readable.
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(verdict); err != nil {
		fmt.Fprintln(os.Stderr, "luahealth:", err)
		os.Exit(1)
	}
}

func run(scriptPath, objectPath string) (luaharness.HealthStatus, error) {
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		return luaharness.HealthStatus{}, err
	}
	var raw []byte
	if objectPath == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(objectPath)
	}
	if err != nil {
		return luaharness.HealthStatus{}, err
	}
	obj, err := luaharness.ParseObject(raw)
	if err != nil {
		return luaharness.HealthStatus{}, fmt.Errorf("parsing %s: %w", objectPath, err)
	}
	return luaharness.RunHealth(string(script), obj)
}
