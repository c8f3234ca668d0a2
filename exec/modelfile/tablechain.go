package modelfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/internal/atomicfile"
)

// A dynamic table's checkpoints are a chain: a snapshot (every live row,
// its state and meta, the admission sketch) and the deltas after it (the
// rows written and keys removed since the previous cut), written by
// dyntable's copy-on-write cuts beside the node's checkpoint of the same
// step. DIR/N.T.chain.json lists the chain's files, oldest first; each
// file DIR/N.T.step-<k>.<snapshot|delta>.safetensors is written to a
// temporary file, synced and renamed before the list names it, and the cut
// is committed only then. Restoring step k applies the last snapshot at
// or before k, then its deltas up to k, in order, to an empty table: the
// table at step k, bit for bit (dyntable.TestSnapshotDeltasRestoreBitwise,
// TestDynamicTableCheckpointResumesBitwise).

// TableChain saves and restores the checkpoint chain of one dynamic
// table of a node.
type TableChain struct {
	Dir, Node, Table string
	// SnapshotEvery makes every SnapshotEvery-th cut a snapshot (0: 4),
	// the others deltas.
	SnapshotEvery int
}

// ChainLink is one file of a chain.
type ChainLink struct {
	Step     int64  `json:"step"`
	Snapshot bool   `json:"snapshot"`
	File     string `json:"file"` // base name, in Dir
}

func (c *TableChain) listPath() string {
	return filepath.Join(c.Dir, c.Node+"."+c.Table+".chain.json")
}

// Links reads the chain's list (none: empty).
func (c *TableChain) Links() ([]ChainLink, error) {
	b, err := os.ReadFile(c.listPath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var links []ChainLink
	if err := json.Unmarshal(b, &links); err != nil {
		return nil, fmt.Errorf("%s: %v (remove the checkpoint directory to start afresh)", c.listPath(), err)
	}
	return links, nil
}

func (c *TableChain) writeLinks(links []ChainLink) error {
	b, _ := json.MarshalIndent(links, "", "  ")
	return atomicfile.WriteBytes(c.listPath(), append(b, '\n'))
}

// Save cuts table t at step (a snapshot or a delta), writes the cut and
// adds it to the chain; keepFrom is the oldest step a restore may still
// ask for: the links before the snapshot it needs are dropped.
func (c *TableChain) Save(step int64, t *dyntable.Table, keepFrom int64) error {
	cc, err := c.Cut(step, t, keepFrom)
	if err != nil {
		return err
	}
	return cc.Write()
}

// ChainCut is a table's cut for its chain at a step: taken between steps
// (Cut, O(1)), written by Write while the table goes on changing
// (dyntable's copy-on-write keeps the cut's instant). Until Write or
// Abort returns, no other cut of the table may be taken, and no other
// link added to the chain.
type ChainCut struct {
	c               *TableChain
	step, keepFrom  int64
	links           []ChainLink
	kind            dyntable.Kind
	cut             *dyntable.Cut
	name            string
	snapshot, ended bool
}

// Cut takes the cut of table t that Save writes: a snapshot every
// SnapshotEvery-th link, else a delta.
func (c *TableChain) Cut(step int64, t *dyntable.Table, keepFrom int64) (*ChainCut, error) {
	links, err := c.Links()
	if err != nil {
		return nil, err
	}
	every := c.SnapshotEvery
	if every <= 0 {
		every = 4
	}
	since := 0 // deltas since the last snapshot
	for i := len(links) - 1; i >= 0 && !links[i].Snapshot; i-- {
		since++
	}
	kind, what := dyntable.Delta, "delta"
	if len(links) == 0 || since+1 >= every {
		kind, what = dyntable.Snapshot, "snapshot"
	}
	cut, err := t.Cut(kind)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %w", c.Table, err)
	}
	name := c.Node + "." + c.Table + ".step-" + strconv.FormatInt(step, 10) + "." + what + ".safetensors"
	return &ChainCut{c: c, step: step, keepFrom: keepFrom, links: links, kind: kind, cut: cut, name: name, snapshot: kind == dyntable.Snapshot}, nil
}

// Abort gives the cut up (its rows go back to the next delta).
func (cc *ChainCut) Abort() {
	if !cc.ended {
		cc.ended = true
		cc.cut.Abort()
	}
}

