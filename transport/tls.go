package transport

// TLS: the optional wrapping of a dialer's connection before the handshake
// (Config.TLS) and its error; the listener wraps its side in serveConn.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrTLS: the TLS handshake failed (a certificate not trusted, or one side
// without TLS). It is not retried.
var ErrTLS = errors.New("TLS handshake failed")

func clientTLS(ctx context.Context, c net.Conn, cfg *tls.Config, addr string, timeout time.Duration) (net.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %v", ErrTLS, err)
	}
	return tc, nil
}
