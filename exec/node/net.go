package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/psgraph/psgraph/exec/job"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// JobHash is the job's wire identity, transport.Config.JobHash of every
// node of the plan (partition.Plan.JobHash). A peer of another plan is
// refused with transport.ErrJobMismatch.
func JobHash(plan *partition.Plan) string { return plan.JobHash() }

// baseConfig is the transport configuration every node of a plan shares.
func baseConfig(plan *partition.Plan, job *job.Job, self transport.NodeID, batch int, token string, log zerolog.Logger) (transport.Config, error) {
	specs, err := job.Specs(self, batch)
	if err != nil {
		return transport.Config{}, err
	}
	return transport.Config{
		Self: self, Token: []byte(token), JobHash: JobHash(plan),
		Accept: specs,
		OnError: func(err error) {
			if errors.Is(err, transport.ErrPeerRestarted) {
				return // logged by the transport as a reconnect with restarted=true
			}
			log.Error().Err(err).Msg("rejected")
		},
		Log: &log,
	}, nil
}

// tlsConfig builds the TLS configuration of the --tls-* files (nil: none).
func tlsConfig(certFile, keyFile, caFile string, server bool) (*tls.Config, error) {
	if certFile == "" && keyFile == "" && caFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (certFile == "") != (keyFile == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	} else if server {
		return nil, usagef("a pserver with TLS needs --tls-cert and --tls-key")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", caFile)
		}
		if server {
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			cfg.RootCAs = pool
		}
	}
	return cfg, nil
}

// listen starts pserver index's endpoint; the trainers connect to it, and
// serving replicas to replicas (nil: refused).
func listen(ctx context.Context, plan *partition.Plan, job *job.Job, index int, addr, token string, insecure bool, tc *tls.Config, replicas func(transport.NodeID, uint64, net.Conn), handshake time.Duration, log zerolog.Logger) (transport.Endpoint, error) {
	cfg, err := baseConfig(plan, job, transport.PServer(index), 1, token, log)
	if err != nil {
		return nil, err
	}
	cfg.TLS, cfg.Replicas, cfg.HandshakeTimeout = tc, replicas, handshake
	cfg.Listen, cfg.Insecure = addr, insecure
	cfg.HangupWait = 2 * time.Second // each trainer closes on its own, once it has the Done
	cfg.Peers = map[transport.NodeID]string{}
	for _, id := range job.TrainerIDs() {
		cfg.Peers[id] = ""
	}
	ep, err := transport.Listen(ctx, cfg)
	if errors.Is(err, transport.ErrNoToken) {
		return nil, fmt.Errorf("refusing to listen on %s without a token: anyone who can reach it could join the job; give every node of the job the same token (PSGRAPH_TOKEN or --token-file), or pass --insecure to accept that", addr)
	}
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", ep.Addr().String()).Int("trainers", job.Trainers).Msg("listening")
	return ep, nil
}

// dial connects trainer index to every pserver, retrying until timeout.
func dial(ctx context.Context, plan *partition.Plan, job *job.Job, index int, addrs []string, batch int, token string, timeout time.Duration, tc *tls.Config, handshake time.Duration, log zerolog.Logger) (transport.Endpoint, error) {
	cfg, err := baseConfig(plan, job, transport.Trainer(index), batch, token, log)
	if err != nil {
		return nil, err
	}
	cfg.TLS, cfg.HandshakeTimeout = tc, handshake
	cfg.ConnectTimeout = timeout
	cfg.Peers = map[transport.NodeID]string{}
	for i, a := range addrs {
		cfg.Peers[transport.PServer(i)] = a
	}
	ep, err := transport.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	log.Info().Int("pservers", len(addrs)).Msg("connected")
	return ep, nil
}
