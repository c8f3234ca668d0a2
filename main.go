// Command psgraph trains models written as operator graphs, on one node or
// as a parameter-server job of trainers and pservers running subgraphs of
// the same graph.
package main

import (
	"os"

	"github.com/psgraph/psgraph/cmd"
	"github.com/psgraph/psgraph/exec/launch"
)

func main() {
	code := cmd.Main(os.Args[1:], os.Stdout, os.Stderr)
	launch.ReportPeakRSS() // to a parent that asked (psgraph train)
	os.Exit(code)
}
