// Package serve answers inference requests for a model over HTTP in the
// Open Inference Protocol (KServe v2, as Triton, KServe and Seldon
// MLServer speak it; docs/serving.md): the request decoder (decodeRequest,
// a pure function of the body and the model's Meta; fastWire reads a
// request of rows without encoding/json), the model as the server runs it
// (Model: its versions of the parameters, swapped atomically, each with
// its compiled programs pooled by batch size, compiled for a new version
// before it is served) and
// the HTTP front (Handler, which sees the model through the narrow
// Predictor interface, and Run, the server's life: listen, reload on
// SIGHUP or the repository extension's load, drain on SIGTERM). RunFollow
// serves a model following a running job instead (replica.go): it
// subscribes to every pserver and applies each delta they send
// (Model.Apply), driven by replicate.Follow.
//
// A request's rows are parsed, hashed, filled, transformed and normalized
// by the model's own data spec with the statistics saved with its
// parameters (data.LineParser), and its outputs are `psgraph predict`'s
// (evaluate.PredictOutputs), so the server computes what predict
// computes for the same rows.
package serve
