package transport

// Endpoint addresses: "host:port" is TCP; "unix:PATH" is a Unix-domain
// socket on this host, which `psgraph train` uses for the nodes of a job
// on one machine: no TCP/IP stack between the two kernel copies, so a
// dense step's bytes cost less CPU than over loopback TCP
// (BenchmarkDenseStep), and only this host's processes can reach it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
)

// UnixPrefix starts an endpoint address that names a Unix-domain socket.
const UnixPrefix = "unix:"

// splitAddr gives the network and address Go's net package takes for an
// endpoint address.
func splitAddr(addr string) (network, address string) {
	if p, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		return "unix", p
	}
	return "tcp", addr
}

// local reports whether only processes of this host can reach addr: a
// loopback TCP address or a Unix socket.
func local(addr string) bool {
	if network, _ := splitAddr(addr); network == "unix" {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen listens on addr. A Unix socket file left by a process that died
// without closing its listener (a SIGKILLed pserver) is removed first, once
// a dial to it is refused; a live listener's file is left alone. (Two
// processes started at one path at the same instant could still race:
// one that has bound but not yet listened also refuses dials. Each
// pserver of a job has its own path.)
func listen(ctx context.Context, addr string) (net.Listener, error) {
	network, address := splitAddr(addr)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, network, address)
	if err == nil || network != "unix" || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	fi, serr := os.Lstat(address)
	if serr != nil {
		return nil, fmt.Errorf("%w (%v)", err, serr)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("%w (%s exists and is not a socket: move it, or listen on another path)", err, address)
	}
	var d net.Dialer
	c, derr := d.DialContext(ctx, network, address)
	if derr == nil {
		c.Close()
		return nil, fmt.Errorf("%w: another process listens on %s (stop it, or listen on another path)", err, address)
	}
	if !errors.Is(derr, syscall.ECONNREFUSED) {
		return nil, err
	}
	if rerr := os.Remove(address); rerr != nil {
		return nil, fmt.Errorf("%w (removing the stale socket: %v)", err, rerr)
	}
	return lc.Listen(ctx, network, address)
}
