package modelfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Normalization statistics travel with a model's parameters in the
// safetensors metadata: normalize (the mode), normalize_shift and
// normalize_scale (JSON arrays, one number per feature column, exact to
// the bit: float64 written with the shortest round-trip form).
//
// The vocabularies the data was mapped by (data.Vocabs) travel there too,
// as vocabs: a JSON object from each spec's key (data.ids[1]) to its
// vocabularies' words, a word's place its id.
const (
	metaNormalize = "normalize"
	metaShift     = "normalize_shift"
	metaScale     = "normalize_scale"
	metaVocabs    = "vocabs"
)

func normMeta(meta map[string]string, sc *data.Scaling) {
	if sc == nil {
		return
	}
	if sc.Vocabs != nil {
		b, _ := json.Marshal(sc.Vocabs)
		meta[metaVocabs] = string(b)
	}
	if sc.Shift == nil {
		meta[metaNormalize] = sc.Mode
		return
	}
	list := func(xs []float64) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	meta[metaNormalize], meta[metaShift], meta[metaScale] = sc.Mode, list(sc.Shift), list(sc.Scale)
}

// NormMeta is the metadata of normalization statistics sc (nil: none),
// as a saved model holds them.
func NormMeta(sc *data.Scaling) map[string]string {
	meta := map[string]string{}
	normMeta(meta, sc)
	return meta
}

// NormFromMeta reads the normalization statistics saved with a model (nil
// when the file has none).
func NormFromMeta(file string, meta map[string]string) (*data.Scaling, error) {
	mode, ok := meta[metaNormalize]
	if !ok {
		return nil, nil
	}
	sc := &data.Scaling{Mode: mode}
	if v, ok := meta[metaVocabs]; ok {
		if json.Unmarshal([]byte(v), &sc.Vocabs) != nil {
			return nil, fmt.Errorf("%s: the vocabularies in the file's metadata are malformed; save the model again", file)
		}
	}
	if _, ok := meta[metaShift]; !ok {
		return sc, nil
	}
	if json.Unmarshal([]byte(meta[metaShift]), &sc.Shift) != nil || json.Unmarshal([]byte(meta[metaScale]), &sc.Scale) != nil || len(sc.Shift) != len(sc.Scale) {
		return nil, fmt.Errorf("%s: the normalization statistics in the file's metadata are malformed; save the model again", file)
	}
	return sc, nil
}

// SavedScaling is the normalization a run started --init-from file takes:
// the statistics the file carries (a model saved by run or train), which
// its parameters were trained for, instead of the data's own; nil when
// the file holds none (an initial file drawn elsewhere) or there is no
// file. The model's data.normalize must be the file's mode: one that
// differs, none included, is refused at data.normalize. It reads the
// file's header only.
func SavedScaling(g *dsl.Graph, file string) (*data.Scaling, error) {
	if file == "" || g.Data == nil {
		return nil, nil
	}
	meta, err := SafetensorsMeta(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--init-from %s: no such file; give the path of a safetensors file: a model run or train saved (--save), or initial values named as the model's parameters", file)
	}
	if err != nil {
		return nil, fmt.Errorf("--init-from: %w", err)
	}
	sc, err := NormFromMeta(file, meta)
	if err != nil || sc == nil {
		return nil, err
	}
	return sc, sameMode(g, sc, "--init-from "+file)
}

// CheckpointScaling is the normalization a local run resumed from its
// checkpoint of step takes: the statistics that checkpoint was trained
// with (Checkpointer.Meta), which may be another file's (--init-from)
// than the data's own; nil when it holds none.
func CheckpointScaling(g *dsl.Graph, ck *Checkpointer, step int64) (*data.Scaling, error) {
	meta, err := ck.Metadata(step)
	if err != nil {
		return nil, err
	}
	sc, err := NormFromMeta(ck.file(step), meta)
	if err != nil || sc == nil {
		return nil, err
	}
	return sc, sameMode(g, sc, "the checkpoint "+ck.file(step))
}

// sameMode refuses statistics of another mode than the model's.
func sameMode(g *dsl.Graph, sc *data.Scaling, what string) error {
	if mode := g.Data.Normalize; sc.Mode != mode {
		pos := g.Data.NormalizePos
		if pos.Line == 0 {
			pos = g.Data.Pos
		}
		return dsl.Errorf(pos, "data.normalize is %s, and %s was saved with its features normalized by %s (its parameters were trained on them so); set normalize: %s to go on from it, or start from a file without normalization statistics", mode, what, sc.Mode, sc.Mode)
	}
	return nil
}

// MetaStep is the metadata key of the training step a file holds: the
// steps applied to its parameters (a model file's, a checkpoint's), which
// `psgraph serve` reports as the model's version.
const MetaStep = "step"

// StepOf is the training step a file's metadata records, and false for a
// file without one (written before psgraph recorded it, or elsewhere).
func StepOf(meta map[string]string) (int64, bool) {
	s, ok := meta[MetaStep]
	if !ok {
		return 0, false
	}
	k, err := strconv.ParseInt(s, 10, 64)
	return k, err == nil && k >= 0
}

// SaveModel writes the named tensors of a scope and the normalization
// statistics of the training data (nil: none) to a safetensors file
// holding training step step (its metadata's MetaStep; < 0: not known,
// not recorded).
func SaveModel(path, model string, step int64, names []string, s map[string]*tensor.Tensor, norm *data.Scaling) error {
	return SaveModelStreamed(path, model, step, names, s, norm, nil)
}

