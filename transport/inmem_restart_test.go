package transport

import (
	"context"
	"testing"
	"time"
)

// TestInmemSendRacingRestartCountsForTheOldIncarnation: messages sent
// while the receiver restarts go to one incarnation or the other, and
// Done announces to the new one exactly the messages it got, so its
// WaitDone returns. (A send that looked the old incarnation up and
// counted after the restart made the new one wait for a message it never
// got: a restarted pserver of the in-memory job then never saw its
// trainers finish.)
func TestInmemSendRacingRestartCountsForTheOldIncarnation(t *testing.T) {
	tr, ps := Trainer(0), PServer(0)
	spec := Spec{Var: "g", DType: F32, Bytes: 4}
	rounds := 500
	if testing.Short() {
		rounds = 50
	}
	for r := range rounds {
		hub := NewHub(nil, tr, ps)
		hub.Endpoint(ps).Accept(spec)
		sender := hub.Endpoint(tr)
		stop := make(chan struct{})
		sent, going := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sent)
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sender.Send(context.Background(), ps, i, "g", F32, make([]byte, 4))
				if i == 8 {
					close(going)
				}
			}
		}()
		<-going
		fresh := hub.Restart(ps, spec)
		close(stop)
		<-sent
		if err := sender.Done(context.Background(), ps); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fresh.WaitDone(ctx, tr)
		cancel()
		if err != nil {
			t.Fatalf("round %d: the restarted receiver's WaitDone: %v (Done announced messages it never got)", r, err)
		}
	}
}
