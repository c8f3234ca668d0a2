//go:build !unix

package serve

import "time"

// cpuTime is 0 where getrusage is missing: the benchmark's cpu-µs/req
// then reads 0.
func cpuTime() time.Duration { return 0 }
