// Package progress logs how far a long phase of a run has come (reading a
// data file, drawing a table's initial values, an evaluation pass): what it
// does, its count against its total, its rate and the time left, once per
// interval, so that no phase of more than a second or two is silent.
package progress
