package modelfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/internal/atomicfile"
)

// Checkpoints are written once for every role: a local run and a pserver
// both save the persistent variables of their scope (parameters or blocks,
// optimizer state) with the step they reached, and restore them to resume.
//
// A checkpoint of node N at step k is DIR/N.step-<k>.safetensors (the
// tensors, with node, step and model in its metadata) and DIR/N.json, the
// manifest naming the checkpoints kept, newest last. Both are written to a
// temporary file, fsynced and renamed, the manifest after the tensors, so a
// crash at any point leaves the previous checkpoint intact. The last Keep
// (2) are kept: a job whose nodes crashed between two saves still finds a
// step that every node has.

// Checkpointer saves and restores one node's checkpoints.
type Checkpointer struct {
	Dir   string
	Every int    // save after every Every steps (0: never)
	Node  string // "local", "pserver-1"
	Model string
	Keep  int // checkpoints kept (0: 2)
	// Prom, when set, learns of every checkpoint saved or restored: the
	// node's Prometheus gauges (psgraph_checkpoint_age_seconds).
	Prom Watcher
	// Meta is written into every checkpoint's metadata beside its own
	// keys: a local run's normalization statistics (NormMeta).
	Meta map[string]string
}

// Watcher learns of a node's checkpoints (exec/metrics' Node is one):
// the step of each saved or restored, and when its file was written.
type Watcher interface {
	Checkpointed(step int64, at time.Time)
}

// checkpointed tells the watcher, if any.
func (c *Checkpointer) checkpointed(step int64, at time.Time) {
	if c.Prom != nil {
		c.Prom.Checkpointed(step, at)
	}
}

// Metadata reads the metadata of the checkpoint of step (its header
// only).
func (c *Checkpointer) Metadata(step int64) (map[string]string, error) {
	meta, err := SafetensorsMeta(c.file(step))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return meta, nil
}

// Manifest lists a node's checkpoints.
type Manifest struct {
	Node  string  `json:"node"`
	Model string  `json:"model"`
	Steps []int64 `json:"steps"` // oldest first
}

func (c *Checkpointer) manifestPath() string { return filepath.Join(c.Dir, c.Node+".json") }

func (c *Checkpointer) file(step int64) string {
	return filepath.Join(c.Dir, c.Node+".step-"+strconv.FormatInt(step, 10)+".safetensors")
}

// Manifest reads the node's manifest; ok is false when there is none.
func (c *Checkpointer) Manifest() (m Manifest, ok bool, err error) {
	b, err := os.ReadFile(c.manifestPath())
	if os.IsNotExist(err) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("%s: %v (remove the checkpoint directory to start afresh)", c.manifestPath(), err)
	}
	if m.Model != "" && c.Model != "" && m.Model != c.Model {
		return m, false, fmt.Errorf("%s holds checkpoints of model %q, not %q; use another --checkpoint-dir", c.manifestPath(), m.Model, c.Model)
	}
	return m, len(m.Steps) > 0, nil
}

// Save writes the tensors as the checkpoint of step and drops the oldest
// beyond Keep.
func (c *Checkpointer) Save(step int64, tensors map[string]*tensor.Tensor) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	meta := map[string]string{"node": c.Node, "model": c.Model, "step": strconv.FormatInt(step, 10), "format": "pt"}
	for k, v := range c.Meta {
		if _, own := meta[k]; !own {
			meta[k] = v
		}
	}
	if err := SaveSafetensors(c.file(step), tensors, meta); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	m, _, err := c.Manifest()
	if err != nil {
		return err
	}
	m.Node, m.Model = c.Node, c.Model
	steps := []int64{}
	for _, s := range m.Steps {
		if s != step {
			steps = append(steps, s)
		}
	}
	steps = append(steps, step)
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	keep := c.Keep
	if keep <= 0 {
		keep = 2
	}
	var drop []int64
	if len(steps) > keep {
		drop, steps = steps[:len(steps)-keep], steps[len(steps)-keep:]
	}
	m.Steps = steps
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := atomicfile.WriteBytes(c.manifestPath(), append(b, '\n')); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, s := range drop {
		os.Remove(c.file(s))
	}
	c.checkpointed(step, time.Now())
	return nil
}

