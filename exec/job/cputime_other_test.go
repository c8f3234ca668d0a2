//go:build !unix

package job

import "time"

// cpuTime is 0 where getrusage is missing: the benchmark's cpu-us/step
// then reads 0.
func cpuTime() time.Duration { return 0 }
