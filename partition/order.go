package partition

import (
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl"
)

// Ready ops are ordered canonically by a key: forward before backward,
// then by first output, so the order never depends on the order ops were
// declared in. The key is string(rune('0'+op.Section)) followed by the
// first output, or for an op without outputs "\xff", the type, "|" and the
// inputs joined by ",". The two parts are compared one after the other,
// which orders as the concatenation does (UTF-8 is prefix-free).
var sectionKeys = func() (k [256]string) {
	for i := range k {
		k[i] = string(rune('0' + dsl.Section(i)))
	}
	return k
}()

func opKeyRest(op *dsl.Op) string {
	if len(op.Outputs) > 0 {
		return op.Outputs[0]
	}
	return "\xff" + op.Type + "|" + strings.Join(op.Inputs, ",")
}

// opHeap is container/heap's algorithm over op indices, without the
// interface calls.
type opHeap struct {
	sec  []string
	rest []string
	idx  []int32
}

func (h *opHeap) less(i, j int) bool {
	a, b := h.idx[i], h.idx[j]
	if h.sec[a] != h.sec[b] {
		return h.sec[a] < h.sec[b]
	}
	return h.rest[a] < h.rest[b]
}

func (h *opHeap) init() {
	n := len(h.idx)
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i, n)
	}
}

func (h *opHeap) push(x int32) {
	h.idx = append(h.idx, x)
	h.up(len(h.idx) - 1)
}

func (h *opHeap) pop() int32 {
	n := len(h.idx) - 1
	h.idx[0], h.idx[n] = h.idx[n], h.idx[0]
	h.down(0, n)
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}

func (h *opHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.idx[i], h.idx[j] = h.idx[j], h.idx[i]
		j = i
	}
}

func (h *opHeap) down(i0, n int) {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !h.less(j, i) {
			break
		}
		h.idx[i], h.idx[j] = h.idx[j], h.idx[i]
		i = j
	}
}

// canonicalOrder sorts ops topologically, ready ops by their key. An op
// also follows the producers of the names after returns for it (nil: no
// more than its inputs).
func canonicalOrder(list []*dsl.Op, after func(*dsl.Op) []string) []*dsl.Op {
	prod := make(map[string]int32, len(list))
	for i, op := range list {
		for _, o := range op.Outputs {
			prod[o] = int32(i)
		}
	}
	// users[start[j]:start[j+1]] are the ops reading op j's outputs, in
	// op order (once per input).
	indeg := make([]int32, len(list))
	start := make([]int32, len(list)+1)
	var edges []int32 // the producer of each input read, in op order
	for i, op := range list {
		deps := op.Inputs
		if after != nil {
			if more := after(op); len(more) > 0 {
				deps = slices.Concat(deps, more)
			}
		}
		for _, in := range deps {
			if j, ok := prod[in]; ok {
				indeg[i]++
				start[j+1]++
				edges = append(edges, j)
			}
		}
	}
	for j := range list {
		start[j+1] += start[j]
	}
	users := make([]int32, len(edges))
	next := slices.Clone(start[:len(list)])
	k := 0
	for i := range list {
		for range indeg[i] {
			j := edges[k]
			k++
			users[next[j]] = int32(i)
			next[j]++
		}
	}
	h := &opHeap{sec: make([]string, len(list)), rest: make([]string, len(list))}
	for i, op := range list {
		h.sec[i], h.rest[i] = sectionKeys[op.Section], opKeyRest(op)
		if indeg[i] == 0 {
			h.idx = append(h.idx, int32(i))
		}
	}
	h.init()
	out := make([]*dsl.Op, 0, len(list))
	for len(h.idx) > 0 {
		i := h.pop()
		out = append(out, list[i])
		for _, u := range users[start[i]:start[i+1]] {
			if indeg[u]--; indeg[u] == 0 {
				h.push(u)
			}
		}
	}
	return out
}
