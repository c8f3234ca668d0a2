package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/internal/testfix"
)

// InProcess runs every node of a 2x2 plan in this process over the
// in-memory transport: trainer 0's summary counts the steps asked for and
// the bytes it moved (payloads only: the in-memory transport has no wire).
// A node that fails (a pserver whose --init-from does not exist) stops
// the job, and its error comes back named by the node. Under -race (.ci/run)
// this is also the check that the nodes share the one plan safely.
func TestInProcessRunsTheJob(t *testing.T) {
	plan := writePlan(t, testfix.TinyModel, 2, 2)
	logs := func(string) zerolog.Logger { return zerolog.Nop() }
	sum, err := InProcess(context.Background(), InProcessOptions{Plan: plan, Steps: 20, Batch: 8, Log: logs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Role != "trainer-0" || sum.Steps != 20 || sum.SentBytes == 0 || sum.RecvBytes == 0 || sum.WireSentBytes != 0 {
		t.Errorf("trainer-0's summary: role %q, %d steps, sent %d, received %d, wire %d; want trainer-0, 20 steps, bytes both ways, no wire", sum.Role, sum.Steps, sum.SentBytes, sum.RecvBytes, sum.WireSentBytes)
	}
	missing := filepath.Join(t.TempDir(), "none.safetensors")
	_, err = InProcess(context.Background(), InProcessOptions{Plan: plan, Steps: 20, InitFrom: missing, Log: logs})
	if err == nil || !strings.HasPrefix(err.Error(), "pserver-") || !strings.Contains(err.Error(), missing) {
		t.Errorf("with a missing --init-from: %v, want a pserver's error naming the file", err)
	}
}
