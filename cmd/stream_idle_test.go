package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/psgraph/psgraph/exec/modelfile"
)

// countModel writes testdata/stream/count.yaml, a model that counts the
// rows it trains on in C[id], reading src, for ids below rows.
func countModel(t *testing.T, dir, src string, rows int) string {
	t.Helper()
	b, err := os.ReadFile("testdata/stream/count.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("@SOURCE@", src, "@ROWS@", strconv.Itoa(rows)).Replace(string(b))
	path := filepath.Join(dir, "count.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// idTopic is a Kafka topic whose message values are ids, each message's
// id unique; where records where each id went.
type idTopic struct {
	addr  string
	next  int
	where map[int][2]int64 // id -> partition, offset
	offs  map[int32]int64
}

func newIDTopic(t *testing.T, partitions int32) *idTopic {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "ids"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &idTopic{addr: c.ListenAddrs()[0], where: map[int][2]int64{}, offs: map[int32]int64{}}
}

// produce writes n messages to each of the partitions, in turn.
func (tp *idTopic) produce(t *testing.T, n int, parts ...int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(tp.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("ids"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for range n {
		for _, p := range parts {
			rs = append(rs, &kgo.Record{Partition: p, Value: []byte(strconv.Itoa(tp.next))})
			tp.where[tp.next] = [2]int64{int64(p), tp.offs[p]}
			tp.offs[p]++
			tp.next++
		}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// trainedOnce checks the counting model's C: every message before the
// final positions (the offsets of each trainer's last summary or
// checkpoint, partition -> next offset) trained exactly once (C[id] is
// unit), every other message never (0).
func (tp *idTopic) trainedOnce(t *testing.T, model string, offsets map[int64]int64, unit float32) {
	t.Helper()
	tp.trainedOnceIn(t, model, "C", offsets, unit)
}

// trainedOnceIn is trainedOnce for the counts of parameter name.
func (tp *idTopic) trainedOnceIn(t *testing.T, model, name string, offsets map[int64]int64, unit float32) {
	t.Helper()
	c := readTensors(t, model)[name]
	trained := 0
	for id, w := range tp.where {
		want := float32(0)
		if w[1] < offsets[w[0]] {
			want = unit
			trained++
		}
		if c[id] != want {
			t.Errorf("message %d (partition %d offset %d): %s = %g, want %g (trained %g times)", id, w[0], w[1], name, c[id], want, c[id]/unit)
		}
	}
	t.Logf("%s: %d messages trained once, %d not yet", name, trained, len(tp.where)-trained)
}

// positionOffsets reads the partitions' next offsets from a summary.
func positionOffsets(t *testing.T, r result) map[int64]int64 {
	t.Helper()
	var sum struct {
		Steps  int
		Stream struct {
			IdleSkips int64 `json:"idle_skips"`
			Position  struct {
				Partitions []int64
				Offsets    []int64
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, r.stdout)
	}
	out := map[int64]int64{}
	for i, p := range sum.Stream.Position.Partitions {
		out[p] = sum.Stream.Position.Offsets[i]
	}
	return out
}

// A local run reading a topic of three partitions, one of them empty:
// after idle_after the empty partition's turns are passed over and
// training goes on (before, the round robin waited for it forever).
// Killed with SIGKILL three times at random steps and resumed from its
// checkpoints, with messages arriving in the empty partition after the
// second kill, the run trains every message before its final position
// exactly once and no other: the counting model's C says so, message by
// message.
func TestStreamKafkaIdlePartitionKilledTrainsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tp := newIDTopic(t, 3)
	tp.produce(t, 1500, 0, 1) // partition 2 stays empty for now
	model := countModel(t, dir, fmt.Sprintf("kafka: {brokers: [%q], topic: ids, start: earliest, idle_after: 300ms}", tp.addr), 4000)
	ck := filepath.Join(dir, "ck")
	save := filepath.Join(dir, "count.safetensors")
	args := []string{"run", "--role", "local", model, "--steps", "220", "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "7", "--log-every", "1", "--log-format", "json"}
	var at []int
	for i, step := range killTargets(5, 3, 3, 200) {
		p := streamRun(t, fmt.Sprintf("run %d", i), "", args...)
		at = append(at, killAt(t, p, step))
		if i == 0 && !strings.Contains(p.stderrText(), "passing it over") {
			t.Errorf("the empty partition was not passed over:\n%s", p.stderrText())
		}
		if i == 1 {
			tp.produce(t, 600, 2) // the empty partition gets messages (3,600 in all, 220 steps take 3,520)
		}
	}
	r := streamRun(t, "last run", "", args...).wait(t, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("the last run: exit %d\n%s", r.code, r.stderr)
	}
	t.Logf("killed after steps %v", at)
	offs := positionOffsets(t, r)
	if offs[2] == 0 {
		t.Errorf("no message of partition 2 was trained once it had some (offsets %v)", offs)
	}
	tp.trainedOnce(t, save, offs, -1)
}

// checkpointOffsets reads the partitions' next offsets from the newest
// checkpoint of each trainer of a job.
func checkpointOffsets(t *testing.T, ck string, trainers int) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for i := range trainers {
		c := &modelfile.Checkpointer{Dir: ck, Node: fmt.Sprintf("trainer-%d", i)}
		m, ok, err := c.Manifest()
		if err != nil || !ok {
			t.Fatalf("trainer-%d has no checkpoint in %s (%v)", i, ck, err)
		}
		meta, err := c.Metadata(m.Steps[len(m.Steps)-1])
		if err != nil {
			t.Fatal(err)
		}
		var pos struct {
			Partitions []int64
			Offsets    []int64
		}
		if err := json.Unmarshal([]byte(meta["stream"]), &pos); err != nil {
			t.Fatal(err)
		}
		for j, p := range pos.Partitions {
			out[p] = pos.Offsets[j]
		}
	}
	return out
}

// The same for a 2x2 job (psgraph train, sync): trainer 1's partition 3
// is empty at first; killed twice and resumed, the job trains every
// message before its trainers' final positions once (C holds the two
// trainers' mean, so a message trained once is -0.5).
func TestStreamKafkaJobIdlePartitionKilledTrainsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tp := newIDTopic(t, 4)
	tp.produce(t, 500, 0, 1, 2) // partition 3 stays empty for now
	model := countModel(t, dir, fmt.Sprintf("kafka: {brokers: [%q], topic: ids, start: earliest, idle_after: 300ms}", tp.addr), 4000)
	ck := filepath.Join(dir, "ck")
	save := filepath.Join(dir, "count.safetensors")
	args := []string{"train", model, "--trainers", "2", "--pservers", "2", "--steps", "50", "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "4", "--log-every", "1", "--log-format", "json"}
	var at []int
	for i, step := range killTargets(6, 2, 3, 45) {
		p := streamRun(t, fmt.Sprintf("run %d", i), "", args...)
		at = append(at, killAt(t, p, step))
		if i == 0 {
			tp.produce(t, 400, 3) // the empty partition gets messages
		}
	}
	r := streamRun(t, "last run", "", args...).wait(t, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("the last run: exit %d\n%s", r.code, r.stderr)
	}
	t.Logf("killed after steps %v", at)
	offs := checkpointOffsets(t, ck, 2)
	tp.trainedOnce(t, save, offs, -0.5)
}