// SaveModelStreamed is SaveModel with more tensors whose data is written
// as the file is (a sharded table pulled from the pservers chunk by
// chunk): the file is the one SaveModel writes of all of them at once.
func SaveModelStreamed(path, model string, step int64, names []string, s map[string]*tensor.Tensor, norm *data.Scaling, more []Entry) error {
	out := map[string]*tensor.Tensor{}
	for _, name := range names {
		if t, ok := s[name]; ok {
			out[name] = t
		}
	}
	meta := map[string]string{"model": model, "format": "pt"}
	if step >= 0 {
		meta[MetaStep] = strconv.FormatInt(step, 10)
	}
	normMeta(meta, norm)
	entries := make([]Entry, 0, len(out)+len(more))
	for n, t := range out {
		entries = append(entries, Entry{Name: n, DType: t.DType, Shape: t.Shape, Write: func(w io.Writer) error {
			_, err := w.Write(t.Bytes())
			return err
		}})
	}
	for _, e := range more {
		if _, dup := out[e.Name]; !dup {
			entries = append(entries, e)
		}
	}
	return SaveStreamed(path, entries, meta)
}

// LoadModel reads a model's parameters and its own state (dsl.ModelVars)
// from a safetensors file, checking that each is there with the model's
// shape, and the
// normalization statistics saved with them. A file without statistics
// (written by a pserver checkpoint, or before psgraph saved them) gets
// those of the model's training data, computed again, and a warning.
func LoadModel(g *dsl.Graph, file string, log zerolog.Logger) (map[string]*tensor.Tensor, *data.Scaling, error) {
	m, err := ReadModel(g, file, log)
	return m.Tensors, m.Norm, err
}

// Model is a model file as read: the model's parameters and state, the
// normalization statistics saved with them, and the training step the
// file holds (Step, when HasStep).
type Model struct {
	Tensors map[string]*tensor.Tensor
	Norm    *data.Scaling
	Step    int64
	HasStep bool
}

// ReadModel is LoadModel with the step the file records (StepOf).
func ReadModel(g *dsl.Graph, file string, log zerolog.Logger) (Model, error) {
	ts, meta, err := LoadSafetensors(file)
	if err != nil {
		return Model{}, err
	}
	step, has := StepOf(meta)
	params, norm, err := modelOf(g, file, log, ts, meta)
	return Model{Tensors: params, Norm: norm, Step: step, HasStep: has}, err
}

// modelOf checks a file's tensors against model g and takes its
// statistics.
func modelOf(g *dsl.Graph, file string, log zerolog.Logger, ts map[string]*tensor.Tensor, meta map[string]string) (map[string]*tensor.Tensor, *data.Scaling, error) {
	types, err := g.Infer(1)
	if err != nil {
		return nil, nil, err
	}
	params := map[string]*tensor.Tensor{}
	for _, name := range g.ModelVars() { // parameters, and state such as batch_norm's statistics
		t, ok := ts[name]
		if !ok {
			what := "parameter"
			if g.Vars[name].Kind == dsl.KindState {
				what = "state variable"
			}
			return nil, nil, fmt.Errorf("%s: %s %q of %s is missing from the file; give the file psgraph saved for this model (--save)", file, what, name, g.File)
		}
		ty := types[name]
		if dy := g.Vars[name].Dynamic; dy != nil {
			// a dynamic table: its keys and their rows, checked when read (program.ReadTable)
			keys, ok := ts[dyntable.KeysName(name)]
			if !ok {
				return nil, nil, fmt.Errorf("%s: the keys %q of dynamic table %s are missing from the file; give the file psgraph saved for this model (--save)", file, dyntable.KeysName(name), name)
			}
			if len(t.Shape) != 2 || t.Shape[1] != dy.Dim || t.DType != tensor.F32 {
				return nil, nil, fmt.Errorf("%s: %q is %s%v in the file, but dynamic table %s of %s has rows of dim %d; the file belongs to another model", file, name, t.DType, t.Shape, name, g.File, dy.Dim)
			}
			params[name], params[dyntable.KeysName(name)] = t, keys
			continue
		}
		if !t.Shape.Equal(ty.Shape) || t.DType != ty.DType {
			return nil, nil, fmt.Errorf("%s: %q is %s%v in the file but %s%v in %s; the file belongs to another model", file, name, t.DType, t.Shape, ty.DType, ty.Shape, g.File)
		}
		params[name] = t
	}
	norm, err := NormFromMeta(file, meta)
	if err != nil {
		return nil, nil, err
	}
	if d := g.Data; norm == nil && d != nil && d.Normalize != "none" && d.Features != nil || norm == nil && d.BuildsVocab() {
		log.Warn().Str("file", file).Msg("the file has no normalization statistics or vocabularies; using those of the model's training data, computed again")
		if d.Stream {
			f, err := data.OpenStream(d)
			if err != nil {
				return nil, nil, err
			}
			norm = f.Scaling()
			f.Close()
		} else {
			sp, err := data.LoadSplit(d, nil)
			if err != nil {
				return nil, nil, err
			}
			norm = sp.Norm
		}
	}
	return params, norm, nil
}

// SaveTensors writes the named tensors of a scope, at training step step
// (< 0: not recorded), to a safetensors file.
func SaveTensors(path, model string, step int64, names []string, s map[string]*tensor.Tensor) error {
	return SaveModel(path, model, step, names, s, nil)
}
