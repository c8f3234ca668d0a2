package transport

import (
	"errors"
	"testing"
)

// The message stream's send log keeps more as more transfers share it:
// its ring grows after it wrapped and still lists the kept messages
// oldest first; a resume point past what it holds, or before it, is
// unrecoverable.
func TestSendLogGrowsAfterWrapping(t *testing.T) {
	tcp := &TCP{peers: map[NodeID]*peer{}}
	p := &peer{t: tcp, slots: make(chan struct{}, 16)}
	l := sendLog{p: p, limit: 3}
	keep := func(step int64) int64 {
		p.slots <- struct{}{}
		tcp.pending++
		return l.keep(item{kind: kindData, v: "g", step: step})
	}
	for s := int64(0); s < 5; s++ { // 0..4: the ring holds 2, 3, 4, its first at index 2
		idx := keep(s)
		l.written(l.at(idx))
	}
	if l.at(1) != nil || l.at(2).it.step != 2 || l.at(4).it.step != 4 {
		t.Fatalf("after wrapping: at(1) %v, at(2) %+v, at(4) %+v", l.at(1), l.at(2), l.at(4))
	}
	l.limit = 6
	for s := int64(5); s < 8; s++ { // 5, 6, 7 join 2, 3, 4; then 8 replaces 2
		keep(s)
	}
	keep(8)
	var steps []int64
	for idx := int64(3); idx <= 8; idx++ {
		steps = append(steps, l.at(idx).it.step)
	}
	if l.at(2) != nil || len(steps) != 6 || steps[0] != 3 || steps[5] != 8 {
		t.Fatalf("after growing: at(2) %v, steps %v", l.at(2), steps)
	}
	idxs, err := l.lacking(resumePoint{count: 6}, nil)
	if err != nil || len(idxs) != 3 || idxs[0] != 6 || idxs[2] != 8 {
		t.Fatalf("the peer has 6: lacking %v, %v; want 6, 7, 8", idxs, err)
	}
	if _, err := l.lacking(resumePoint{count: 2}, nil); !errors.Is(err, errUnrecoverable) {
		t.Fatalf("the peer needs message 2, no longer kept: %v", err)
	}
	if _, err := l.lacking(resumePoint{count: 10}, nil); !errors.Is(err, errUnrecoverable) {
		t.Fatalf("the peer has more than was sent: %v", err)
	}
}
