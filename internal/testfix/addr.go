package testfix

import (
	"net"
	"sync"
	"testing"
)

var handed struct {
	sync.Mutex
	ports map[int]bool
}

// FreeAddr returns a loopback address nobody listens on, never one it
// returned before in this process: the kernel may hand a port closed a
// moment ago out again, and a test asking for a node's listen and metrics
// addresses one after the other then gave both the same port (CI: "bind:
// address already in use").
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	handed.Lock()
	defer handed.Unlock()
	if handed.ports == nil {
		handed.ports = map[int]bool{}
	}
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		a := l.Addr().(*net.TCPAddr)
		l.Close()
		if !handed.ports[a.Port] {
			handed.ports[a.Port] = true
			return a.String()
		}
	}
	tb.Fatal("no loopback port not handed out before in 1000 tries")
	return ""
}
