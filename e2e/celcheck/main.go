// Command celcheck compiles webhook matchConditions with the API server's own CEL compiler and
// evaluates them against sample objects. Input (stdin, JSON):
//
//	{"expressions": {"NAME": "EXPR"}, "objects": {"NAME": {...}}, "requests": {"NAME": {...}}}
//
// `requests` (optional) gives an object's admission request (`request.userInfo`, ...); an object
// without one is evaluated with an empty request. `oldObjects` (optional) gives an object's
// `oldObject` (an UPDATE's stored object); without one it is null, as on CREATE.
//
// Output (stdout, JSON): {"NAME": {"error": "...", "results": {"OBJECT": true|false|"error: ..."}}}
package main

import (
	"encoding/json"
	"fmt"
	"os"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

type input struct {
	Expressions map[string]string         `json:"expressions"`
	Objects     map[string]map[string]any `json:"objects"`
	Requests    map[string]map[string]any `json:"requests"`
	OldObjects  map[string]map[string]any `json:"oldObjects"`
}

type outcome struct {
	Error   string         `json:"error,omitempty"`
	Results map[string]any `json:"results,omitempty"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "celcheck: bad input:", err)
		os.Exit(2)
	}
	compiler := plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	out := map[string]outcome{}
	for name, expression := range in.Expressions {
		compiled := compiler.CompileCELExpression(
			&matchconditions.MatchCondition{Expression: expression},
			plugincel.OptionalVariableDeclarations{HasAuthorizer: true},
			environment.NewExpressions,
		)
		if compiled.Error != nil {
			out[name] = outcome{Error: compiled.Error.Error()}
			continue
		}
		results := map[string]any{}
		for objectName, object := range in.Objects {
			request := in.Requests[objectName]
			if request == nil {
				request = map[string]any{}
			}
			activation := map[string]any{"object": object, "request": request, "oldObject": nil}
			if oldObject, found := in.OldObjects[objectName]; found {
				activation["oldObject"] = oldObject
			}
			value, _, err := compiled.Program.Eval(activation)
			if err != nil {
				results[objectName] = "error: " + err.Error()
			} else {
				results[objectName] = value.Value()
			}
		}
		out[name] = outcome{Results: results}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
}
