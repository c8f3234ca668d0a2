// Package trainer runs the training loop of a local run or of one trainer
// of a split job: feed the step's batch by the data stream rule, run the
// program, log, checkpoint (local), evaluate the held-out data, and at the
// end receive the final parameters, save them and summarize the run.
package trainer
