// Command psgraph trains models written as operator graphs, on one node or
// as a parameter-server job of trainers and pservers running subgraphs of
// the same graph.
package main

import (
	"os"

	"github.com/psgraph/psgraph/cmd"
)

func main() { os.Exit(cmd.Process()) }
