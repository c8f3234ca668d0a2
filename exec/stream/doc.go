// Package stream reads a model's online source (dsl.Online): rows that
// arrive while the model trains, from standard input, a file that keeps
// growing, a directory of part files, or (exec/stream/kafka) a Kafka
// topic. A Source gives records in a fixed order; a Reader turns them
// into batches on a goroutine of its own, ahead of training, and keeps
// with every batch the Position just after it, so the position a
// checkpoint saves is exactly that of the rows the steps it covers
// trained on, however far ahead the reader is. Opened again at that
// position, a source gives the same records from the next one on: a run
// resumed from its checkpoint trains each row once, in the same batches
// (docs/streaming.md).
//
// Memory is the in-memory twin of a source, for tests.
package stream
