package serve

import (
	"bytes"
	"context"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/psgraph/psgraph/exec/blas"
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

// A request's pooled buffers (its body, lines, outputs and response) are
// its own while it runs: 4 goroutines send requests of 1 to 97 rows, with
// and without escapes, ids and named outputs, in random order, and every
// answer is the one the request gets alone.
func TestPooledBuffersKeepRequestsApart(t *testing.T) {
	g := digits(t)
	m, err := NewModel(g, randomParams(t, g, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(m, HandlerOptions{})
	serve := func(body []byte) []byte {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v2/models/digits-mlp/infer", bytes.NewReader(body)))
		if w.Code != 200 {
			t.Errorf("%d %s", w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	var bodies, want [][]byte
	for i, n := range []int{1, 97, 3, 40, 2, 64, 7, 33} {
		lines := digitRows(n, uint64(i))
		var b []byte
		switch i % 4 {
		case 0:
			b = rowsBody(lines)
		case 1: // escapes in the id and the lines, decoded in the pooled body
			b = []byte(`{"id":"r\/` + itoa(i) + `","inputs":[{"name":"rows","datatype":"BYTES","shape":[` + itoa(n) + `],"data":["` +
				strings.ReplaceAll(strings.Join(lines, `","`), ",1,", `,1\u002c`) + `"]}]}`)
		case 2:
			b = []byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[` + itoa(n) + `,1],"data":[["` + strings.Join(lines, `"],["`) + `"]]}],"outputs":[{"name":"pred"}]}`)
		case 3:
			b = []byte(`{"id":"\t` + itoa(i) + `\n","inputs":[{"name":"rows","datatype":"BYTES","shape":[` + itoa(n) + `],"data":["` + strings.Join(lines, `", "`) + `"]}],"outputs":[{"name":"prob"},{"name":"pred"}]}`)
		}
		bodies = append(bodies, b)
		want = append(want, bytes.Clone(serve(b)))
	}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 5))
			for range 60 {
				i := r.IntN(len(bodies))
				if got := serve(bodies[i]); !bytes.Equal(got, want[i]) {
					t.Errorf("request %d answered %.120s, alone %.120s", i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A request computed while requests are computed on every core keeps its
// matmuls on its own goroutine (no block of the CTR example's top layer is
// offered to blas's helpers), one computed alone shares them, and both
// answer the same bytes: 100 rows of examples/ctr.yaml, with 0 and then
// GOMAXPROCS-1 other requests counted as being computed.
func TestRequestsOnEveryCoreKeepTheirMatmuls(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	g, p, lines := ctrServed(t, 100, 1)
	m, err := NewModel(g, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	body := rowsBody(lines)
	h := NewHandler(m, HandlerOptions{})
	serve := func(others int) (answer []byte, shared int64) {
		m.running.Store(int32(others))
		defer m.running.Store(0)
		before := blas.SharedBlocks()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v2/models/ctr/infer", bytes.NewReader(body)))
		if w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		return w.Body.Bytes(), blas.SharedBlocks() - before
	}
	alone, shared := serve(0)
	if shared == 0 {
		t.Skip("blas shares no block of this product (no helpers: its first product ran on one core, or no kernel)")
	}
	busy, shared := serve(runtime.GOMAXPROCS(0) - 1)
	if shared != 0 {
		t.Errorf("with a program on every core the request offered %d blocks to the helpers, want 0", shared)
	}
	if !bytes.Equal(busy, alone) {
		t.Errorf("serial kernels answered %.200s, shared %.200s", busy, alone)
	}
}
