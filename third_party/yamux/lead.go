package yamux

// Reading the connection in the goroutine that waits for a frame
// (psgraph's patch; README.psgraph.md).
//
// Upstream reads the connection in one receive loop goroutine, which hands
// every frame on: a caller waiting for a message is woken by it, one
// goroutine hand-off per message on top of the kernel's wake-up of the
// loop. On a loaded machine with idle cores a wake-up also starts another
// thread to run the woken goroutine, which doubled a 64-byte round trip.
//
// Here whoever holds the session's read token reads frames and handles
// them. A goroutine waiting for something a frame of this session brings
// calls Lead: if the token is free it reads the connection itself until
// its wake channel is signalled, and the kernel wakes it, not a loop. The
// receive loop is the fallback: it reads whenever no leader has read for
// idleRead, at once when a goroutine demands frames (a writer waiting for
// its window, a Read of a payload, a ping), and while the session closes.
// A leader that arrives while the loop waits in a read kicks it (Kicker:
// the read returns ErrYield at the frame boundary) and takes over.
//
// The decisions are under rd.mu; reads are not. Nothing depends on who
// reads for correctness: a frame is handled the same by any reader, and
// some goroutine always reads within idleRead.

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Kicker is a connection whose read in progress (or next read) can be
// made to return ErrYield without a byte, once, without losing anything:
// psgraph's connection sets a read deadline in the past. Sessions over a
// connection that is no Kicker read only in the receive loop (Lead
// returns false at once).
type Kicker interface {
	Kick()
}

// ErrYield is what a Kicker's read returns after Kick: no bytes, the
// connection intact.
var ErrYield = errors.New("yamux: read yielded")

// idleRead is how long after a leader's last read the receive loop
// starts reading on its own. Frames nobody waits for (a ping, a window
// update no writer waits for yet, a message read ahead of its recv) wait
// at most this long in the kernel.
const idleRead = time.Millisecond

// reading is a session's read token and who waits for it.
type reading struct {
	mu       sync.Mutex
	kickable bool
	held     bool          // a goroutine reads the connection
	holder   chan struct{} // the leader reading (nil: the receive loop)
	inRead   bool          // the holder waits in a read at a frame boundary
	waiting  []chan struct{}
	free     []chan struct{} // waiting's channels, recycled
	demand   int             // goroutines waiting for frames that lead no read
	err      error           // a leader's fatal error: the loop reads no more
	turn     chan struct{}   // the receive loop's turn to read (cap 1)
	idle     *time.Timer     // runs idleTurn
	armed    bool            // idle is set
	lastRead time.Time       // a leader's last release of the token

	led, looped atomic.Uint64 // frames read by leaders, by the receive loop

	// Only the token's holder uses these.
	hdr      header
	boundary bool // the holder's read is at a frame boundary: it may yield
}

// connReader is the connection as the session's bufio.Reader reads it: a
// read kicked in the middle of a frame is read again, only one at a frame
// boundary yields.
type connReader struct{ s *Session }

func (r connReader) Read(b []byte) (int, error) {
	for {
		n, err := r.s.conn.Read(b)
		if err != ErrYield || r.s.rd.boundary {
			return n, err
		}
	}
}

func (s *Session) initReading() {
	_, s.rd.kickable = s.conn.(Kicker)
	s.rd.turn = make(chan struct{}, 1)
	s.rd.hdr = header(make([]byte, headerSize))
	s.rd.idle = time.AfterFunc(time.Hour, s.idleTurn)
	s.rd.idle.Stop()
	s.rd.turn <- struct{}{} // the loop reads from the start
}

// idleTurn gives the receive loop its turn when no leader read for
// idleRead. The timer is set once, not at every release (a timer update
// costs a lock of the runtime's timers, a tenth of a round trip): if a
// leader read since, it is set again for the rest.
func (s *Session) idleTurn() {
	s.rd.mu.Lock()
	s.rd.armed = false
	if !s.rd.held {
		if left := idleRead - time.Since(s.rd.lastRead); left > 0 {
			s.rd.idle.Reset(left)
			s.rd.armed = true
		} else {
			asyncNotify(s.rd.turn)
		}
	}
	s.rd.mu.Unlock()
}

// handOnLocked says who reads next after the token was freed: the first
// waiting leader, the receive loop if frames are demanded or the session
// closes, else the loop after idleRead.
func (s *Session) handOnLocked() {
	if s.rd.held {
		return
	}
	closed := s.IsClosed()
	switch {
	case len(s.rd.waiting) > 0 && !closed:
		asyncNotify(s.rd.waiting[0])
	case s.rd.demand > 0 || closed:
		asyncNotify(s.rd.turn)
	default:
		s.rd.lastRead = time.Now()
		if !s.rd.armed {
			s.rd.idle.Reset(idleRead)
			s.rd.armed = true
		}
	}
}

func (s *Session) release() {
	s.rd.mu.Lock()
	s.rd.held, s.rd.holder = false, nil
	s.handOnLocked()
	s.rd.mu.Unlock()
}

// Demand is called by a goroutine about to wait for frames it does not
// read itself; the returned func ends the demand. The receive loop reads
// while any is demanded.
func (s *Session) demandFrames() func() {
	s.rd.mu.Lock()
	s.rd.demand++
	if !s.rd.held {
		asyncNotify(s.rd.turn)
	}
	s.rd.mu.Unlock()
	return s.undemand
}

