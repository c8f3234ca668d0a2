package dsl_test

import (
	"fmt"
	"strings"

	"github.com/psgraph/psgraph/dsl"
)

// Marshal writes one flow-style line per variable and op.
func ExampleMarshal() {
	g, err := dsl.Load("../examples/iris.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := dsl.Marshal(g)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "W2@m") && strings.Contains(line, "type: scale") || strings.HasPrefix(line, "  W1:") {
			fmt.Println(line)
			break
		}
	}
	// Output:
	//   W1: {shape: [4, 16], init: {type: xavier_uniform, seed: 1}}
}
