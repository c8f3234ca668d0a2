//go:build !unix

package testfix

import "time"

// ProcessCPU is not measured here (no getrusage): 0, so the benchmarks'
// CPU metrics read 0.
func ProcessCPU() time.Duration { return 0 }