func (s *Session) undemand() {
	s.rd.mu.Lock()
	s.rd.demand--
	s.rd.mu.Unlock()
}

// errYield: the reader stops at a frame boundary (kicked, or its wake
// channel was signalled, or a leader waits for the receive loop's token).
var errYield = errors.New("yamux: yield the read token")

// readFrame reads one frame and handles it; the caller holds the token.
// wake is the leader's channel (nil: the receive loop). At a frame
// boundary it returns errYield instead of reading when the leader was
// woken or, for the receive loop, a leader waits; and when a Kick ends
// the read.
func (s *Session) readFrame(wake chan struct{}) error {
	hdr := s.rd.hdr
	n := 0
	if s.bufRead.Buffered() == 0 {
		s.rd.mu.Lock()
		if (wake != nil && len(wake) > 0) || (wake == nil && len(s.rd.waiting) > 0 && !s.IsClosed()) {
			s.rd.mu.Unlock()
			return errYield
		}
		s.rd.inRead = true
		s.rd.mu.Unlock()
		s.rd.boundary = true
		var err error
		n, err = s.bufRead.Read(hdr)
		s.rd.boundary = false
		s.rd.mu.Lock()
		s.rd.inRead = false
		s.rd.mu.Unlock()
		if err == ErrYield {
			return errYield
		}
		if err != nil {
			return s.readErr(err)
		}
	}
	if _, err := io.ReadFull(s.bufRead, hdr[n:]); err != nil {
		return s.readErr(err)
	}
	if wake != nil {
		s.rd.led.Add(1)
	} else {
		s.rd.looped.Add(1)
	}
	return s.handle(hdr)
}

// FramesRead returns how many frames leaders (Lead) and the receive loop
// have read.
func (s *Session) FramesRead() (led, loop uint64) {
	return s.rd.led.Load(), s.rd.looped.Load()
}

// Lead has the caller read the session's connection while it waits for
// wake (a channel of capacity 1 that others signal, and Nudge after
// signalling): it returns true once wake holds a signal (left there for
// the caller to take). When another goroutine leads, the caller waits
// for the token or its signal. It returns false at once if the session
// cannot be led (a connection that is no Kicker) or is closed, and when
// it closes or the leader's read failed; the caller then waits as it
// would without.
func (s *Session) Lead(wake chan struct{}) bool {
	if !s.rd.kickable {
		return false
	}
	var tok chan struct{}
	defer func() {
		if tok != nil {
			s.rd.mu.Lock()
			s.unwaitLocked(tok)
			s.rd.mu.Unlock()
		}
	}()
	for {
		s.rd.mu.Lock()
		if len(wake) > 0 {
			s.rd.mu.Unlock()
			return true
		}
		if s.IsClosed() || s.rd.err != nil {
			s.rd.mu.Unlock()
			return false
		}
		if !s.rd.held {
			if tok != nil {
				s.unwaitLocked(tok)
				tok = nil
			}
			s.rd.held, s.rd.holder = true, wake
			s.rd.mu.Unlock()
			var err error
			for {
				err = s.readFrame(wake)
				if err == errYield {
					if len(wake) > 0 {
						err = nil
						break
					}
					continue // a kick meant for another reader
				}
				if err != nil {
					break
				}
			}
			if err != nil {
				s.rd.mu.Lock()
				s.rd.err = err
				s.rd.mu.Unlock()
			}
			s.release()
			if err != nil {
				go s.exitErr(err)
				return false
			}
			continue
		}
		if tok == nil {
			if n := len(s.rd.free); n > 0 {
				tok, s.rd.free = s.rd.free[n-1], s.rd.free[:n-1]
			} else {
				tok = make(chan struct{}, 1)
			}
			s.rd.waiting = append(s.rd.waiting, tok)
		}
		if s.rd.holder == nil && s.rd.inRead {
			s.conn.(Kicker).Kick() // the receive loop reads: take over
		}
		s.rd.mu.Unlock()
		select {
		case <-wake:
			asyncNotify(wake) // the caller's to take
		case <-tok:
		case <-s.shutdownCh:
			return false
		}
	}
}

// unwaitLocked removes a waiting leader's token channel. A free token
// goes on to the next reader: this leader may have been given it (the
// signal taken or not) and leaves without reading.
func (s *Session) unwaitLocked(tok chan struct{}) {
	for i, w := range s.rd.waiting {
		if w == tok {
			s.rd.waiting = append(s.rd.waiting[:i], s.rd.waiting[i+1:]...)
			break
		}
	}
	select {
	case <-tok:
	default:
	}
	s.rd.free = append(s.rd.free, tok)
	s.handOnLocked()
}

// Nudge is called after signalling a leader's wake channel: a leader
// that waits in a read for the next frame is kicked, so it sees the
// signal now rather than at the next frame.
func (s *Session) Nudge(wake chan struct{}) {
	s.rd.mu.Lock()
	if s.rd.held && s.rd.holder == wake && s.rd.inRead {
		s.conn.(Kicker).Kick()
	}
	s.rd.mu.Unlock()
}
