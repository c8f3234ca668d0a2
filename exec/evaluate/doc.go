// Package evaluate computes a model's loss and metrics over a data set
// (the held-out evaluation of a run, `psgraph eval`) and its outputs row by
// row (`psgraph predict`), with parameters shared from a training program
// or loaded from a model file.
package evaluate
