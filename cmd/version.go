package cmd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/exec/blas"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print psgraph's version and the CPU kernels it runs",
		Long: `Print psgraph's version, its Go version and platform, and the CPU kernels
this machine runs: the element-wise kernels' vector path (avx512, avx2 or go)
and the matrix multiply's (avx512, avx2 or generic). GODEBUG=cpu.avx512f=off
selects the AVX2 kernels on an AVX-512 machine (docs/performance.md).`,
		Example: "  psgraph version",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			fmt.Fprintf(c.OutOrStdout(), "psgraph %s (%s, %s/%s; kernels %s, gemm %s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, blas.VecName(), blas.Name())
			return nil
		},
	}
}
