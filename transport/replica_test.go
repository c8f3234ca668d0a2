package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

type replicaConn struct {
	id  NodeID
	inc uint64
	c   net.Conn
}

// replicaJob is pserver-0 with trainer-0 as its peer, its listener handing
// replicas' connections to the returned channel.
func replicaJob(t *testing.T) (map[NodeID]*TCP, chan replicaConn) {
	t.Helper()
	got := make(chan replicaConn, 4)
	m, _ := tcpJob(t, func(c *Config) {
		if c.Listen != "" {
			c.Replicas = func(id NodeID, inc uint64, conn net.Conn) { got <- replicaConn{id, inc, conn} }
		}
	}, PServer(0), Trainer(0))
	return m, got
}

func replicaConfig(token, job string) Config {
	return Config{Self: Replica(2), Token: []byte(token), JobHash: job, HandshakeTimeout: 5 * time.Second}
}

// A replica holding the job's token is authenticated like a peer and its
// connection handed to the listener's Replicas handler, which talks to it;
// the replica learns the listener's incarnation.
func TestReplicaIsHandedToItsHandler(t *testing.T) {
	m, got := replicaJob(t)
	ps := m[PServer(0)]
	c, inc, err := DialReplica(context.Background(), replicaConfig("s3cret", "job"), PServer(0), ps.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if inc != ps.inc {
		t.Errorf("the replica learned incarnation %d, the listener's is %d", inc, ps.inc)
	}
	r := <-got
	defer r.c.Close()
	if r.id != Replica(2) || r.inc == 0 {
		t.Errorf("the handler got %v incarnation %d, want replica-2", r.id, r.inc)
	}
	go r.c.Write([]byte("step 7"))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "step 7" {
		t.Errorf("the replica read %q, %v", buf, err)
	}
}

// A stranger cannot subscribe: without the job's token the handshake
// fails (ErrAuth), with another job's hash too (ErrJobMismatch), and a
// listener without a Replicas handler refuses replicas (ErrRefused); the
// handler is never called.
func TestStrangerCannotSubscribe(t *testing.T) {
	m, got := replicaJob(t)
	addr := m[PServer(0)].Addr().String()
	for _, c := range []struct {
		cfg  Config
		want error
	}{
		{replicaConfig("wrong", "job"), ErrAuth},
		{replicaConfig("", "job"), ErrAuth},
		{replicaConfig("s3cret", "another job"), ErrJobMismatch},
	} {
		if _, _, err := DialReplica(context.Background(), c.cfg, PServer(0), addr); !errors.Is(err, c.want) {
			t.Errorf("token %q job %q: %v, want %v", c.cfg.Token, c.cfg.JobHash, err, c.want)
		}
	}
	plain, _ := tcpJob(t, nil, PServer(0))
	if _, _, err := DialReplica(context.Background(), replicaConfig("s3cret", "job"), PServer(0), plain[PServer(0)].Addr().String()); !errors.Is(err, ErrRefused) {
		t.Errorf("a listener without a Replicas handler: %v, want ErrRefused", err)
	}
	select {
	case r := <-got:
		t.Errorf("the handler got %v", r.id)
	default:
	}
}

// A replica cannot write to the job: a gradient frame it writes, as a
// trainer would, reaches only the handler, and the pserver's receive of
// the gradient takes the trainer's.
func TestReplicaCannotWriteToTheJob(t *testing.T) {
	m, got := replicaJob(t)
	ps, tr := m[PServer(0)], m[Trainer(0)]
	ps.Accept(Spec{Var: "W@GRAD", DType: F32, Bytes: 4})
	c, _, err := DialReplica(context.Background(), replicaConfig("s3cret", "job"), PServer(0), ps.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := <-got
	frame := []byte("W@GRAD step 0 from trainer-0: 1234") // whatever it writes
	go c.Write(frame)
	buf := make([]byte, len(frame))
	if _, err := io.ReadFull(r.c, buf); err != nil || string(buf) != string(frame) {
		t.Fatalf("the handler read %q, %v", buf, err)
	}
	r.c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Send(ctx, PServer(0), 0, "W@GRAD", F32, []byte{1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 4)
	key, err := ps.RecvAny(ctx, "W@GRAD", dst)
	if err != nil || key.Src != Trainer(0) || dst[0] != 1 {
		t.Fatalf("the pserver received %v %v from %v, want the trainer's gradient", dst, err, key.Src)
	}
}
