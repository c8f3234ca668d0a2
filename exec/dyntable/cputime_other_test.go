//go:build !linux

package dyntable

import "time"

// threadCPU has no per-thread clock off Linux; the cpu-ns/key metric then
// reads zero and the wall-clock ns/op stands alone.
func threadCPU() time.Duration { return 0 }
