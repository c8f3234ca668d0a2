package comm

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/transport"
)

// haltJob is the stop protocol's I/O of a job of two trainers and two
// pservers on the in-memory transport: each node's communication with its
// halt started, and each node's stop channel.
type haltJob struct {
	trainers []*Halt
	stops    []chan struct{} // pserver-0, pserver-1, trainer-0, trainer-1
	closers  []func()
}

func newHaltJob(t *testing.T, async bool) *haltJob {
	t.Helper()
	ids := []transport.NodeID{transport.PServer(0), transport.PServer(1), transport.Trainer(0), transport.Trainer(1)}
	hub := transport.NewHub(nil, ids...)
	j := &haltJob{}
	for range ids {
		j.stops = append(j.stops, make(chan struct{}))
	}
	for i := range 2 {
		ep := hub.Endpoint(ids[i])
		ep.Accept(HaltSpecs(ids[i].Role)...)
		c := NewPServer(Config{EP: ep, Trainers: 2, Async: async, Log: zerolog.Nop()})
		j.closers = append(j.closers, c.StartHalt(j.stops[i]), c.Close)
	}
	for i := range 2 {
		ep := hub.Endpoint(ids[2+i])
		ep.Accept(HaltSpecs(ids[2+i].Role)...)
		c := NewTrainer(Config{EP: ep, Trainers: 2, Async: async, Log: zerolog.Nop()}, ids[:2])
		h := c.StartHalt(j.stops[2+i])
		j.trainers = append(j.trainers, h)
		j.closers = append(j.closers, h.Close, c.Close)
	}
	t.Cleanup(func() {
		for _, f := range j.closers {
			f()
		}
	})
	return j
}

// run enters steps from first on until trainer i's halt says stop, and
// sends done the steps it ran in all.
func (j *haltJob) run(t *testing.T, i int, first int64, done chan<- int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := j.trainers[i]
	k := first
	for {
		ok, err := h.Enter(ctx, k)
		if err != nil {
			t.Error(err)
			done <- -1
			return
		}
		if !ok {
			h.Ended(k)
			done <- k
			return
		}
		k++
	}
}

// Asked through any node, the trainers of a sync job agree on one last
// step over the in-memory transport: pserver-1's signal reaches both
// trainers, each proposes the steps it started and waits, and pserver-0's
// decision lets the one behind catch up. Entering a step allocates
// nothing.
func TestHaltOverTransport(t *testing.T) {
	for _, who := range []int{0, 1, 2, 3} { // pserver-0, pserver-1, trainer-0, trainer-1
		j := newHaltJob(t, false)
		done := make(chan int64, 2)
		// trainer 0 runs ahead to step 12 before the stop, trainer 1 to 11
		ctx := context.Background()
		for i, upto := range []int64{12, 11} {
			h := j.trainers[i]
			h.Started(0)
			for k := range upto {
				if ok, err := h.Enter(ctx, k); !ok || err != nil {
					t.Fatalf("trainer-%d: step %d not entered before any stop (%v)", i, k, err)
				}
			}
		}
		if allocs := testing.AllocsPerRun(100, func() { j.trainers[0].Enter(ctx, 11) }); allocs != 0 {
			t.Errorf("entering a step allocates %v times", allocs)
		}
		close(j.stops[who])
		for i := range 2 {
			select {
			case <-j.trainers[i].Asked():
			case <-time.After(time.Minute):
				t.Fatalf("signal to node %d: trainer-%d never heard the job is to stop", who, i)
			}
		}
		go j.run(t, 0, 12, done)
		go j.run(t, 1, 11, done)
		a, b := <-done, <-done
		if a != 12 || b != 12 {
			t.Fatalf("signal to node %d: the trainers ended at steps %d and %d, want both at 12", who, a, b)
		}
	}
}

// In an async job a trainer asked to stop stops at its own next step,
// without waiting for the other.
func TestHaltAsyncStopsAlone(t *testing.T) {
	j := newHaltJob(t, true)
	ctx := context.Background()
	h := j.trainers[0]
	h.Started(0)
	for k := range int64(5) {
		h.Enter(ctx, k)
	}
	close(j.stops[2])
	<-h.Asked()
	if ok, err := h.Enter(ctx, 5); ok || err != nil {
		t.Fatalf("an async trainer asked to stop entered step 5 (%v)", err)
	}
	select {
	case <-j.trainers[1].Asked(): // told through pserver-0
	case <-time.After(time.Minute):
		t.Fatal("the other trainer never heard the job is to stop")
	}
}
