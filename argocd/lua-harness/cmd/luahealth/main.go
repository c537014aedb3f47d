// Command luahealth runs one health.lua against one object in Argo CD's argocd-cm sandbox and
// prints the verdict as Argo CD would record it:
//
//	go run ./cmd/luahealth --script ../resource_customizations/wavegate.dev/WaveGate/health.lua --object gate.json
//	{"status":"Healthy","message":"all 2 checks healthy"}
//
// --object takes JSON or YAML (kubectl get -o json output works as is); "-" reads stdin.
//
// With --batch it answers many questions in one process, for tests that run thousands of objects
// (wavegate's tests/offline/parity.rs): each stdin line is a JSON request {"script": path, "object": {...}}
// and each gets one stdout line, the verdict or {"error": "..."}, in order. Scripts are read once.
package main

import (
	"bufio"
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
	batch := flag.Bool("batch", false, "answer JSON-line requests on stdin, one JSON line each")
	flag.Parse()
	if *batch {
		if err := serveBatch(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "luahealth:", err)
			os.Exit(1)
		}
		return
	}
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

type batchRequest struct {
	Script string         `json:"script"`
	Object map[string]any `json:"object"`
}

type batchAnswer struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

// serveBatch answers one request per line until EOF. A bad request or a failing script is an
// answer ({"error": ...}), not the end of the batch; only I/O errors end it.
func serveBatch(in io.Reader, out io.Writer) error {
	scripts := map[string]string{}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 1<<20), 64<<20)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for scanner.Scan() {
		var answer batchAnswer
		var req batchRequest
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			answer.Error = "bad request: " + err.Error()
		} else if verdict, err := runCached(scripts, req); err != nil {
			answer.Error = err.Error()
		} else {
			answer.Status, answer.Message = verdict.Status, verdict.Message
		}
		if err := enc.Encode(answer); err != nil {
			return err
		}
		// Flush per answer: the caller may wait for each before sending the next.
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return scanner.Err()
}

func runCached(scripts map[string]string, req batchRequest) (luaharness.HealthStatus, error) {
	script, ok := scripts[req.Script]
	if !ok {
		raw, err := os.ReadFile(req.Script)
		if err != nil {
			return luaharness.HealthStatus{}, err
		}
		script = string(raw)
		scripts[req.Script] = script
	}
	// Round-trip through JSON so numbers are float64, as Argo CD holds them.
	raw, err := json.Marshal(req.Object)
	if err != nil {
		return luaharness.HealthStatus{}, err
	}
	obj, err := luaharness.ParseObject(raw)
	if err != nil {
		return luaharness.HealthStatus{}, err
	}
	return luaharness.RunHealth(script, obj)
}