// Write writes the cut to its file, adds it to the chain and commits it
// (on any error the cut is aborted: its rows go back to the next delta).
func (cc *ChainCut) Write() error {
	defer cc.Abort() // after Commit it does nothing
	c := cc.c
	f, err := atomicfile.Create(filepath.Join(c.Dir, cc.name))
	if err != nil {
		return fmt.Errorf("checkpoint of %s: %w", c.Table, err)
	}
	defer f.Abort()
	if _, err := cc.cut.WriteSafetensors(f, c.Table, dyntable.Checkpoint); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", c.Table, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", c.Table, err)
	}
	links := append(cc.links, ChainLink{Step: cc.step, Snapshot: cc.snapshot, File: cc.name})
	base := 0 // the last snapshot at or before keepFrom
	for i, l := range links {
		if l.Snapshot && l.Step <= cc.keepFrom {
			base = i
		}
	}
	if err := c.writeLinks(links[base:]); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", c.Table, err)
	}
	cc.ended = true
	if err := cc.cut.Commit(); err != nil {
		return err
	}
	for _, l := range links[:base] {
		os.Remove(filepath.Join(c.Dir, l.File))
	}
	return nil
}

// Restore applies the chain up to step to t, an empty table of the
// configuration the chain was written with, and drops the links after
// step (a run resumed there writes its own).
func (c *TableChain) Restore(step int64, t *dyntable.Table) error {
	links, err := c.Links()
	if err != nil {
		return err
	}
	base := -1
	end := 0
	for i, l := range links {
		if l.Step > step {
			break
		}
		end = i + 1
		if l.Snapshot {
			base = i
		}
	}
	if base < 0 || links[end-1].Step != step {
		return fmt.Errorf("%s has no snapshot and deltas up to step %d of dynamic table %s; use a fresh --checkpoint-dir", c.listPath(), step, c.Table)
	}
	for _, l := range links[base:end] {
		if err := applyFile(t, filepath.Join(c.Dir, l.File), c.Table); err != nil {
			return err
		}
	}
	if end < len(links) {
		for _, l := range links[end:] {
			os.Remove(filepath.Join(c.Dir, l.File))
		}
		return c.writeLinks(links[:end])
	}
	return nil
}

func applyFile(t *dyntable.Table, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := t.Apply(f, fi.Size(), name); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return nil
}

// KeepFrom is the oldest step a restore may still ask for once the
// node's checkpoint of step is listed: the Keep newest (2 when unset) of
// the manifest's steps and step.
func (c *Checkpointer) KeepFrom(step int64) (int64, error) {
	m, _, err := c.Manifest()
	if err != nil {
		return 0, err
	}
	steps := append(slices.Clone(m.Steps), step)
	slices.Sort(steps)
	steps = slices.Compact(steps)
	keep := c.Keep
	if keep <= 0 {
		keep = 2
	}
	return steps[max(0, len(steps)-keep)], nil
}

// SaveTables cuts each dynamic table into its chain at step (a node's
// tables by name), before the node's checkpoint of step is listed (a
// crash between the two leaves a link the restore of an older step
// drops). Call it between steps, on the goroutine that changes the
// tables.
func (c *Checkpointer) SaveTables(step int64, tables map[string]*dyntable.Table) error {
	cuts, err := c.CutTables(step, tables)
	if err != nil {
		return err
	}
	return cuts.Write()
}

// TablesCut is the cuts of a node's dynamic tables at one step.
type TablesCut []*ChainCut

// CutTables takes the cuts SaveTables writes, between steps (O(1) a
// table); TablesCut.Write writes them, and may run while the tables
// change. Until it returns no other cut of the tables may be taken.
func (c *Checkpointer) CutTables(step int64, tables map[string]*dyntable.Table) (TablesCut, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	keepFrom, err := c.KeepFrom(step)
	if err != nil {
		return nil, err
	}
	var cuts TablesCut
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		ch := &TableChain{Dir: c.Dir, Node: c.Node, Table: name}
		cc, err := ch.Cut(step, tables[name], keepFrom)
		if err != nil {
			cuts.abort()
			return nil, err
		}
		cuts = append(cuts, cc)
	}
	return cuts, nil
}

// Write writes every cut into its chain; after an error the others are
// aborted.
func (tc TablesCut) Write() error {
	for i, cc := range tc {
		if err := cc.Write(); err != nil {
			tc[i+1:].abort()
			return err
		}
	}
	return nil
}

func (tc TablesCut) abort() {
	for _, cc := range tc {
		cc.Abort()
	}
}

// RestoreTables restores each dynamic table (new and empty) to its
// chain's step.
func (c *Checkpointer) RestoreTables(step int64, tables map[string]*dyntable.Table) error {
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		ch := &TableChain{Dir: c.Dir, Node: c.Node, Table: name}
		if err := ch.Restore(step, tables[name]); err != nil {
			return err
		}
	}
	return nil
}