// Load reads the checkpoint of step.
func (c *Checkpointer) Load(step int64) (map[string]*tensor.Tensor, error) {
	ts, meta, err := LoadSafetensors(c.file(step))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if meta["step"] != strconv.FormatInt(step, 10) || meta["node"] != c.Node {
		return nil, fmt.Errorf("checkpoint %s is of node %q step %s, not %s step %d", c.file(step), meta["node"], meta["step"], c.Node, step)
	}
	return ts, nil
}

// Restore fills the persistent variables of a scope from the checkpoint of
// step; every one of them must be in it, with its shape.
func (c *Checkpointer) Restore(step int64, persistent map[string]*tensor.Tensor) error {
	_, err := c.RestoreOptional(step, persistent, nil)
	return err
}

// RestoreOptional is Restore, and also copies each tensor of optional the
// checkpoint holds with the same dtype and shape: a run's own state that
// a checkpoint may lack (one written before psgraph kept it, or for
// another window size). It says which it copied.
func (c *Checkpointer) RestoreOptional(step int64, persistent, optional map[string]*tensor.Tensor) (map[string]bool, error) {
	ts, err := c.Load(step)
	if err != nil {
		return nil, err
	}
	for name, t := range persistent {
		src, ok := ts[name]
		if !ok {
			return nil, fmt.Errorf("checkpoint %s has no %q: it was written for another placement; use a fresh --checkpoint-dir", c.file(step), name)
		}
		if !src.Shape.Equal(t.Shape) || src.DType != t.DType {
			return nil, fmt.Errorf("checkpoint %s: %q is %s%v, the model has %s%v", c.file(step), name, src.DType, src.Shape, t.DType, t.Shape)
		}
		t.CopyFrom(src)
	}
	got := map[string]bool{}
	for name, t := range optional {
		if src, ok := ts[name]; ok && src.Shape.Equal(t.Shape) && src.DType == t.DType {
			t.CopyFrom(src)
			got[name] = true
		}
	}
	if fi, err := os.Stat(c.file(step)); err == nil {
		c.checkpointed(step, fi.ModTime())
	}
	return got, nil
}

// ResumeStep finds the step to resume from: want when it is >= 0 (it must
// be kept), else the newest checkpoint; -1 when there is none.
func (c *Checkpointer) ResumeStep(want int64) (int64, error) {
	if c == nil || c.Dir == "" {
		if want > 0 {
			return 0, fmt.Errorf("--resume-step needs --checkpoint-dir")
		}
		return -1, nil
	}
	m, ok, err := c.Manifest()
	if err != nil || !ok {
		if want > 0 {
			return 0, fmt.Errorf("%s has no checkpoint of step %d", c.Dir, want)
		}
		return -1, err
	}
	if want < 0 {
		return m.Steps[len(m.Steps)-1], nil
	}
	for _, s := range m.Steps {
		if s == want {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%s keeps checkpoints of steps %v of %s, not %d", c.Dir, m.Steps, c.Node, want)
}

// CommonCheckpoint returns the newest step that every node (named as
// Checkpointer.Node names it: "pserver-1") has a checkpoint of in dir (0
// when none has any): where a rerun of the whole job resumes.
func CommonCheckpoint(dir string, nodes []string) (int64, error) {
	var common map[int64]int
	none := 0
	for _, n := range nodes {
		m, ok, err := (&Checkpointer{Dir: dir, Node: n}).Manifest()
		if err != nil {
			return 0, err
		}
		if !ok {
			none++
			continue
		}
		if common == nil {
			common = map[int64]int{}
		}
		for _, s := range m.Steps {
			common[s]++
		}
	}
	switch {
	case none == len(nodes):
		return 0, nil
	case none > 0:
		return 0, fmt.Errorf("%s holds checkpoints of some pservers but not all; use a fresh --checkpoint-dir", dir)
	}
	best := int64(-1)
	for s, n := range common {
		if n == len(nodes) && s > best {
			best = s
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("the pservers' checkpoints in %s share no step; use a fresh --checkpoint-dir", dir)
	}
	return best, nil
}
