// Package dyntable is the storage engine of psgraph's dynamic embedding
// tables: one pserver's shard of a table whose rows are created when a
// 64-bit feature key is admitted and removed when it expires or is
// evicted, so memory follows the live keys instead of a vocabulary size
// guessed up front. It imports only the standard library and exec/blas
// (a prefetch instruction, huge-page advice); the graph, the split and the
// pserver use it (see Integration below).
//
// # Storage
//
// A Table maps int64 keys to slots, and a slot to a record in pages of
// 1024 records: the key, 8 bytes of meta (last-seen step and sightings,
// or an LFU priority), Dim floats of value and StateWidth floats of
// optimizer state. A slot is the row's for its whole life (rows never
// move), and freed slots are reused before a new page is allocated.
// The index is extendible hashing over segments of 2048 linear-probing
// entries of 8 bytes (the top 32 bits of the key's hash and the slot):
// it grows one segment split at a time (no operation rehashes more than
// 1664 entries, about 10 µs: BenchmarkSegmentSplit) and never has two
// copies of itself; new rows take new pages, and nothing is ever copied
// to grow. A batch's lookups take 64 keys at a time: a loop asks for
// their home index entries (prefetch instructions), a second reads the
// entries, probing on from home to the key's tag, and asks for the
// records they point to, a third compares the keys, so that the
// processor overlaps each lookup's two cache misses with the other keys';
// only keys without a row (or behind another key's equal tag) are probed
// again, in find. Pull
// copies each group's values while they are cached, and Gather checks
// all its slots before it copies. No Go map, no pointer per row, nothing
// for the garbage collector to scan but the directory.
//
// Memory per live row is 8 (key) + 8 (meta) + 4*(Dim+StateWidth) + ~13
// (index) bytes: 161 bytes for Dim 16 with adagrad's 16 floats of state,
// 1.26 x its 128 bytes of floats (BenchmarkLookup, B/row and heapB/row,
// the latter measured on the Go heap), plus the admission sketch (from
// 1 MiB, about 4 bytes per distinct key seen past its first generation)
// and a partly filled page and segment per table.
//
// # Rows
//
// Lookup resolves a batch of keys to slots for the current step, counts
// the sightings, and creates the rows of keys admitted now; Pull is
// Lookup plus the copy of the values. A new row's value is a function of
// (Config.Seed, key) only (Config.Init): the PCG stream exec/program gives
// row k of a fixed table, so a key starts the same whatever the shard
// count or arrival order, and as row k of a fixed table with the same
// seed (TestInitMatchesFixedTable). Its state starts at Config.StateInit.
// Find resolves without counting or creating; Read copies values without
// side effects (evaluation, prediction). Gather and Scatter copy columns
// of rows by slot (value columns 0..Dim-1, then state): an optimizer
// gathers a batch's rows and state, updates them and scatters them back.
// A key without a row gets NoRow: it reads Config.Default and its
// gradient is dropped (Scatter skips it).
//
// One goroutine, the owner (the pserver loop of the shard), calls the
// methods that change rows; readers (Find, Gather, Read, Stats) and a
// cut's writer may run concurrently. Slots returned during a step stay
// the key's until the owner's next Advance, Sweep or Delete: rows seen at
// the current step are never evicted. A steady-state step allocates
// nothing (BenchmarkLookup, BenchmarkUpdate, BenchmarkAdmit: 0 allocs/op).
//
// # Admission
//
// With Config.MinCount N > 1 a key gets a row at its N-th sighting (the
// counts passed to Lookup: occurrences in the batch, or 1 per request).
// Sightings of keys without a row are counted in a sketch: a Bloom
// filter of 4 hashes that remembers first sightings, then a count-min
// sketch of 4 rows of 8-bit counters with conservative update (min_count
// 2 needs the filter only). The sketch never undercounts; it admits a key
// early when other keys cover all its cells: in a sketch of a fixed
// 1 MiB, 0.05% of 500,000 keys seen once under min_count 2 (0.2% for the
// last of them), as the filter's false-positive rate predicts; with
// min_count 3, 8.6% of 250,000 keys seen twice (TestFalseAdmissionRate).
// So the sketch grows with the distinct keys it sees, from 1 MiB in
// generations of twice the size, up to Config.SketchBytes (default
// 64 MiB; sketch.go), which keeps the false admissions under 1% of the
// keys rightly admitted: 0.46% for 10M sightings of 2M distinct keys,
// in 7 MiB (TestFalseAdmissionsAtScale; docs/runtime.md, "Admission").
// With Config.AdmitProb p each sighting from the N-th on
// admits with probability p, drawn from (seed, key, sighting number): a
// key seen k times has a row with probability 1-(1-p)^k, whatever the
// order of arrival (TestAdmissionProbability). Exact counting on keys
// whose cells no other key shares: TestAdmissionMinCount.
//
// # Eviction
//
// Every rule is a watermark on a per-row score, so Advance decides
// evictions in O(1) per step from a histogram of the live rows by score,
// without visiting rows:
//
//   - TTL: a row last seen at step s is gone from step s+TTL on.
//   - Capacity with LRU: at each step boundary (Advance), while more than
//     Capacity rows are live, all rows last seen at the oldest step go
//     (rows of the current step never do); live rows may undershoot the
//     capacity by the rows of one step.
//   - Capacity with LFU: while more than Capacity rows are live, all rows
//     of the lowest priority go; a row's priority is the watermark when
//     it was admitted plus its sightings since (capped 65536 above the
//     watermark), LFU with dynamic aging. LFU cannot be combined with TTL.
//
// Between step boundaries the live rows may exceed Capacity by the step's
// admissions. An evicted or expired row is gone at once for every method;
// its memory is reclaimed when an admission finds it among the next 64
// records, when its key is looked up again, or by Sweep: call Sweep(n)
// every step (65536 records: about 0.2 ms when few are expired, plus
// 0.2 µs per row freed; the lock is taken 2048 records at a time) to free
// them in bounded work. Sweep leaves up to 1/64 of the held records
// expired (admissions reuse them), so the rows held stay within 64/63 of
// the live ones plus a step's admissions, and it inspects about 64
// records per row freed rather than the table every few steps
// (TestSweepKeepsSlack).
// Counts of admissions and of evictions by ttl and by capacity match a
// map-based reference exactly (TestTableAgainstReference); live rows stay
// bounded on a drifting vocabulary and freed memory is reused
// (TestMemoryFollowsLiveKeys).
//
// # Snapshots and deltas
//
// Cut takes a Snapshot (every live row; starts a chain), a Delta (rows
// written and keys removed since the previous cut; a row a lookup saw is
// written) or an Export (every live row, for a model file, outside the
// chain). Cut is O(1) under the lock; writing it copies the rows in
// batches of 1024 records, one hold of the lock each, and copy-on-write
// keeps the cut's instant: the first change to a record the walk has not
// reached copies it aside. Measured on 2M rows x (16+16) floats (275 MiB
// written in 1-1.8 s) while a goroutine looks batches up without pause
// (BenchmarkSnapshotPause, three runs): the snapshot's work under the
// lock is 0.018 ms per batch at the median, 0.06 ms at p99, at most
// 0.2-0.8 ms; the lookups' median latency is 0.59 ms during it, 0.49-0.59
// ms without. A lookup waits longer only when the system takes the
// processor from the writer's thread while it holds the lock (on the
// shared 2-core machine of bench/history-2026-12.md, up to 3-130 ms, where the
// same lookups' p99 is 21-84 ms with no snapshot at all). The writer
// yields its processor after each hold, so that a lookup it woke takes
// the lock next (Go's mutex would let the writer take it again first, for
// up to 1 ms): the lookups' p99 during a snapshot went from 3.6-4.2 ms to
// 1.3-2.8 ms, during a delta from 2.8-3.5 to 1.3-2.2 ms
// (BenchmarkDeltaPause; bench/history-2026-12.md). Commit a cut once its file is durable, or Abort it
// (its rows go back to the next delta). Applying a snapshot and its
// deltas in order to a new table reproduces the table at the last cut
// bit for bit: rows, state, meta, watermark, counts and sketch, so
// training continues exactly as it would have
// (TestSnapshotDeltasRestoreBitwise, TestConcurrentReadersAndAbort).
// A delta holds the rows touched since the previous cut plus the sketch
// chunks written (at most the sketch).
//
// # Files
//
// WriteSafetensors writes a cut as a safetensors file into an
// io.WriterAt, filling each tensor at its offset, so the table is never
// whole in memory. For a table named NAME holding n rows:
//
//	NAME.keys           I64 [n]        the keys
//	NAME                F32 [n, dim]   their values
//	NAME.state          F32 [n, state] optimizer state (checkpoints; ModelWithState)
//	NAME.meta           U64 [n]        low 32 bits: last-seen step, high: sightings;
//	                                   an LFU table's priority (checkpoints)
//	NAME.removed        I64 [r]        keys removed since the previous cut (checkpoints, deltas)
//	NAME.sketch_chunks  I64 [m]        admission sketch chunks (checkpoints with admission)
//	NAME.sketch         U8  [m, 1024]  their bytes
//
// and __metadata__ holds the table's configuration and scalars (format
// "psgraph.dyntable" = "1", kind, layout, dim, step, watermark, counts,
// cut numbers). numpy reads it with the format's description only
// (testdata/read_numpy.py, TestFilesReadByNumpy):
//
//	raw = open(path, "rb").read()
//	n = struct.unpack("<Q", raw[:8])[0]
//	header = json.loads(raw[8:8 + n])
//	def tensor(name, dtype):
//	    e = header[name]; a, b = e["data_offsets"]
//	    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype).reshape(e["shape"])
//	rows = dict(zip(tensor("emb.keys", "<i8"), tensor("emb", "<f4")))
//
// LoadModel reads a file's keys and values as a lookup-only table (for
// eval and predict); Apply restores checkpoint files, refusing a file of
// another configuration, a delta out of order or a malformed file with
// an error naming the file and leaving the table as it was
// (TestApplyRefusesForeignFiles).
//
// # Integration
//
// The pserver holds one Table per dynamic parameter shard (New with the
// parameter's dim, its optimizer's state width and initial state, the
// initializer and seed, admission and eviction). Keys are placed on
// shards with ShardOf (a hash unrelated to the index's). Per step k:
//
//  1. Advance(k) before serving the step's requests.
//  2. serve_rows (the trainer's request: the batch's distinct keys, with
//     their occurrence counts if admission should count occurrences):
//     Pull(keys, counts, slots, reply) and send the reply; a key without
//     a row reads the default.
//  3. accumulate_rows (keys and their gradients from each trainer; sum
//     by key as today): Find(keys, slots), drop NoRow keys, Gather the
//     value and each state variable's columns into the optimizer's
//     row-sparse inputs (state variable j at columns Dim+offset_j), run
//     the template's element-wise ops unchanged, and Scatter the new
//     value and state back by slot (the assign of a row-sparse value).
//  4. Sweep(65536) every step.
//  5. Stats for the Prometheus gauges (live, held, bytes by part) and
//     counters (admitted, evicted by ttl and capacity), and the summary
//     line.
//
// Checkpoint at step k, between steps: Cut(Snapshot) every K-th
// checkpoint and Cut(Delta) otherwise; write the cut in a goroutine with
// WriteSafetensors(file, name, Checkpoint) into an atomicfile.File (an
// *os.File), Commit the file, then Commit the cut (Abort it on any
// error); list the files of the chain in the node's manifest. Restore: New
// with the same Config, Apply the snapshot, then each delta in order.
// Model files (--save) hold a table whole, as its keys and their rows
// (exec/program.TableEntries): a local run reads them from its table,
// trainer 0 of a split job pulls them from every shard (exec/trainer);
// eval and predict read them back into a table (exec/program.ReadTable),
// then Read. WriteSafetensors(file, name, Model) and LoadModel do the
// same for one table's own files.
// Adam's scalar state (beta powers) stays an ordinary variable: only
// per-row state lives in the table.
package dyntable
