package data

import "github.com/psgraph/psgraph/dsl"

// TrainingScaling is the normalization statistics a run computes from a
// model's training data (nil: the model normalizes nothing): those of a
// streamed file, or of the rows a data.eval fraction leaves for training.
// A serving replica following a job computes them as the job's trainers
// did.
func TrainingScaling(spec *dsl.Data) (*Scaling, error) {
	if (spec.Normalize == "" || spec.Normalize == "none" || spec.Features == nil) && !spec.BuildsVocab() {
		return nil, nil
	}
	if spec.Stream {
		f, err := OpenStream(spec)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return f.Scaling(), nil
	}
	sp, err := LoadSplit(spec, nil)
	if err != nil {
		return nil, err
	}
	return sp.Norm, nil
}
