package comm

import (
	"math"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/transport"
)

const (
	// PositionVar and ResumeVar are reserved transfer names; a plan may
	// not use them for its own transfers.
	PositionVar = "psgraph/position"
	ResumeVar   = "psgraph/resume"
)

// PositionSpec and ResumeSpec declare them: a trainer's position
// (rejoin.Position) and a pserver's resume step.
var (
	PositionSpec = transport.Spec{Var: PositionVar, DType: transport.I32, Bytes: rejoin.PositionBytes}
	ResumeSpec   = transport.Spec{Var: ResumeVar, DType: transport.I32, Bytes: 8}
)

// CtrlStep keys every control message: never below a pserver's DropBefore
// floor, and every incarnation sends at most one to each peer.
const CtrlStep = math.MaxInt64

// Specs lists what a node receives (the receiving ends of its transfer
// table ts, one per name), for transport.Endpoint.Accept.
func Specs(ts []dsl.Transfer) []transport.Spec {
	var specs []transport.Spec
	for _, t := range dsl.Received(ts) {
		specs = append(specs, transport.Spec{Var: t.Var, DType: t.DType, Bytes: t.Bytes, AtMost: t.AtMost})
	}
	return specs
}
