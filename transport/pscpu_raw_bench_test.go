//go:build unix

package transport

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The floor of BenchmarkPServerCPU: its message pattern over plain Unix
// sockets, each message an 8-byte header (the transfer's index and the
// length) and its payload written with one writev, each pserver one
// goroutine that reads the two trainers' connections in turn through a
// 64 KiB buffer. No multiplexing, no ids, no checks, no resumption: what
// moving the bytes costs the kernel and Go's runtime.

const rawHeader = 8

// rawConn is one end of a raw pattern connection.
type rawConn struct {
	c    net.Conn
	r    *bufio.Reader
	hdr  [rawHeader]byte
	bufs net.Buffers
}

func newRawConn(c net.Conn) *rawConn {
	if u, ok := c.(*net.UnixConn); ok { // as the transport sizes its sockets
		u.SetWriteBuffer(4 << 20)
		u.SetReadBuffer(4 << 20)
	}
	return &rawConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (r *rawConn) send(i int, b []byte) error {
	binary.LittleEndian.PutUint32(r.hdr[:4], uint32(i))
	binary.LittleEndian.PutUint32(r.hdr[4:], uint32(len(b)))
	r.bufs = append(r.bufs[:0], r.hdr[:], b)
	_, err := r.bufs.WriteTo(r.c)
	return err
}

func (r *rawConn) recv(i int, b []byte) error {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return err
	}
	if got, n := binary.LittleEndian.Uint32(r.hdr[:4]), binary.LittleEndian.Uint32(r.hdr[4:]); int(got) != i || int(n) != len(b) {
		return fmt.Errorf("raw message %d of %d bytes, want %d of %d", got, n, i, len(b))
	}
	_, err := io.ReadFull(r.r, b)
	return err
}

func rawPath(addr string) string { return strings.TrimPrefix(addr, UnixPrefix) }

func pserverCPURaw(b *testing.B, pattern string) {
	pat := cpuPatterns[pattern]
	steps := cpuWarmup + b.N
	addrs, measured := spawnPServers(b, pattern, steps, true)
	conns := make([][]*rawConn, 2) // trainer, pserver
	for t := range conns {
		for j := range pat {
			c, err := net.Dial("unix", rawPath(addrs[PServer(j)])) // listening: spawnPServers made the socket
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte{byte(t)}); err != nil {
				b.Fatal(err)
			}
			conns[t] = append(conns[t], newRawConn(c))
		}
	}
	d := timeTrainers(b, pattern, steps, func(t, _ int, up, down [][][]byte) error {
		for j, ps := range pat {
			for i := range ps {
				if err := conns[t][j].send(i, up[j][i]); err != nil {
					return err
				}
			}
		}
		for j, ps := range pat {
			for i, sz := range ps {
				if sz.down == 0 {
					continue
				}
				if err := conns[t][j].recv(i, down[j][i]); err != nil {
					return err
				}
			}
		}
		return nil
	}, func(int) error { return nil })
	cpu, msgs := measured()
	reportCPU(b, cpu, msgs, d)
}

// rawPServerChild is pserverChild over raw sockets (pserverCPURaw).
func rawPServerChild(pattern string) error {
	j, _ := strconv.Atoi(os.Getenv("PSGRAPH_PSCPU_INDEX"))
	steps, _ := strconv.Atoi(os.Getenv("PSGRAPH_PSCPU_STEPS"))
	l, err := net.FileListener(os.NewFile(3, "listener")) // spawnPServers's
	if err != nil {
		return err
	}
	defer l.Close()
	conns := make([]*rawConn, 2)
	for range conns {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		var id [1]byte
		if _, err := io.ReadFull(c, id[:]); err != nil || int(id[0]) >= len(conns) || conns[id[0]] != nil {
			return fmt.Errorf("raw pserver: bad trainer id %d (%v)", id[0], err)
		}
		conns[id[0]] = newRawConn(c)
	}
	return serveSteps(pattern, j, steps, "raw.", func(int) error { return nil },
		func(i, t, _ int, buf []byte) error { return conns[t].recv(i, buf) },
		func(i, t, _ int, buf []byte) error { return conns[t].send(i, buf) })
}
