// Command fakekafka runs an in-process Kafka broker (franz-go's kfake) on
// loopback for psgraph's benchmarks and manual tests of data.kafka: it
// creates a topic, writes the lines of a file into it (dealt to the
// partitions in turn, each line one message), prints the broker's
// address and runs until SIGTERM or SIGINT. It is not part of psgraph's
// binary.
//
//	go run ./internal/cmd/fakekafka --partitions 2 --topic clicks --produce rows.tsv --addr-file addr
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	partitions := flag.Int("partitions", 2, "partitions of the topic")
	topic := flag.String("topic", "clicks", "the topic")
	produce := flag.String("produce", "", "a file whose lines become the topic's messages, dealt to the partitions in turn")
	port := flag.Int("port", 0, "the loopback port (0: any free one)")
	addrFile := flag.String("addr-file", "", "write the broker's host:port into this file once the messages are in the topic")
	flag.Parse()
	if err := run(*partitions, *topic, *produce, *port, *addrFile); err != nil {
		fmt.Fprintln(os.Stderr, "fakekafka:", err)
		os.Exit(1)
	}
}

func run(partitions int, topic, produce string, port int, addrFile string) error {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic)}
	if port > 0 {
		opts = append(opts, kfake.Ports(port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	if produce != "" {
		start := time.Now()
		n, err := load(addr, topic, produce, int32(partitions))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "fakekafka: %d messages from %s in topic %s (%d partitions) in %.1fs\n", n, produce, topic, partitions, time.Since(start).Seconds())
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile+".tmp", []byte(addr+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
			return err
		}
	}
	fmt.Println(addr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

// load writes the lines of file into the topic, line i to partition i mod
// partitions.
func load(addr, topic, file string, partitions int32) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<16))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	ctx := context.Background()
	var mu sync.Mutex
	var first error
	n := 0
	for sc.Scan() {
		v := append([]byte(nil), sc.Bytes()...)
		cl.Produce(ctx, &kgo.Record{Partition: int32(n) % partitions, Value: v}, func(_ *kgo.Record, err error) {
			mu.Lock()
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		})
		n++
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	if err := cl.Flush(ctx); err != nil {
		return n, err
	}
	return n, first
}
