package comm

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/psgraph/psgraph/transport"
)

// watch follows the restarts of a node's peers, so that a receive waiting
// for one peer wakes when another comes back as a new process: a
// restarted pserver waits for every trainer's position before it serves
// anyone, and a pserver part waiting for one trainer must send a
// restarted one its parameters. One goroutine per peer, started by the
// first receive that asks (watched) and ended by close, whatever the
// contexts of the receives that use it.
type watch struct {
	ep    transport.Endpoint
	peers []transport.NodeID

	once   sync.Once
	life   context.Context
	end    context.CancelFunc
	wg     sync.WaitGroup
	epoch  atomic.Int64 // the sum of the peers' incarnations seen so far
	mu     sync.Mutex
	rctx   context.Context // cancelled at the next restart of any peer
	cancel context.CancelFunc

	wmu     sync.Mutex
	watches map[context.Context]watched
}

// watched is a receive context of one restart epoch.
type watched struct{ rc, w context.Context }

func newWatch(ep transport.Endpoint, peers []transport.NodeID) *watch {
	life, end := context.WithCancel(context.Background())
	return &watch{ep: ep, peers: peers, life: life, end: end, watches: map[context.Context]watched{}}
}

func (w *watch) start() {
	w.rctx, w.cancel = context.WithCancel(w.life)
	for _, p := range w.peers {
		seen, _ := w.ep.Restarts(p)
		w.epoch.Add(seen)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				n, next := w.ep.Restarts(p)
				if n != seen {
					w.epoch.Add(n - seen)
					seen = n
					w.mu.Lock()
					w.cancel()
					w.rctx, w.cancel = context.WithCancel(w.life)
					w.mu.Unlock()
					continue
				}
				select {
				case <-next:
				case <-w.life.Done():
					return
				}
			}
		}()
	}
}

// Epoch is the sum of the peers' incarnations as the watch has seen them:
// it changes when any peer restarts.
func (w *watch) Epoch() int64 {
	w.once.Do(w.start)
	return w.epoch.Load()
}

// restart returns a context cancelled at the next restart of any peer.
func (w *watch) restart() context.Context {
	w.once.Do(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rctx
}

// watched returns a child of ctx cancelled at the next restart of any
// peer, with the restart context it follows. It is made once per restart
// and per ctx (a trainer's, each pserver part's), so a steady-state
// receive allocates nothing.
func (w *watch) watched(ctx context.Context) (wc, rc context.Context) {
	rc = w.restart()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	e, ok := w.watches[ctx]
	if !ok || e.rc != rc {
		c, cancel := context.WithCancel(ctx)
		context.AfterFunc(rc, cancel)
		e = watched{rc: rc, w: c}
		w.watches[ctx] = e
	}
	return e.w, rc
}

// close ends the watch's goroutines.
func (w *watch) close() {
	w.end()
	w.wg.Wait()
}

// untilRestart runs recv with a context that also ends when rc does (the
// next restart of any peer). restarted reports that recv failed because
// of that restart, not because ctx ended.
func untilRestart(ctx, rc context.Context, recv func(context.Context) error) (restarted bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(rc, cancel)
	err = recv(rctx)
	restarted = err != nil && rc.Err() != nil && ctx.Err() == nil
	stop()
	cancel()
	return restarted, err
}
