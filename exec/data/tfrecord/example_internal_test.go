package tfrecord

// Test helpers on example.go's types: a Kind's name, a list's length, a
// Feature's values.

func (k Kind) String() string {
	return [...]string{"empty", "bytes_list", "float_list", "int64_list"}[k]
}

// Len is the number of values.
func (vs Values) Len() (int, error) {
	n := 0
	for {
		_, _, ok, err := vs.Next()
		if err != nil || !ok {
			return n, err
		}
		n++
	}
}

// Values walks the feature's values.
func (f *Feature) Values() Values { return Values{Kind: f.Kind, list: msg{b: f.list}} }
