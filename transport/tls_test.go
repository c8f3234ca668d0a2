package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/psgraph/psgraph/transport/testcert"
)

func testCA(t *testing.T) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	s, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	return s.Pool, s.Cert
}

// Over TLS (with client certificates) messages flow as over plain TCP.
func TestTCPOverTLS(t *testing.T) {
	pool, cert := testCA(t)
	eps, _ := tcpJob(t, func(c *Config) {
		if c.Listen != "" {
			c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
		} else {
			c.TLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		}
	}, t0, p0)
	eps[p0].Accept(Spec{Var: "W", DType: F32, Bytes: 8})
	eps[t0].Accept(Spec{Var: "W", DType: F32, Bytes: 8})
	ctx := context.Background()
	must(t, eps[t0].Send(ctx, p0, 3, "W", F32, f32(1, 2)))
	dst := make([]byte, 8)
	must(t, eps[p0].Recv(ctx, t0, 3, "W", dst))
	must(t, eps[p0].Send(ctx, t0, 4, "W", F32, f32(3, 4)))
	must(t, eps[t0].Recv(ctx, p0, 4, "W", dst))
	if string(dst) != string(f32(3, 4)) {
		t.Fatalf("got %v", dst)
	}
}

// A trainer that does not trust the pserver's certificate fails at once
// with ErrTLS: a certificate problem is not retried.
func TestTCPTLSUntrusted(t *testing.T) {
	_, cert := testCA(t)
	other, _ := testCA(t)
	ps, err := Listen(context.Background(), Config{Self: p0, Listen: "127.0.0.1:0", Peers: map[NodeID]string{t0: ""}, Token: []byte("k"),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	_, err = Dial(context.Background(), Config{Self: t0, Peers: map[NodeID]string{p0: ps.Addr().String()}, Token: []byte("k"),
		ConnectTimeout: 30 * time.Second, TLS: &tls.Config{RootCAs: other}})
	if !errors.Is(err, ErrTLS) { // a retried failure would end as "unreachable after 30s"
		t.Fatalf("want ErrTLS, got %v", err)
	}
}
