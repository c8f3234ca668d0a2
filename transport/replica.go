package transport

import (
	"context"
	"fmt"
	"net"
	"time"
)

// A serving replica follows a job without being part of it: a listener
// with Config.Replicas authenticates it with the handshake every peer
// passes (the job's token proves it belongs, the job hash that it follows
// this job) and hands its connection to the handler instead of making it
// a peer of the endpoint. So a stranger cannot subscribe (ErrAuth), and a
// replica cannot write to the job: its bytes reach only the handler,
// never the endpoint's inbox, whose receives take the trainers' messages.

// admitReplica is the handshake's status for a replica.
func (t *TCP) admitReplica() byte {
	if t.cfg.Replicas == nil {
		return stUnknownPeer
	}
	return stOK
}

// DialReplica connects serving replica cfg.Self to the listener server at
// addr (cfg.Token, cfg.JobHash, cfg.TLS and cfg.HandshakeTimeout as for
// Dial) and returns the authenticated connection and the listener's
// incarnation (a new one after it restarted). It does not retry.
func DialReplica(ctx context.Context, cfg Config, server NodeID, addr string) (net.Conn, uint64, error) {
	cfg.defaults()
	if cfg.Self.Role != ReplicaRole || cfg.Self.Index < 0 {
		return nil, 0, fmt.Errorf("transport: DialReplica needs a replica's id, not %v", cfg.Self)
	}
	var d net.Dialer
	network, address := splitAddr(addr)
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, 0, &PeerError{server, fmt.Errorf("at %s: %w", addr, err)}
	}
	if cfg.TLS != nil {
		if c, err = clientTLS(ctx, c, cfg.TLS, addr, cfg.HandshakeTimeout); err != nil {
			return nil, 0, &PeerError{server, fmt.Errorf("at %s: %w", addr, err)}
		}
	}
	c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	inc, err := clientHandshake(c, cfg.Self, server, newIncarnation(), cfg.Token, jobHash(cfg.JobHash))
	if err != nil {
		c.Close()
		return nil, 0, &PeerError{server, fmt.Errorf("at %s: %w", addr, err)}
	}
	c.SetDeadline(time.Time{})
	return c, inc, nil
}
