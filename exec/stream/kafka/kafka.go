// Package kafka is the Kafka source of an online data section
// (data.kafka): a topic's messages, one row each, read with franz-go's
// client at exact offsets. A trainer of a job of N takes the partitions
// p with p mod N equal to its index and reads them round robin, each in
// offset order, so its rows depend only on the topic's contents; its
// position (exec/stream.Position) is the next offset of each partition.
// It commits nothing to Kafka: the position lives in psgraph's
// checkpoints, with the model state of the same step.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/stream"
)

// Options configure a Kafka source.
type Options struct {
	Spec              *dsl.Kafka
	Trainer, Trainers int // this reader's partitions: p mod Trainers == Trainer
	Log               zerolog.Logger
	// Buffer is the messages held per partition before its fetching
	// pauses (0: 4096).
	Buffer int
	// Retry is the longest wait between two tries to reach the brokers
	// (0: 10s); the first comes after 100ms, each next one twice later.
	Retry time.Duration
}

// clientOpts are the client options of a source: brokers, client id,
// TLS, SASL, and the client's log at warn level into ours.
func clientOpts(o Options) ([]kgo.Opt, error) {
	s := o.Spec
	opts := []kgo.Opt{kgo.SeedBrokers(s.Brokers...), kgo.WithLogger(logger{o.Log})}
	id := s.ClientID
	if id == "" {
		id = "psgraph"
	}
	opts = append(opts, kgo.ClientID(id))
	if t := s.TLS; t != nil {
		tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if t.CA != "" {
			pem, err := os.ReadFile(t.CA)
			if err != nil {
				return nil, fmt.Errorf("data.kafka.tls.ca: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("data.kafka.tls.ca %s holds no PEM certificate", t.CA)
			}
		}
		if t.Cert != "" {
			c, err := tls.LoadX509KeyPair(t.Cert, t.Key)
			if err != nil {
				return nil, fmt.Errorf("data.kafka.tls cert and key: %w", err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if a := s.SASL; a != nil {
		pass, ok := os.LookupEnv(a.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("data.kafka.sasl.password_env names %s, which is not set: export the SASL password in it", a.PasswordEnv)
		}
		var m sasl.Mechanism
		switch a.Mechanism {
		case "SCRAM-SHA-256":
			m = scram.Auth{User: a.User, Pass: pass}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: a.User, Pass: pass}.AsSha512Mechanism()
		default:
			m = plain.Auth{User: a.User, Pass: pass}.AsMechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// Start is the position a run without a checkpoint starts at: this
// reader's partitions of the topic and, per the spec's start, the offset
// of each partition's first message (earliest), its log end (latest), or
// its first message at or after the start time. While the brokers cannot
// be reached it retries, logging each failure, until ctx ends.
func Start(ctx context.Context, o Options) (*stream.Position, error) {
	opts, err := clientOpts(o)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("data.kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	s := o.Spec
	var listed kadm.ListedOffsets
	err = retry(ctx, o, "listing the topic's partitions and start offsets", func() error {
		var err error
		switch s.Start {
		case "earliest":
			listed, err = adm.ListStartOffsets(ctx, s.Topic)
		case "latest":
			listed, err = adm.ListEndOffsets(ctx, s.Topic)
		default:
			listed, err = adm.ListOffsetsAfterMilli(ctx, s.StartTime.UnixMilli(), s.Topic)
		}
		if err == nil {
			err = listed.Error()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	offs := listed[s.Topic]
	if len(offs) == 0 {
		return nil, fmt.Errorf("kafka topic %q has no partitions on %v", s.Topic, s.Brokers)
	}
	var all []int32
	for p := range offs {
		all = append(all, p)
	}
	slices.Sort(all)
	pos := &stream.Position{Kind: stream.KindKafka, Topic: s.Topic}
	n := max(o.Trainers, 1)
	for _, p := range all {
		if int(p)%n == o.Trainer {
			pos.Partitions = append(pos.Partitions, p)
			pos.Offsets = append(pos.Offsets, offs[p].Offset)
		}
	}
	if len(pos.Partitions) == 0 {
		return nil, fmt.Errorf("kafka topic %q has %d partitions, and trainer %d of %d takes those whose number mod %d is %d: none; give the topic at least as many partitions as trainers", s.Topic, len(all), o.Trainer, n, n, o.Trainer)
	}
	return pos, nil
}

// retry runs fn until it succeeds, logging each failure, with a backoff
// doubling from 100ms to o.Retry, until ctx ends. A failure no retry
// cures (a topic that does not exist, a refused authentication) ends it.
func retry(ctx context.Context, o Options, what string, fn func() error) error {
	wait, most := 100*time.Millisecond, o.Retry
	if most <= 0 {
		most = 10 * time.Second
	}
	for try := 1; ; try++ {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fatal(err) {
			return fmt.Errorf("kafka topic %q at %v: %s: %w", o.Spec.Topic, o.Spec.Brokers, what, err)
		}
		o.Log.Warn().Err(err).Int("try", try).Dur("retry_in", wait).Strs("brokers", o.Spec.Brokers).Msg("kafka: " + what + " failed; retrying")
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, most)
	}
}

// fatal says whether an error is one no retry cures.
func fatal(err error) bool {
	var loss *kgo.ErrDataLoss
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.OffsetOutOfRange) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.As(err, &loss)
}

// Open is a source of the topic's messages after position p, fetching
// ahead on the client's goroutines: each partition's messages are queued
// until the reader takes them, and a partition whose queue is full pauses
// until it drains, so memory stays bounded while another partition holds
// the round robin up. A broker that goes away is retried (the client
// redials) and logged, not fatal; a message that is no longer in the
// topic (retention removed it) or lost is.
func Open(ctx context.Context, p *stream.Position, o Options) (stream.Source, error) {
	if p.Kind != stream.KindKafka || p.Topic != o.Spec.Topic {
		return nil, fmt.Errorf("the checkpoint's stream position (%s) is not of kafka topic %q: the model's data changed; use a fresh --checkpoint-dir", p, o.Spec.Topic)
	}
	opts, err := clientOpts(o)
	if err != nil {
		return nil, err
	}
	at := map[int32]kgo.Offset{}
	s := &source{topic: p.Topic, parts: slices.Clone(p.Partitions), index: map[int32]int{}, log: o.Log,
		buffer: o.Buffer, failed: make(chan struct{}), arrived: make(chan struct{}, 1),
		turns: stream.NewTurns(len(p.Partitions), p.Turn, o.Spec.IdleAfter), has: make([]bool, len(p.Partitions))}
	if s.buffer <= 0 {
		s.buffer = 4096
	}
	for i, part := range p.Partitions {
		at[part] = kgo.NewOffset().At(p.Offsets[i])
		s.index[part] = i
	}
	s.queues = make([]queue, len(s.parts))
	s.hwm = make([]atomic.Int64, len(s.parts))
	for i := range s.hwm {
		s.hwm[i].Store(-1)
	}
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.Topic: at}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(2<<20),
		kgo.FetchMaxWait(200*time.Millisecond))
	if s.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("data.kafka: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.done = make(chan struct{})
	go s.poll()
	return s, nil
}

type source struct {
	topic  string
	parts  []int32
	index  map[int32]int // partition -> its index in parts
	cl     *kgo.Client
	log    zerolog.Logger
	buffer int
	// turns decides whose record comes next (Next's, like has and timer);
	// skips is its count of turns passed over, for IdleSkips.
	turns *stream.Turns
	has   []bool
	timer *time.Timer
	skips atomic.Int64

	mu     sync.Mutex
	queues []queue
	// arrived gets a token when a queue gets messages.
	arrived chan struct{}
	hwm     []atomic.Int64 // each partition's log end (high watermark); -1 unknown
	err     error          // the fetching's fatal error
	failed  chan struct{}  // closed with err

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	rec    stream.Record
	// errors logged: the last time and how many since
	lastLog time.Time
	quiet   int
}

// queue is one partition's messages fetched and not yet taken.
type queue struct {
	recs   []*kgo.Record
	head   int
	paused bool
}

func (q *queue) len() int { return len(q.recs) - q.head }

// poll moves the client's fetches into the partitions' queues until the
// source closes or a fatal error.
func (s *source) poll() {
	defer close(s.done)
	for {
		fs := s.cl.PollFetches(s.ctx)
		if s.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		var bad error
		fs.EachError(func(topic string, part int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if fatal(err) {
				if errors.Is(err, kerr.OffsetOutOfRange) {
					err = fmt.Errorf("partition %d: the next message is no longer in the topic (the brokers' retention removed it?), so training cannot go on exactly where it was: %w", part, err)
				}
				bad = fmt.Errorf("kafka topic %q: %w", topic, err)
				return
			}
			s.logError(part, err)
		})
		if bad != nil {
			s.mu.Lock()
			s.err = bad
			s.mu.Unlock()
			close(s.failed)
			return
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			i, ok := s.index[fp.Partition]
			if !ok || fp.Topic != s.topic {
				return
			}
			if fp.HighWatermark >= 0 {
				s.hwm[i].Store(fp.HighWatermark)
			}
			if len(fp.Records) == 0 {
				return
			}
			s.mu.Lock()
			q := &s.queues[i]
			q.recs = append(q.recs, fp.Records...)
			pause := !q.paused && q.len() >= s.buffer
			q.paused = q.paused || pause
			s.mu.Unlock()
			if pause {
				s.cl.PauseFetchPartitions(map[string][]int32{s.topic: {fp.Partition}})
			}
			select {
			case s.arrived <- struct{}{}:
			default:
			}
		})
	}
}

// logError logs a fetch error the client retries: every one for the
// first few, then at most one a minute with the count since the last.
func (s *source) logError(part int32, err error) {
	now := time.Now()
	if s.quiet < 5 || now.Sub(s.lastLog) > time.Minute {
		s.log.Warn().Err(err).Int32("partition", part).Int("since_last", s.quiet).Msg("kafka: fetching failed; the client retries")
		s.lastLog = now
		if s.quiet >= 5 {
			s.quiet = 5
		}
	}
	s.quiet++
}

// Next takes the next record in the round robin's order (stream.Turns):
// the turn's partition's, or, once a partition has been empty for
// idle_after while others hold messages, the next one holding some.
func (s *source) Next(ctx context.Context) (*stream.Record, error) {
	for {
		s.mu.Lock()
		for i := range s.queues {
			s.has[i] = s.queues[i].len() > 0
		}
		c := s.turns.Next(s.has, time.Now())
		var r *kgo.Record
		resume := false
		if c.Take >= 0 {
			r, resume = s.take(c.Take)
		}
		err := s.err
		s.mu.Unlock()
		s.skips.Store(s.turns.Skips())
		s.logTurns(c)
		if r != nil {
			if resume {
				s.cl.ResumeFetchPartitions(map[string][]int32{s.topic: {s.parts[c.Take]}})
			}
			v := r.Value
			if n := len(v); n > 0 && v[n-1] == '\n' {
				v = v[:n-1]
				if n > 1 && v[n-2] == '\r' {
					v = v[:n-2]
				}
			}
			s.rec = stream.Record{Value: v, Part: c.Take, Off: r.Offset}
			return &s.rec, nil
		}
		if err != nil {
			return nil, err
		}
		var until <-chan time.Time
		if !c.Until.IsZero() {
			if s.timer == nil {
				s.timer = time.NewTimer(time.Until(c.Until))
			} else {
				s.timer.Reset(time.Until(c.Until))
			}
			until = s.timer.C
		}
		select {
		case <-s.arrived:
		case <-until:
		case <-s.failed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if s.timer != nil {
			s.timer.Stop()
		}
	}
}

// take removes partition i's next message from its queue (s.mu held) and
// says whether its fetching, paused while the queue was full, resumes.
func (s *source) take(i int) (*kgo.Record, bool) {
	q := &s.queues[i]
	r := q.recs[q.head]
	q.recs[q.head] = nil
	q.head++
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	} else if q.head >= 1024 && q.head > len(q.recs)/2 {
		n := copy(q.recs, q.recs[q.head:])
		clear(q.recs[n:])
		q.recs, q.head = q.recs[:n], 0
	}
	resume := q.paused && q.len() < s.buffer/4
	q.paused = q.paused && !resume
	return r, resume
}

// logTurns says when a partition starts being passed over, once an
// episode, and when it is back in its turns.
func (s *source) logTurns(c stream.Choice) {
	for _, i := range c.Idle {
		s.log.Warn().Int32("partition", s.parts[i]).Dur("idle_after", s.turns.IdleAfter()).Str("topic", s.topic).
			Msg("kafka: a partition had no message while others had some: passing it over until it has (data.kafka.idle_after); the batches now depend on when messages arrive, each is still trained once")
	}
	for _, i := range c.Back {
		s.log.Info().Int32("partition", s.parts[i]).Str("topic", s.topic).Msg("kafka: a partition passed over has messages again: back in its turns")
	}
}

// IdleSkips is the number of turns of the round robin passed over so far.
func (s *source) IdleSkips() int64 { return s.skips.Load() }

func (s *source) Where(r *stream.Record) string {
	return fmt.Sprintf("kafka topic %q partition %d offset %d", s.topic, s.parts[r.Part], r.Off)
}

// Lag is the messages of this reader's partitions after position p: its
// log ends (as of the last fetch) less p's offsets.
func (s *source) Lag(p *stream.Position) (int64, bool) {
	var n int64
	for i := range s.parts {
		h := s.hwm[i].Load()
		if h < 0 {
			return 0, false
		}
		n += max(h-p.Offsets[i], 0)
	}
	return n, true
}

func (s *source) Close() error {
	s.cancel()
	s.cl.Close()
	<-s.done
	return nil
}

// logger puts the client's warnings and errors into psgraph's log (at
// debug, the rest).
type logger struct{ log zerolog.Logger }

func (l logger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l logger) Log(level kgo.LogLevel, msg string, kv ...any) {
	ev := l.log.Debug()
	if level <= kgo.LogLevelWarn {
		ev = l.log.Warn()
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			ev = ev.Interface(k, kv[i+1])
		}
	}
	ev.Msg("kafka client: " + msg)
}
