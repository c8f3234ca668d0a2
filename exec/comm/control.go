package comm

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
	PositionSpec = transport.Spec{Var: PositionVar, DType: transport.I32, Bytes: 40}
	ResumeSpec   = transport.Spec{Var: ResumeVar, DType: transport.I32, Bytes: 8}
)

// ctrlStep keys every control message: never below a pserver's DropBefore
// floor, and every incarnation sends at most one to each peer.
const CtrlStep = math.MaxInt64
