package pserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A pserver answers pulls of its table shards (comm.Pull: trainer 0's
// held-out evaluation and the whole model it saves) on one goroutine per
// shard beside the parts' loops. The shard is read between two steps'
// writes (under its part's Commit lock) and only once it is as far as the
// pull asks: in a sync job once the part applied every step below the
// pull's At (the trainer that asks ran those steps, and the part cannot
// apply the next one before that trainer asks for its rows, so the rows
// it reads are those of step At); in an async job at once, or, for the
// job's end, once every other trainer finished and the part applied
// everything (comm.Part.Quiet).

// stepsApplied is how far a part is: the steps it applied (reached), and
// the pulls waiting for it to go further.
type stepsApplied struct {
	mu      sync.Mutex
	reached int64
	waiters []chan struct{}
}

// advance records that the part applied every step below k.
func (p *stepsApplied) advance(k int64) {
	p.mu.Lock()
	p.reached = k
	for _, c := range p.waiters {
		close(c)
	}
	p.waiters = p.waiters[:0]
	p.mu.Unlock()
}

// await waits until the part applied every step below k.
func (p *stepsApplied) await(ctx context.Context, k int64) error {
	for {
		p.mu.Lock()
		if p.reached >= k {
			p.mu.Unlock()
			return nil
		}
		c := make(chan struct{})
		p.waiters = append(p.waiters, c)
		p.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// puller answers the pulls of one table shard until the job ends.
type puller interface {
	serve(ctx context.Context, c Comm) error
}

// shardReader is what a fixed and a dynamic shard answer pulls with: how
// a pull is decoded and checked before the shard is read, and how its
// reply is read (under part.readAt) into a trainer's reply buffer.
type shardReader interface {
	decode(b []byte) (comm.Pull, error)
	read(r comm.Pull, buf []float32) ([]float32, error)
}

// servePulls answers the pulls of table, of rows w wide, from sr until
// every trainer is done (a finished error) or ctx ends. what names the
// table in errors.
func servePulls(ctx context.Context, c Comm, p *part, table, what string, w int, sr shardReader) error {
	buf := make([]byte, comm.PullSpec(table, w).Bytes)
	// One reply buffer per trainer: a trainer sends its next pull only
	// once it received the last reply, which may change only then.
	replies := make([][]float32, c.Trainers())
	for {
		k, b, err := c.RecvPull(ctx, table, buf)
		if err != nil {
			return err
		}
		r, bad := sr.decode(b)
		var rows []float32
		if bad == nil {
			who := k.Src.Index
			if replies[who] == nil {
				replies[who] = make([]float32, comm.PullRows(w)*w)
			}
			if err := p.readAt(ctx, c, who, r, func() { rows, bad = sr.read(r, replies[who]) }); err != nil {
				return err
			}
		}
		if bad != nil {
			return fmt.Errorf("%s pulled rows of %s: %v; nothing was served (the trainer runs another plan)", k.Src, what, bad)
		}
		if err := c.ReplyPull(ctx, k, table, rows); err != nil {
			return err
		}
	}
}

// shardServer answers the pulls of one table shard.
type shardServer struct {
	table string         // the table (the transfers' name)
	shard *tensor.Tensor // this pserver's rows of it, in local order
	part  *part
	ids   []int32
}

// shardServers lists the table shards of the parts, marking each part
// that holds one: its assigns take the Commit lock, and in an async job
// its loop tracks when it is quiet.
func shardServers(parts []*part, async bool) ([]puller, error) {
	var out []puller
	for _, p := range parts {
		for _, op := range p.prog.Graph.Ops {
			var t string
			switch op.Type {
			case "serve_rows":
				t = op.Attrs.String("var")
				out = append(out, &shardServer{table: t, shard: p.prog.Scope[op.Inputs[0]], part: p})
			case "serve_tables": // a bundle: one shard server per table, pulled by the table's name
				t = op.Attrs.String("var")
				tables, err := dsl.BundleTables(p.prog.Graph, op, nil)
				if err != nil {
					return nil, dsl.Errorf(op.Pos, "%s: %v", op.Type, err)
				}
				for i, tb := range tables {
					out = append(out, &shardServer{table: tb.Name, shard: p.prog.Scope[op.Inputs[i]], part: p})
				}
			case "dyn_serve":
				t = op.Attrs.String("transfer")
				out = append(out, &dynShardServer{table: t, t: p.prog.Tables[op.Attrs.String("var")], part: p,
					shard: op.Attrs.Int("shard"), shards: op.Attrs.Int("shards")})
			default:
				continue
			}
			p.prog.Commit = &p.commit
			if async {
				p.rv.TrackQuiet(ops.GradName(t))
			}
		}
	}
	return out, nil
}

func (s *shardServer) serve(ctx context.Context, c Comm) error {
	w := s.shard.RowWidth()
	s.ids = make([]int32, 0, comm.PullRows(w))
	return servePulls(ctx, c, s.part, s.table, s.table, w, s)
}

func (s *shardServer) decode(b []byte) (comm.Pull, error) {
	return comm.DecodePull(b, s.shard.Shape[0], s.ids)
}

// read copies the rows r asks for: a range, or a list of local rows.
func (s *shardServer) read(r comm.Pull, buf []float32) ([]float32, error) {
	w := s.shard.RowWidth()
	rows := buf[:r.Rows()*w]
	if r.IDs == nil {
		copy(rows, s.shard.F[r.First*w:(r.First+r.N)*w])
		return rows, nil
	}
	for i, id := range r.IDs {
		copy(rows[i*w:(i+1)*w], s.shard.F[int(id)*w:(int(id)+1)*w])
	}
	return rows, nil
}

// readAt runs read once the part is as far as r asks (see above).
func (p *part) readAt(ctx context.Context, c Comm, who int, r comm.Pull, read func()) error {
	switch {
	case !c.Async():
		if err := p.applied.await(ctx, r.At); err != nil {
			return err
		}
	case r.Final:
		if err := c.AwaitOthers(ctx, who); err != nil {
			return err
		}
		return p.rv.Quiet(ctx, who, r.At-1, read)
	}
	p.commit.RLock()
	defer p.commit.RUnlock()
	read()
	return nil
}
