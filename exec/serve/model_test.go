package serve

import (
	"context"
	"maps"
	"reflect"
	"testing"
)

// A new version, swapped in whole (a reload) or by updates, is given the
// programs the requests on the version before it use before it is served,
// so no request on it waits for a compile: after Swap and after each
// Apply, requests of the batch sizes and outputs served before compile
// nothing, and answer what a model made with the new parameters answers.
func TestNewVersionsAreWarm(t *testing.T) {
	g := digits(t)
	params := []Params{randomParams(t, g, 1), randomParams(t, g, 2), randomParams(t, g, 3), randomParams(t, g, 4)}
	for i := range params[2:] {
		params[2+i].Norm = params[1].Norm // updates leave the statistics as the swap set them
	}
	m, err := NewModel(g, params[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*Request
	for _, body := range [][]byte{
		rowsBody(digitRows(40, 7)),
		[]byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[3],"data":["` + digitRows(1, 8)[0] + `","` + digitRows(1, 9)[0] + `","` + digitRows(1, 10)[0] + `"]}],"outputs":[{"name":"pred"}]}`),
	} {
		req, err := DecodeRequest(body, m.Meta())
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	answers := func(m *Model) []Result {
		out := make([]Result, len(reqs))
		for i, req := range reqs {
			if err := m.Infer(context.Background(), req, &out[i]); err != nil {
				t.Fatal(err)
			}
			out[i].Version = 0
		}
		return out
	}
	made := func() map[poolKey]int {
		v := m.cur.Load()
		v.mu.Lock()
		defer v.mu.Unlock()
		n := map[poolKey]int{}
		for k, mk := range v.made {
			n[k] = mk.n
		}
		return n
	}
	answers(m) // the programs of version 0
	before := made()
	if len(before) != 2 {
		t.Fatalf("the requests made programs %v, want one of each of two keys", before)
	}
	check := func(what string, p Params) {
		t.Helper()
		if got := made(); !maps.Equal(got, before) {
			t.Errorf("%s: the new version holds programs %v, want %v", what, got, before)
		}
		want, err := NewModel(g, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := answers(m), answers(want); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the model answers pred %v, a model of its parameters %v", what, got[0].Outputs[0].Ints, want[0].Outputs[0].Ints)
		}
		if got := made(); !maps.Equal(got, before) {
			t.Errorf("%s: requests compiled programs: the version holds %v, want %v", what, got, before)
		}
	}
	m.Swap(params[1])
	check("after a swap", params[1])
	for step, p := range params[2:] {
		u := Update{Step: int64(step + 1)}
		for name, t := range p.Tensors {
			u.Dense = append(u.Dense, DenseValues{Name: name, Values: t.F})
		}
		if err := m.Apply(u); err != nil {
			t.Fatal(err)
		}
		check("after an update", p)
	}
}
