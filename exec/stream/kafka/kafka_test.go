package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/stream"
	"github.com/psgraph/psgraph/exec/tensor"
)

// model parses a model reading rows "label,partition,offset" from a topic.
func model(t *testing.T, brokers []string, start string) *dsl.Data {
	t.Helper()
	src := fmt.Sprintf(`psgraph: 1
data:
  kafka: {brokers: [%s], topic: rows, start: %q}
  label: {name: y, column: 0}
  features: {name: x, columns: [1, 3]}
params:
  W: {shape: [2, 2]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: softmax_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`, strings.Join(brokers, ", "), start)
	g, err := dsl.Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return g.Data
}

func cluster(t *testing.T, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, "rows")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// produce writes rows "label,p,o" for offsets [from, to) of each partition.
func produce(t *testing.T, addrs []string, parts []int32, from, to int, ts time.Time) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("rows"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for o := from; o < to; o++ {
		for _, p := range parts {
			rs = append(rs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d,%d,%d\n", (int(p)+o)%2, p, o), Timestamp: ts})
		}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// reader opens a Reader of trainer tr of n at pos (nil: the start).
func reader(t *testing.T, d *dsl.Data, pos *stream.Position, tr, n int, log zerolog.Logger) *stream.Reader {
	t.Helper()
	ctx := context.Background()
	o := Options{Spec: d.Online.Kafka, Trainer: tr, Trainers: n, Log: log, Retry: 200 * time.Millisecond}
	if pos == nil {
		var err error
		if pos, err = Start(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	src, err := Open(ctx, pos, o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := stream.NewReader(src, pos, func(w func() string) *data.OnlineParser { return data.NewOnlineParser(d, w) }, stream.ReaderOptions{Batch: 4, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// read reads n batches: each row as "partition/offset", and the positions.
func read(t *testing.T, r *stream.Reader, n int) ([]string, []*stream.Position) {
	t.Helper()
	dst := []*tensor.Tensor{tensor.New(tensor.F32, tensor.Shape{4, 2}), tensor.New(tensor.I32, tensor.Shape{4})}
	var rows []string
	var pos []*stream.Position
	for range n {
		if err := r.Fill(nil, dst); err != nil {
			t.Fatal(err)
		}
		for b := range 4 {
			rows = append(rows, fmt.Sprintf("%g/%g", dst[0].F[2*b], dst[0].F[2*b+1]))
		}
		pos = append(pos, r.Position().Clone())
	}
	return rows, pos
}

// A topic's partitions are read round robin, each in offset order, and a
// reader opened at the position after a batch gives the batches after it.
func TestKafkaRoundRobinResumes(t *testing.T) {
	c := cluster(t, 3)
	defer c.Close()
	addrs := c.ListenAddrs()
	produce(t, addrs, []int32{0, 1, 2}, 0, 20, time.Now())
	d := model(t, addrs, "earliest")
	r := reader(t, d, nil, 0, 1, zerolog.Nop())
	rows, pos := read(t, r, 15)
	r.Close()
	for i, got := range rows {
		if want := fmt.Sprintf("%d/%d", i%3, i/3); got != want {
			t.Fatalf("row %d is %s, want %s", i, got, want)
		}
	}
	if lag := pos[14].Offsets; !slices.Equal(lag, []int64{20, 20, 20}) {
		t.Errorf("after 60 rows the offsets are %v", lag)
	}
	for _, k := range []int{0, 6, 13} {
		at, err := stream.ParsePosition(pos[k].Marshal())
		if err != nil {
			t.Fatal(err)
		}
		r := reader(t, d, at, 0, 1, zerolog.Nop())
		got, _ := read(t, r, 14-k)
		if lag, ok := r.Lag(); !ok || lag != 0 {
			t.Errorf("resumed after batch %d: lag %d %v at the log end", k, lag, ok)
		}
		r.Close()
		if !slices.Equal(got, rows[4*(k+1):]) {
			t.Fatalf("resumed after batch %d: %v, want %v", k, got, rows[4*(k+1):])
		}
	}
}

// Trainer t of n takes the partitions p with p mod n = t; start: latest
// starts at the log ends, a time at the first message at or after it.
func TestKafkaStartAndAssignment(t *testing.T) {
	c := cluster(t, 3)
	defer c.Close()
	addrs := c.ListenAddrs()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, addrs, []int32{0, 1, 2}, 0, 5, t0)
	produce(t, addrs, []int32{0, 1, 2}, 5, 8, t0.Add(30*time.Minute))
	ctx := context.Background()
	for _, c := range []struct {
		start      string
		tr, n      int
		parts      []int32
		offs       []int64
		errPartial string
	}{
		{"earliest", 0, 2, []int32{0, 2}, []int64{0, 0}, ""},
		{"latest", 1, 2, []int32{1}, []int64{8, 8}[:1], ""},
		{t0.Add(10 * time.Minute).Format(time.RFC3339), 0, 1, []int32{0, 1, 2}, []int64{5, 5, 5}, ""},
		{"earliest", 3, 4, nil, nil, "give the topic at least as many partitions as trainers"},
	} {
		d := model(t, addrs, c.start)
		p, err := Start(ctx, Options{Spec: d.Online.Kafka, Trainer: c.tr, Trainers: c.n})
		if c.errPartial != "" {
			if err == nil || !strings.Contains(err.Error(), c.errPartial) {
				t.Errorf("%s trainer %d of %d: %v, want %q", c.start, c.tr, c.n, err, c.errPartial)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Partitions, c.parts) || !slices.Equal(p.Offsets, c.offs) {
			t.Errorf("%s trainer %d of %d: partitions %v offsets %v, want %v %v", c.start, c.tr, c.n, p.Partitions, p.Offsets, c.parts, c.offs)
		}
	}
	d := model(t, addrs, "latest")
	r := reader(t, d, nil, 0, 1, zerolog.Nop())
	defer r.Close()
	produce(t, addrs, []int32{0, 1, 2}, 8, 12, time.Now())
	rows, _ := read(t, r, 3)
	if rows[0] != "0/8" || rows[11] != "2/11" {
		t.Errorf("start: latest read %v, want the rows produced after it started", rows)
	}
}

// syncBuffer is a log that tests read while the reader writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A broker that goes away is retried and logged, not fatal: reading goes
// on when it comes back (the same data, the same port), at the next row.
func TestKafkaBrokerComesBack(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := cluster(t, 2, kfake.Ports(port), kfake.DataDir(dir), kfake.SyncWrites())
	addrs := c.ListenAddrs()
	produce(t, addrs, []int32{0, 1}, 0, 8, time.Now())
	var logs syncBuffer
	d := model(t, addrs, "earliest")
	r := reader(t, d, nil, 0, 1, zerolog.New(&logs))
	defer r.Close()
	rows, _ := read(t, r, 4)
	c.Close()
	got := make(chan []string)
	go func() {
		dst := []*tensor.Tensor{tensor.New(tensor.F32, tensor.Shape{4, 2}), tensor.New(tensor.I32, tensor.Shape{4})}
		var rows []string
		for range 2 {
			if err := r.Fill(nil, dst); err != nil {
				got <- []string{err.Error()}
				return
			}
			for b := range 4 {
				rows = append(rows, fmt.Sprintf("%g/%g", dst[0].F[2*b], dst[0].F[2*b+1]))
			}
		}
		got <- rows
	}()
	// The reader waits; the client's redials are logged meanwhile.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "kafka") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "kafka") {
		t.Errorf("nothing logged while the broker was away")
	}
	c = cluster(t, 2, kfake.Ports(port), kfake.DataDir(dir), kfake.SyncWrites())
	defer c.Close()
	produce(t, addrs, []int32{0, 1}, 8, 12, time.Now())
	select {
	case more := <-got:
		rows = append(rows, more...)
	case <-time.After(60 * time.Second):
		t.Fatal("reading did not go on once the broker was back")
	}
	for i, g := range rows {
		if want := strconv.Itoa(i%2) + "/" + strconv.Itoa(i/2); g != want {
			t.Fatalf("row %d is %s, want %s (rows %v)", i, g, want, rows)
		}
	}
}

// A partition with no message does not stall the reader: after
// idle_after, while the others have messages, its turns are passed over
// (logged once), the reading goes on with the others in their order, and
// once it has messages it is back in its turns. Every message read comes
// once, and a reader opened at the position after any batch reads every
// later message once: the position names exactly the rows before it.
// With idle_after: never, the empty partition holds the reader up.
func TestKafkaIdlePartitionPassedOver(t *testing.T) {
	c := cluster(t, 3)
	defer c.Close()
	addrs := c.ListenAddrs()
	produce(t, addrs, []int32{0, 2}, 0, 12, time.Now())
	d := model(t, addrs, "earliest")
	d.Online.Kafka.IdleAfter = 200 * time.Millisecond
	var logs syncBuffer
	r := reader(t, d, nil, 0, 1, zerolog.New(&logs))
	rows, pos := read(t, r, 3) // partition 1 has nothing
	for i, g := range rows {
		if want := fmt.Sprintf("%d/%d", 2*(i%2), i/2); g != want {
			t.Fatalf("row %d is %s, want %s (rows %v)", i, g, want, rows)
		}
	}
	if n := strings.Count(logs.String(), "passing it over"); n != 1 {
		t.Errorf("the idle partition was reported %d times, want once:\n%s", n, logs.String())
	}
	if src, ok := any(r).(interface{ IdleSkips() int64 }); !ok || src.IdleSkips() == 0 {
		t.Errorf("no turn passed over counted")
	}
	produce(t, addrs, []int32{1}, 0, 12, time.Now()) // partition 1 wakes up
	more, pos2 := read(t, r, 6)                      // the 24 messages left: 36 in all
	r.Close()
	all := append(rows, more...)
	seen := map[string]int{}
	for _, g := range all {
		seen[g]++
	}
	for p := range 3 {
		for o := range 12 {
			if k := fmt.Sprintf("%d/%d", p, o); seen[k] != 1 {
				t.Errorf("message %s read %d times, want once", k, seen[k])
			}
		}
	}
	if !strings.Contains(logs.String(), "back in its turns") {
		t.Errorf("the partition's return was not logged:\n%s", logs.String())
	}
	// Resumed after each batch: the later messages, each once.
	allPos := append(pos, pos2...)
	for _, k := range []int{0, 2, 5} {
		at, err := stream.ParsePosition(allPos[k].Marshal())
		if err != nil {
			t.Fatal(err)
		}
		r := reader(t, d, at, 0, 1, zerolog.Nop())
		got, _ := read(t, r, 8-k)
		r.Close()
		after := map[string]int{}
		for _, g := range all[:4*(k+1)] {
			after[g]++
		}
		for _, g := range got {
			after[g]++
		}
		for key, n := range seen {
			if after[key] != n {
				t.Errorf("resumed after batch %d: message %s read %d times before and after, want once", k, key, after[key])
			}
		}
	}
	// never: the empty partition holds the reader up.
	c2 := cluster(t, 2)
	defer c2.Close()
	produce(t, c2.ListenAddrs(), []int32{0}, 0, 12, time.Now())
	d2 := model(t, c2.ListenAddrs(), "earliest")
	d2.Online.Kafka.IdleAfter = 0
	r2 := reader(t, d2, nil, 0, 1, zerolog.Nop())
	defer r2.Close()
	dst := []*tensor.Tensor{tensor.New(tensor.F32, tensor.Shape{4, 2}), tensor.New(tensor.I32, tensor.Shape{4})}
	stop := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(stop) })
	if err := r2.Fill(stop, dst); !errors.Is(err, stream.ErrStopped) {
		t.Errorf("idle_after: never read a batch past the empty partition (%v)", err)
	}
}
