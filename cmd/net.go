package cmd

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// baseConfig is the transport configuration every node of a plan shares.
func baseConfig(plan *partition.Plan, job *exec.Job, self transport.NodeID, batch int, token string, log zerolog.Logger) (transport.Config, error) {
	specs, err := job.Specs(self, batch)
	if err != nil {
		return transport.Config{}, err
	}
	return transport.Config{
		Self: self, Token: []byte(token), JobHash: plan.Info.SourceSHA256 + "/" + plan.Info.Model,
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

// listen starts pserver index's endpoint; the trainers connect to it.
func listen(ctx context.Context, plan *partition.Plan, job *exec.Job, index int, addr, token string, insecure bool, log zerolog.Logger) (transport.Endpoint, error) {
	cfg, err := baseConfig(plan, job, transport.PServer(index), 1, token, log)
	if err != nil {
		return nil, err
	}
	cfg.Listen, cfg.Insecure = addr, insecure
	cfg.Peers = map[transport.NodeID]string{}
	for _, id := range job.TrainerIDs() {
		cfg.Peers[id] = ""
	}
	ep, err := transport.Listen(ctx, cfg)
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", ep.Addr().String()).Int("trainers", job.Trainers).Msg("listening")
	return ep, nil
}

// dial connects trainer index to every pserver, retrying until timeout.
func dial(ctx context.Context, plan *partition.Plan, job *exec.Job, index int, addrs []string, batch int, token string, timeout time.Duration, log zerolog.Logger) (transport.Endpoint, error) {
	cfg, err := baseConfig(plan, job, transport.Trainer(index), batch, token, log)
	if err != nil {
		return nil, err
	}
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
