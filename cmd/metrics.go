package cmd

import (
	"os"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/exec/metrics"
)

func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics-addr", "", "serve Prometheus metrics on http://HOST:PORT"+metrics.MetricsPath+
		" and the probes "+metrics.LivePath+" (alive) and "+metrics.ReadyPath+" (joined the job) (default: none; env PSGRAPH_METRICS_ADDR; docs/deploy.md)")
}

// startMetrics serves a node's metrics on addr, or PSGRAPH_METRICS_ADDR
// when addr is empty; with neither it serves none and returns a nil
// server, whose Node is nil and which every metrics call accepts.
func startMetrics(addr, node string, log zerolog.Logger) (*metrics.Server, error) {
	if addr == "" {
		addr = os.Getenv("PSGRAPH_METRICS_ADDR")
	}
	if addr == "" {
		return nil, nil
	}
	s, err := metrics.Listen(addr, metrics.New(node))
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", s.Addr().String()).Msg("serving metrics")
	return s, nil
}
