package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/psgraph/psgraph/exec/modelfile"
)

// The stopped jobs checkpoint every 1000 steps: the checkpoint a rerun
// resumes from is the one the stop wrote.
//
// The stop tests' stream: 12,800 rows, 100 steps of a job of two
// trainers with batch 64; the first part holds 50 steps' rows (a job
// reading it waits for more at its end), the rest arrives after the stop.
const (
	haltRows  = 12800
	haltFirst = 6400
	haltSteps = "90" // the resumed and the undisturbed jobs' last step
)

// growingSource is an online source the test adds rows to: a Kafka topic
// of four partitions (two per trainer), its messages the lines dealt to
// the partitions in turn as topic() deals them, or a followed file.
type growingSource struct {
	yaml string         // the model's data source
	add  func([]string) // appends lines
	addr string         // kafka: the broker
	file string         // file: its path
	n    int            // lines added so far
}

func newGrowingSource(t *testing.T, kind, dir string) *growingSource {
	t.Helper()
	g := &growingSource{}
	switch kind {
	case "kafka":
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "clicks"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		g.addr = c.ListenAddrs()[0]
		g.yaml = fmt.Sprintf("kafka: {brokers: [%q], topic: clicks, start: earliest}", g.addr)
		g.add = func(lines []string) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(g.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("clicks"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var rs []*kgo.Record
			for _, l := range lines {
				rs = append(rs, &kgo.Record{Partition: int32(g.n % 4), Value: []byte(l)})
				g.n++
			}
			if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	default:
		g.file = filepath.Join(dir, "growing.tsv")
		if err := os.WriteFile(g.file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		g.yaml = "csv: " + g.file + "\n  follow: true"
		g.add = func(lines []string) {
			f, err := os.OpenFile(g.file, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
				t.Fatal(err)
			}
			g.n += len(lines)
		}
	}
	return g
}

// genLines is genRows' rows as lines.
func genLines(t *testing.T, dir string, n int) []string {
	t.Helper()
	b, err := os.ReadFile(genRows(t, dir, n))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// stoppedSummary reads the summary a stopped job printed: its steps and
// why its stream ended.
func stoppedSummary(t *testing.T, r result) (int, string) {
	t.Helper()
	var sum struct {
		Steps  int
		Stream struct{ Ended string }
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, r.stdout)
	}
	return sum.Steps, sum.Stream.Ended
}

// newestCheckpoints is the newest checkpoint step of each node of a 2x2
// job in dir.
func newestCheckpoints(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range []string{"pserver-0", "pserver-1", "trainer-0", "trainer-1"} {
		m, ok, err := (&modelfile.Checkpointer{Dir: dir, Node: n}).Manifest()
		if err != nil || !ok || len(m.Steps) == 0 {
			t.Fatalf("%s has no checkpoint in %s (%v)", n, dir, err)
		}
		out[n] = m.Steps[len(m.Steps)-1]
	}
	return out
}

// checkStopped checks that a stopped job's nodes all checkpointed the
// step trainer 0's summary says the job stopped at, each trainer's with
// the stream position after exactly the rows of its steps: a Kafka
// trainer's steps x 64 records of its partitions, a file's trainer t
// the records through its own last chunk of 64 (the chunks go to the
// trainers in turn).
func checkStopped(t *testing.T, kind, ck string, r result) int {
	t.Helper()
	steps, ended := stoppedSummary(t, r)
	if ended != "stopped" {
		t.Errorf("the summary says the stream ended %q, want stopped", ended)
	}
	for n, s := range newestCheckpoints(t, ck) {
		if s != int64(steps) {
			t.Errorf("%s's newest checkpoint is of step %d, and the job stopped after step %d", n, s, steps)
		}
	}
	for i := range 2 {
		meta, err := (&modelfile.Checkpointer{Dir: ck, Node: fmt.Sprintf("trainer-%d", i)}).Metadata(int64(steps))
		if err != nil {
			t.Fatal(err)
		}
		var pos struct{ Records int64 }
		if err := json.Unmarshal([]byte(meta["stream"]), &pos); err != nil {
			t.Fatalf("trainer-%d's checkpoint of step %d: stream position %q: %v", i, steps, meta["stream"], err)
		}
		want := int64(steps) * 64
		if kind == "file" {
			want = int64(2*(steps-1)+i+1) * 64
		}
		if pos.Records != want {
			t.Errorf("trainer-%d's checkpoint of step %d holds the position after %d records, want %d: %s", i, steps, pos.Records, want, meta["stream"])
		}
	}
	return steps
}

// resumeAndCompare reruns the job from its checkpoints to step 90 and
// checks its model is bitwise the undisturbed job's (ref), and its
// progressive validation the same.
func resumeAndCompare(t *testing.T, model, ck string, ref undisturbedJob, stopped int) {
	t.Helper()
	got := filepath.Join(filepath.Dir(ck), "resumed.safetensors")
	r := streamRun(t, "resumed", "", "train", model, "--trainers", "2", "--pservers", "2", "--steps", haltSteps, "--save", got,
		"--checkpoint-dir", ck, "--checkpoint-every", "7", "--log-format", "json").wait(t, 3*time.Minute)
	if r.code != 0 {
		t.Fatalf("the resumed job: exit %d\n%s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("resuming from the checkpoints of step %d", stopped); !strings.Contains(r.stderr, want) {
		t.Errorf("the resumed job does not say %q:\n%s", want, r.stderr)
	}
	sameModel(t, ref.model, got)
	if a, b := windowOf(t, ref.r), windowOf(t, r); a != b {
		t.Errorf("the resumed job's progressive validation is %s, the undisturbed job's %s", b, a)
	}
}

// undisturbedJob is the model and the summary of the undisturbed job.
type undisturbedJob struct {
	model string
	r     result
}

// undisturbedJobs holds the undisturbed job of each kind of source
// (kafka, file), run once for both TestStopTrainParent and
// TestStopEveryRole: the same rows, model and flags, so the same job.
var undisturbedJobs = map[string]*sharedUndisturbed{"kafka": {}, "file": {}}

type sharedUndisturbed struct {
	once sync.Once
	job  undisturbedJob
	ok   bool
}

// undisturbedOf is the undisturbed job of the kind of source kind on
// lines (every row), run by the first test that asks, on a source of
// its own in a directory that outlives that test.
func undisturbedOf(t *testing.T, kind string, lines []string) undisturbedJob {
	t.Helper()
	s := undisturbedJobs[kind]
	s.once.Do(func() {
		dir, err := os.MkdirTemp(sharedDir, "undisturbed-"+kind)
		if err != nil {
			t.Fatal(err)
		}
		src := newGrowingSource(t, kind, dir)
		src.add(lines)
		s.job = undisturbed(t, dir, streamModel(t, dir, src.yaml, "normalize: none", "sgd"))
		s.ok = true
	})
	if !s.ok {
		t.Fatalf("the undisturbed %s job failed (in the test that ran it first)", kind)
	}
	return s.job
}

// undisturbed runs the job to step 90 on a source holding every row.
func undisturbed(t *testing.T, dir, model string) undisturbedJob {
	t.Helper()
	ref := filepath.Join(dir, "undisturbed.safetensors")
	r := streamRun(t, "undisturbed", "", "train", model, "--trainers", "2", "--pservers", "2", "--steps", haltSteps, "--save", ref,
		"--checkpoint-dir", filepath.Join(dir, "ck-undisturbed"), "--checkpoint-every", "7", "--log-format", "json").wait(t, 3*time.Minute)
	if r.code != 0 {
		t.Fatalf("undisturbed job: exit %d\n%s", r.code, r.stderr)
	}
	return undisturbedJob{ref, r}
}

// A 2x2 job (psgraph train) reading a Kafka topic or a followed file,
// without --steps, stopped by SIGTERM to train at a step drawn from a
// seed: train passes the signal on, the trainers agree on their last
// step, every node checkpoints it and exits 0, train prints trainer 0's
// summary and exits 0. Rerun from the checkpoints once more rows arrived,
// the job ends bitwise where an undisturbed job ends: it went on at
// exactly the next row.
func TestStopTrainParent(t *testing.T) {
	for i, kind := range []string{"kafka", "file"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			lines := genLines(t, dir, haltRows)
			src := newGrowingSource(t, kind, dir)
			src.add(lines[:haltFirst])
			model := streamModel(t, dir, src.yaml, "normalize: none", "sgd")
			ck := filepath.Join(dir, "ck")
			p := streamRun(t, "stopped", "", "train", model, "--trainers", "2", "--pservers", "2", "--save", filepath.Join(dir, "stopped.safetensors"),
				"--checkpoint-dir", ck, "--checkpoint-every", "1000", "--log-every", "1", "--log-format", "json")
			target := killTargets(uint64(10+i), 1, 3, 45)[0]
			waitStep(t, p, target)
			p.cmd.Process.Signal(syscall.SIGTERM)
			r := p.wait(t, time.Minute)
			if r.code != 0 {
				t.Fatalf("train after SIGTERM: exit %d\n%s", r.code, r.stderr)
			}
			stopped := checkStopped(t, kind, ck, r)
			t.Logf("SIGTERM at step %d: the job stopped after step %d", target, stopped)
			src.add(lines[src.n:]) // the rest of the rows arrive
			resumeAndCompare(t, model, ck, undisturbedOf(t, kind, lines), stopped)
		})
	}
}

// The same job run role by role, as Kubernetes runs its pods, each role
// sent SIGTERM on its own, in an order of the test's (pserver-1 first, or
// trainer-1) at moments drawn from a seed: a pserver asked to stop serves on
// until the trainers finish the step they agree on; every role
// checkpoints that step and exits 0, and the job rerun from the
// checkpoints ends bitwise where the undisturbed job ends.
func TestStopEveryRole(t *testing.T) {
	for i, c := range []struct {
		kind  string
		order []int // of pserver-0, pserver-1, trainer-0, trainer-1
	}{{"kafka", []int{1, 2, 0, 3}}, {"file", []int{3, 0, 1, 2}}} {
		t.Run(c.kind, func(t *testing.T) {
			dir := t.TempDir()
			lines := genLines(t, dir, haltRows)
			src := newGrowingSource(t, c.kind, dir)
			src.add(lines[:haltFirst])
			model := streamModel(t, dir, src.yaml, "normalize: none", "sgd")
			plan := filepath.Join(dir, "plan")
			if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
				t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
			}
			ck := filepath.Join(dir, "ck")
			addrs := []string{freeAddr(t), freeAddr(t)}
			env := []string{"PSGRAPH_TOKEN=stop-test"}
			common := []string{"--plan", plan, "--checkpoint-dir", ck, "--checkpoint-every", "1000", "--log-every", "1", "--log-format", "json"}
			var roles []*proc
			for j, a := range addrs {
				roles = append(roles, start(t, fmt.Sprintf("pserver-%d", j), env, append([]string{"run", "--role", "pserver", "--index", fmt.Sprint(j), "--listen", a}, common...)...))
			}
			for j := range 2 {
				args := append([]string{"run", "--role", "trainer", "--index", fmt.Sprint(j), "--pserver-endpoints", strings.Join(addrs, ",")}, common...)
				if j == 0 {
					args = append(args, "--save", filepath.Join(dir, "stopped.safetensors"))
				}
				roles = append(roles, start(t, fmt.Sprintf("trainer-%d", j), env, args...))
			}
			rnd := rand.New(rand.NewPCG(uint64(20+i), 3))
			target := 3 + rnd.IntN(40)
			waitStep(t, roles[2], target)
			var names []string
			for _, k := range c.order {
				roles[k].cmd.Process.Signal(syscall.SIGTERM) // one that already ended ignores it
				names = append(names, roles[k].name)
				time.Sleep(time.Duration(rnd.IntN(150)) * time.Millisecond) // the pods' signals come apart
			}
			var t0 result
			for _, p := range roles {
				r := p.wait(t, time.Minute)
				if r.code != 0 {
					t.Fatalf("%s after SIGTERM (order %v): exit %d\n%s", p.name, names, r.code, r.stderr)
				}
				if p.name == "trainer-0" {
					t0 = r
				}
			}
			stopped := checkStopped(t, c.kind, ck, t0)
			t.Logf("SIGTERM in the order %v from step %d: the job stopped after step %d", names, target, stopped)
			src.add(lines[src.n:]) // the rest of the rows arrive
			resumeAndCompare(t, model, ck, undisturbedOf(t, c.kind, lines), stopped)
		})
	}
}

// An async 2x2 job reading Kafka stops too: SIGTERM to train, each
// trainer finishes its own step (no agreement: they do not wait for each
// other), checkpoints it with the stream position after exactly its
// steps' rows, and every node exits 0.
func TestStopAsyncJob(t *testing.T) {
	dir := t.TempDir()
	lines := genLines(t, dir, haltRows)
	src := newGrowingSource(t, "kafka", dir)
	src.add(lines[:haltFirst])
	model := streamModel(t, dir, src.yaml, "normalize: none", "sgd")
	ck := filepath.Join(dir, "ck")
	p := streamRun(t, "stopped", "", "train", model, "--trainers", "2", "--pservers", "2", "--mode", "async",
		"--checkpoint-dir", ck, "--checkpoint-every", "1000", "--log-every", "1", "--log-format", "json")
	// Both trainers trained (on a loaded machine trainer-1 may start
	// well after trainer-0; one with no step has nothing to checkpoint).
	for _, role := range []string{"trainer-0", "trainer-1"} {
		waitRoleStep(t, p, role, 20)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, time.Minute)
	if r.code != 0 {
		t.Fatalf("train after SIGTERM: exit %d\n%s", r.code, r.stderr)
	}
	if _, ended := stoppedSummary(t, r); ended != "stopped" {
		t.Errorf("the summary says the stream ended %q, want stopped", ended)
	}
	for i := range 2 {
		c := &modelfile.Checkpointer{Dir: ck, Node: fmt.Sprintf("trainer-%d", i)}
		m, ok, err := c.Manifest()
		if err != nil || !ok || len(m.Steps) != 1 {
			t.Fatalf("trainer-%d's checkpoints: %v (%v), want the stop's", i, m.Steps, err)
		}
		meta, err := c.Metadata(m.Steps[0])
		if err != nil {
			t.Fatal(err)
		}
		var pos struct{ Records int64 }
		json.Unmarshal([]byte(meta["stream"]), &pos)
		if pos.Records != m.Steps[0]*64 {
			t.Errorf("trainer-%d stopped after step %d with the position after %d records, want %d", i, m.Steps[0], pos.Records, m.Steps[0]*64)
		}
		t.Logf("trainer-%d stopped after step %d", i, m.Steps[0])
	}
}

// A pserver of a job reading an online source asked to stop serves on
// until its trainers are done; with no trainer there it would wait for
// ever: a second SIGTERM stops it at once (exit 1), saying so.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	dir := t.TempDir()
	src := newGrowingSource(t, "file", dir)
	model := streamModel(t, dir, src.yaml, "normalize: none", "sgd")
	plan := filepath.Join(dir, "plan")
	if r := psgraph(t, "split", model, "--trainers", "1", "--pservers", "1", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	p := start(t, "pserver-0", nil, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", freeAddr(t))
	waitForLine(t, p, "listening")
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitForLine(t, p, "asked to stop")
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("the pserver ended on the first SIGTERM (%v), with no trainer done:\n%s", err, p.stderrText())
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, 30*time.Second)
	if r.code != 1 || !strings.Contains(r.stderr, "a second terminated: stopping at once") {
		t.Fatalf("after a second SIGTERM: exit %d, want 1 saying so\n%s", r.code, r.stderr)
	}
}

// waitRoleStep waits until train's relayed log (JSON lines) has a
// progress line of role at step >= step (waitLog).
func waitRoleStep(t *testing.T, p *proc, role string, step int) {
	t.Helper()
	tag := fmt.Sprintf(`"role":%q,"step":`, role)
	reached := func() bool {
		for _, line := range strings.Split(p.stderrText(), "\n") {
			if i := strings.Index(line, tag); i >= 0 {
				var n int
				if _, err := fmt.Sscanf(line[i+len(tag):], "%d", &n); err == nil && n >= step {
					return true
				}
			}
		}
		return false
	}
	waitLog(t, p, fmt.Sprintf("%s's step %d", role, step), reached)
}
