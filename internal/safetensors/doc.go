// Package safetensors is psgraph's one codec of the safetensors format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header mapping each tensor's name to its dtype,
// shape and data_offsets (relative to the data, which follows the header)
// plus "__metadata__" (string to string), then the tensors' raw
// little-endian bytes, back to back. Encode lays out a file's header from
// its tensors' shapes, so the data can be written piece by piece at its
// offsets; Decode checks a header before any data is read, as an input
// from anyone: offsets that hold the shape's bytes exactly, no overlap,
// no gap, no overflow, bounded length (FuzzSafetensorsHeader).
// exec/modelfile (model files, checkpoints) and exec/dyntable (a dynamic
// table's files) both read and write through it.
package safetensors
