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

// listen and dial connect a node of a job. (TCP transport: pending.)
func listen(ctx context.Context, plan *partition.Plan, job *exec.Job, index int, addr, token string, insecure bool, log zerolog.Logger) (transport.Endpoint, error) {
	return nil, errors.New("the TCP transport is not built yet")
}

func dial(ctx context.Context, plan *partition.Plan, job *exec.Job, index int, addrs []string, batch int, token string, timeout time.Duration, log zerolog.Logger) (transport.Endpoint, error) {
	return nil, errors.New("the TCP transport is not built yet")
}
