package data

import "github.com/psgraph/psgraph/dsl"

// Load reads the training rows of a model's data source, as LoadSplit
// does with the statistics of those rows (the held-out rows of data.eval
// left out).
func Load(spec *dsl.Data) (*Set, error) {
	sp, err := LoadSplit(spec, nil)
	if err != nil {
		return nil, err
	}
	return sp.Train, nil
}
