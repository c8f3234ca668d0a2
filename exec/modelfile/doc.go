// Package modelfile reads and writes what outlives a process: safetensors
// files (SaveSafetensors, LoadSafetensors), a model's parameters with the
// normalization statistics of its training data (SaveModel, LoadModel),
// a file written as its tensors arrive (SaveStreamed), one node's
// checkpoints with their manifest (Checkpointer, CommonCheckpoint) and a
// dynamic table's chain of them (TableChain). Every
// file is written to a temporary file, synced and renamed into place
// (internal/atomicfile), so a crash leaves the previous one intact.
package modelfile
