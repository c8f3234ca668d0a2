package transport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Recvs that wait for one peer at once (a pserver's parts, each waiting
// for its block's gradient) each get their own message: every recv
// registers its claim, and the connection's reader copies each message
// into its recv's memory as its frame arrives. Each round's messages come
// one frame at a time, in the reverse order of the recvs' start.
func TestTCPConcurrentRecvsShareTheConnection(t *testing.T) {
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	const parts, rounds = 8, 200
	for i := 0; i < parts; i++ {
		ps.Accept(Spec{Var: fmt.Sprintf("g%d", i), DType: F32, Bytes: 256})
	}
	tr.Accept(Spec{Var: "ack", DType: F32, Bytes: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	payload := make([][]byte, parts)
	for i := range payload {
		payload[i] = make([]byte, 256)
	}
	ack := make([]byte, 4)
	for r := int64(0); r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make([]error, parts)
		for i := 0; i < parts; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 256)
				errs[i] = ps.Recv(ctx, t0, r, fmt.Sprintf("g%d", i), buf)
				if errs[i] == nil && buf[0] != byte(r+int64(i)) {
					errs[i] = fmt.Errorf("part %d of round %d got %d", i, r, buf[0])
				}
			}()
		}
		for i := parts - 1; i >= 0; i-- { // each its own frame
			payload[i][0] = byte(r + int64(i))
			must(t, tr.Send(ctx, p0, r, fmt.Sprintf("g%d", i), F32, payload[i]))
			must(t, tr.Flush(ctx))
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		// The payloads stay unchanged until the pserver had them.
		must(t, ps.Send(ctx, t0, r, "ack", F32, ack))
		must(t, tr.Recv(ctx, p0, r, "ack", ack))
	}
}
