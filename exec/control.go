package exec

import (
	"math"

	"github.com/psgraph/psgraph/transport"
)

const (
	// PositionVar and ResumeVar are reserved transfer names; a plan may
	// not use them for its own transfers.
	PositionVar = "psgraph/position"
	ResumeVar   = "psgraph/resume"
)

var (
	positionSpec = transport.Spec{Var: PositionVar, DType: transport.I32, Bytes: 40}
	resumeSpec   = transport.Spec{Var: ResumeVar, DType: transport.I32, Bytes: 8}
)

// ctrlStep keys every control message: never below a pserver's DropBefore
// floor, and every incarnation sends at most one to each peer.
const ctrlStep = math.MaxInt64
