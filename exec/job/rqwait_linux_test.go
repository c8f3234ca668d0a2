package job

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// runQueue reads the time the process's threads have spent runnable but
// waiting for a processor, summed over its threads (the second field of
// /proc/self/task/*/schedstat; 0 if the kernel does not keep it). On a
// shared machine it tells a latency spent descheduled from one spent
// working or waiting on a lock. It keeps each thread's file open and
// lists the threads again every 64 reads.
type runQueue struct {
	files map[string]*os.File
	reads int
	buf   []byte
}

func (q *runQueue) wait() time.Duration {
	if q.files == nil {
		q.files = map[string]*os.File{}
		q.buf = make([]byte, 128)
	}
	if q.reads%64 == 0 {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, t := range tasks {
			if q.files[t.Name()] == nil {
				if f, err := os.Open("/proc/self/task/" + t.Name() + "/schedstat"); err == nil {
					q.files[t.Name()] = f
				}
			}
		}
	}
	q.reads++
	var sum time.Duration
	for _, f := range q.files {
		n, _ := f.ReadAt(q.buf, 0)
		fields := bytes.Fields(q.buf[:n])
		if len(fields) < 2 {
			continue
		}
		if ns, err := strconv.ParseInt(string(fields[1]), 10, 64); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

func (q *runQueue) close() {
	for _, f := range q.files {
		f.Close()
	}
}
