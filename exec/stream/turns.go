package stream

import "time"

// Turns decides the order a reader takes its partitions' records in
// (the Kafka source's): round robin, one record of each partition in
// turn, each partition in offset order. While every partition has
// records the order is strict, and depends only on what they hold. A
// partition that has had no record for IdleAfter while another had some
// is idle: it is passed over for its turns until it has records again
// (IdleAfter 0: never; a partition with nothing then holds the round
// robin up), so an empty partition does not stall training.
//
// A skip makes the batches depend on when records arrived, never which
// records are trained: the position after each record (Position) holds
// the next offset of every partition and the turn after the record taken,
// so a checkpoint names exactly the rows trained, and a reader opened at
// it takes the next record of each partition. Nothing of a skip is in the
// position: a resumed reader gives an empty partition IdleAfter again.
//
// Turns is pure: Next takes which partitions hold records and the time,
// and answers; the source does the waiting.
type Turns struct {
	idleAfter time.Duration
	turn      int
	// since is when partition i was first seen empty while another held
	// records (zero: not so); idle, whether it is passed over.
	since []time.Time
	idle  []bool
	skips int64
}

// NewTurns is the order of n partitions, starting at turn.
func NewTurns(n, turn int, idleAfter time.Duration) *Turns {
	return &Turns{idleAfter: idleAfter, turn: turn, since: make([]time.Time, n), idle: make([]bool, n)}
}

// Choice is what Next decides: take partition Take's next record, or
// (Take < 0) wait until a partition gets records or, when Until is not
// zero, until then, and ask again. Idle lists the partitions that this
// decision found idle (an episode starts: say so once), Back the idle
// partitions that have records again (it ends).
type Choice struct {
	Take       int
	Until      time.Time
	Idle, Back []int
}

// Next decides what comes next, has[i] saying whether partition i holds
// a record now.
func (t *Turns) Next(has []bool, now time.Time) Choice {
	c := Choice{Take: -1}
	n, holding := len(has), 0
	for _, h := range has {
		if h {
			holding++
		}
	}
	for i, h := range has {
		switch {
		case h:
			if t.idle[i] {
				t.idle[i] = false
				c.Back = append(c.Back, i)
			}
			t.since[i] = time.Time{}
		case holding == 0:
			t.since[i] = time.Time{} // nobody holds anybody up
		case t.since[i].IsZero():
			t.since[i] = now
		}
	}
	if holding == 0 {
		return c
	}
	for i := t.turn; ; i = (i + 1) % n {
		if has[i] {
			t.turn, c.Take = (i+1)%n, i
			return c
		}
		if t.idleAfter <= 0 {
			return c // strict: wait for it
		}
		if !t.idle[i] && now.Sub(t.since[i]) < t.idleAfter {
			c.Until = t.since[i].Add(t.idleAfter)
			t.turn = i
			return c
		}
		if !t.idle[i] {
			t.idle[i] = true
			c.Idle = append(c.Idle, i)
		}
		t.skips++ // another holds records: i is passed over
	}
}

// IdleAfter is how long a partition may be empty before it is passed over.
func (t *Turns) IdleAfter() time.Duration { return t.idleAfter }

// Skips is the number of turns passed over so far.
func (t *Turns) Skips() int64 { return t.skips }

// Turn is the partition whose turn it is.
func (t *Turns) Turn() int { return t.turn }
