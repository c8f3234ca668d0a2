package cmd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/psgraph/psgraph/exec/modelfile"
)

// streamModel writes the small CTR model of testdata/stream with the
// given data source (YAML lines of the data section), normalization and
// optimizer into dir and returns its path.
func streamModel(t *testing.T, dir, source, normalize, optimizer string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/stream/ctr-small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("@SOURCE@", source, "@NORMALIZE@", normalize, "@OPTIMIZER@", optimizer).Replace(string(b))
	path := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// genRows writes n generated Criteo-format rows into a file of dir.
func genRows(t *testing.T, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "rows.tsv")
	if r := psgraph(t, "gen", "criteo", "-o", path, "--rows", strconv.Itoa(n), "--seed", "7", "--vocab", "3000"); r.code != 0 {
		t.Fatalf("gen: %s", r.stderr)
	}
	return path
}

// streamRun is a run of the psgraph binary whose standard input is the
// given file (read through a pipe, "" for none).
func streamRun(t *testing.T, name, stdin string, args ...string) *proc {
	t.Helper()
	var in io.Reader
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		in = bufio.NewReader(f) // not an *os.File: a pipe, as from a producer
	}
	return startCmdIn(t, name, nil, in, binary, args...)
}

var stepField = regexp.MustCompile(`"step":(\d+)`)

// lastStep is the step of p's newest progress line (-1: none).
func lastStep(p *proc) int {
	ms := stepField.FindAllStringSubmatch(p.stderrText(), -1)
	if len(ms) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][1])
	return n
}

// waitStep waits until p logged a step >= step, failing if p ended first.
func waitStep(t *testing.T, p *proc, step int) {
	t.Helper()
	waitLog(t, p, fmt.Sprintf("step %d", step), func() bool { return lastStep(p) >= step })
}

// waitLog polls p's growing log until reached says what was awaited is
// there; it fails the test if p ended first or after 90 s.
func waitLog(t *testing.T, p *proc, what string, reached func() bool) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); !reached(); {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s ended (%v) before %s:\n%s", p.name, err, what, p.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %s:\n%s", p.name, what, p.stderrText())
		}
		time.Sleep(time.Millisecond) // polling a growing log
	}
}

// killAt waits until p logged step >= step and kills it with SIGKILL; it
// fails the test if p ended first.
func killAt(t *testing.T, p *proc, step int) int {
	t.Helper()
	waitStep(t, p, step)
	p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("%s was not killed at step %d (it ended: %v):\n%s", p.name, step, err, p.stderrText())
	}
	return lastStep(p)
}

// kills is how many times the killed-and-resumed tests kill their run:
// once by default (a kill anywhere, a resume from its checkpoint, the
// model bitwise the undisturbed run's), five times with -long (resumes
// of resumed runs, kills falling in more places: in a step, during a
// checkpoint's write, between two).
func kills() int {
	if testfix.IsLong() {
		return 5
	}
	return 1
}

// killTargets are n steps in [lo, hi), increasing, drawn from a seed.
func killTargets(seed uint64, n, lo, hi int) []int {
	r := rand.New(rand.NewPCG(seed, 5))
	var out []int
	for range n {
		out = append(out, lo+r.IntN(hi-lo))
	}
	slices.Sort(out)
	return out
}

// sameModel fails unless the two model files hold bitwise equal tensors.
func sameModel(t *testing.T, want, got string) {
	t.Helper()
	a, _, err := modelfile.LoadSafetensors(want)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := modelfile.LoadSafetensors(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%s has %d tensors, %s %d", want, len(a), got, len(b))
	}
	for name, x := range a {
		y := b[name]
		if y == nil || string(x.Bytes()) != string(y.Bytes()) {
			t.Errorf("tensor %s of the resumed run differs from the undisturbed run's", name)
		}
	}
}

// windowOf is what a summary says of the progressive validation: the
// windowed loss and metrics, the window's rows and the records read.
func windowOf(t *testing.T, r result) string {
	t.Helper()
	var sum map[string]any
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, r.stdout)
	}
	st, _ := sum["stream"].(map[string]any)
	// the last progress line of the local run or trainer 0, at full precision
	last := ""
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, `"message":"train"`) && (strings.Contains(l, `"role":"local"`) || strings.Contains(l, `"role":"trainer-0"`)) {
			last = strings.Join(windowField.FindAllString(l, -1), " ")
		}
	}
	return fmt.Sprintf("loss %v auc %v window_rows %v records %v; last progress line %s", sum["loss"], sum["auc"], st["window_rows"], st["records"], last)
}

var windowField = regexp.MustCompile(`"window_[a-z]+":[^,}]+`)

// killedAndResumed runs args (a local run or a train job, which must
// write --save to the file named by save) undisturbed, then again in a
// fresh checkpoint directory killed with SIGKILL at each of the steps
// and resumed with the same command line, and checks that the resumed
// run ends with the undisturbed run's model, bit for bit, and reports
// the undisturbed run's progressive validation: the window comes back
// from each checkpoint.
func killedAndResumed(t *testing.T, dir, stdin string, kills []int, args func(save, ck string) []string) {
	t.Helper()
	ref := filepath.Join(dir, "undisturbed.safetensors")
	p := streamRun(t, "undisturbed", stdin, args(ref, filepath.Join(dir, "ck-undisturbed"))...)
	undisturbed := p.wait(t, 3*time.Minute)
	if undisturbed.code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", undisturbed.code, undisturbed.stderr)
	}
	ck := filepath.Join(dir, "ck")
	got := filepath.Join(dir, "resumed.safetensors")
	var at []int
	for i, step := range kills {
		p := streamRun(t, fmt.Sprintf("run %d", i), stdin, args(got, ck)...)
		at = append(at, killAt(t, p, step))
	}
	p = streamRun(t, "last run", stdin, args(got, ck)...)
	r := p.wait(t, 3*time.Minute)
	if r.code != 0 {
		t.Fatalf("the last run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "resumed from checkpoint") && !strings.Contains(r.stderr, "resuming from the checkpoints") {
		t.Errorf("the last run did not resume:\n%s", r.stderr)
	}
	t.Logf("killed after steps %v (targets %v)", at, kills)
	sameModel(t, ref, got)
	if a, b := windowOf(t, undisturbed), windowOf(t, r); a != b {
		t.Errorf("the resumed run's progressive validation is %s, the undisturbed run's %s", b, a)
	}
}

// A local run reading standard input, killed with SIGKILL at a random
// step (once; five times with -long, see kills) and resumed each time from its checkpoint on the same
// input from its start, trains each row once, in the same batches: its
// model is bitwise the undisturbed run's. The normalization statistics
// of the stream's first rows (normalize_rows) come back from the
// checkpoint.
func TestStreamStdinKilledResumesBitwise(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rows := genRows(t, dir, 12000) // 187 steps of 64
	model := streamModel(t, dir, `csv: "-"`, "normalize: standard\n  normalize_rows: 1000", "sgd")
	killedAndResumed(t, dir, rows, killTargets(1, kills(), 3, 180), func(save, ck string) []string {
		return []string{"run", "--role", "local", model, "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "7", "--log-every", "1", "--log-format", "json"}
	})
}

// The same for a followed file (the run ends at --steps) and a followed
// directory of part files.
func TestStreamFollowKilledResumesBitwise(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"file", "dir"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			rows := genRows(t, dir, 12000)
			src := "csv: " + rows + "\n  follow: true"
			if what == "dir" {
				parts := filepath.Join(dir, "parts")
				splitParts(t, rows, parts, 3)
				src = "csv: " + parts + "\n  follow: true"
			}
			model := streamModel(t, dir, src, "normalize: none", "sgd")
			killedAndResumed(t, dir, "", killTargets(2, kills(), 3, 170), func(save, ck string) []string {
				return []string{"run", "--role", "local", model, "--steps", "175", "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "6", "--log-every", "1", "--log-format", "json"}
			})
		})
	}
}

// splitParts writes the lines of file into n part files of dir, the last
// part's last line without its newline.
func splitParts(t *testing.T, file, dir string, n int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	per := (len(lines) + n - 1) / n
	for i := range n {
		part := strings.Join(lines[i*per:min((i+1)*per, len(lines))], "")
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%05d.tsv", i)), []byte(part), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// topic starts an in-process Kafka broker (kfake) on loopback with a
// topic of the given partitions holding the file's lines, dealt to the
// partitions in turn, and returns its address.
func topic(t *testing.T, file string, partitions int32) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "clicks"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("clicks"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		rs = append(rs, &kgo.Record{Partition: int32(i) % partitions, Value: []byte(line)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A local run reading a Kafka topic of two partitions, killed with
// SIGKILL at a random step (once; five times with -long) and resumed
// from its checkpoint each time, ends bitwise where the undisturbed run ends: with sgd, and
// with adagrad (whose accumulators come back from the checkpoint too);
// its progressive validation over the last 1000 rows (16 batches) is the
// undisturbed run's too.
func TestStreamKafkaKilledResumesBitwise(t *testing.T) {
	t.Parallel()
	for _, opt := range []string{"sgd", "adagrad"} {
		t.Run(opt, func(t *testing.T) {
			dir := t.TempDir()
			rows := genRows(t, dir, 12000)
			addr := topic(t, rows, 2)
			// a window of 16 batches: it wraps many times, and comes back
			// from each checkpoint in its ring's order
			model := streamModel(t, dir, fmt.Sprintf("kafka: {brokers: [%q], topic: clicks, start: earliest}\n  metrics_window: 1000", addr), "normalize: standard\n  normalize_rows: 500", opt)
			killedAndResumed(t, dir, "", killTargets(3, kills(), 3, 180), func(save, ck string) []string {
				return []string{"run", "--role", "local", model, "--steps", "185", "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "5", "--log-every", "1", "--log-format", "json"}
			})
		})
	}
}

// A 2x2 job (psgraph train) reading a Kafka topic of four partitions,
// two per trainer, killed with SIGKILL at a random step (once; five
// times with -long) (train and, through Pdeathsig, every child) and rerun with the same command
// line, resumes where every node has a checkpoint, each trainer at its
// checkpoint's stream position, and ends bitwise where the undisturbed
// job ends.
func TestStreamKafkaJob2x2KilledResumesBitwise(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rows := genRows(t, dir, 16000)
	addr := topic(t, rows, 4)
	model := streamModel(t, dir, fmt.Sprintf("kafka: {brokers: [%q], topic: clicks, start: earliest}", addr), "normalize: none", "sgd")
	killedAndResumed(t, dir, "", killTargets(4, kills(), 3, 115), func(save, ck string) []string {
		return []string{"train", model, "--trainers", "2", "--pservers", "2", "--steps", "120", "--save", save, "--checkpoint-dir", ck, "--checkpoint-every", "5", "--log-every", "1", "--log-format", "json"}
	})
}

// SIGTERM stops a local run of an online source without a last step
// after its step: it checkpoints that step, saves, prints its summary
// (the stream's position, why it ended) and exits 0; run again, it goes
// on from there.
func TestStreamStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	rows := genRows(t, dir, 6000)
	model := streamModel(t, dir, "csv: "+rows+"\n  follow: true", "normalize: none", "sgd")
	ck := filepath.Join(dir, "ck")
	args := []string{"run", "--role", "local", model, "--save", filepath.Join(dir, "m.safetensors"), "--checkpoint-dir", ck, "--checkpoint-every", "1000", "--log-every", "1", "--log-format", "json"}
	p := streamRun(t, "stopped", "", args...)
	// The file holds 93 steps' rows; followed, the run waits for more.
	for deadline := time.Now().Add(60 * time.Second); lastStep(p) < 93 || !strings.Contains(p.stderrText(), "waiting for rows"); {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not reach the file's end and wait:\n%s", p.stderrText())
		}
		time.Sleep(10 * time.Millisecond) // polling a growing log
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, time.Minute)
	if r.code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", r.code, r.stderr)
	}
	var sum struct {
		Steps  int
		Stream struct {
			Ended    string
			Records  int64
			Position struct{ Line int64 }
		}
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, r.stdout)
	}
	if sum.Steps != 93 || sum.Stream.Ended != "stopped" || sum.Stream.Records != 93*64 || sum.Stream.Position.Line != 93*64 {
		t.Errorf("summary %+v, want 93 steps stopped at line %d", sum, 93*64)
	}
	m, _, err := (&modelfile.Checkpointer{Dir: ck, Node: "local"}).Manifest()
	if err != nil || len(m.Steps) == 0 || m.Steps[len(m.Steps)-1] != 93 {
		t.Errorf("checkpoints %v (%v), want the last at step 93", m.Steps, err)
	}
	more, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(rows, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.SplitAfter(string(more), "\n")
	f.WriteString(strings.Join(lines[:1000], "")) // more rows arrive
	f.Close()
	p = streamRun(t, "resumed", "", append(args, "--steps", "100")...)
	r = p.wait(t, time.Minute)
	if r.code != 0 || !strings.Contains(r.stderr, "resumed from checkpoint") || lastStep(p) != 100 {
		t.Fatalf("the resumed run: exit %d\n%s", r.code, r.stderr)
	}
}

// A bad message stops a run reading Kafka, naming its partition and
// offset (exit 1); with on_bad_row: skip it is counted and skipped, and
// the summary says how many.
func TestStreamKafkaBadRow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rows := genRows(t, dir, 2000)
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[7] = "not a row\n" // message 7: partition 1, offset 3
	if err := os.WriteFile(rows, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := topic(t, rows, 2)
	src := fmt.Sprintf("kafka: {brokers: [%q], topic: clicks, start: earliest}", addr)
	stop := psgraph(t, "run", "--role", "local", streamModel(t, dir, src, "normalize: none", "sgd"), "--steps", "20")
	badInput{"", `kafka topic "clicks" partition 1 offset 3: line has 1 fields`}.check(t, stop)
	skip := psgraph(t, "run", "--role", "local", streamModel(t, dir, src+"\n  on_bad_row: skip", "normalize: none", "sgd"), "--steps", "20")
	if skip.code != 0 || !strings.Contains(skip.stdout, `"bad_rows":1`) || !strings.Contains(skip.stderr, "skipped a bad row") {
		t.Errorf("on_bad_row: skip: exit %d\n%s%s", skip.code, skip.stdout, skip.stderr)
	}
}

var streamMemory = flag.Duration("stream-memory", 0, "run TestStreamMemoryFlat for this long (e.g. 2m; 0 skips it; bench/stream-bench.sh runs 20 minutes)")

// A local run on an endless stream (a file whose vocabulary drifts, fed to
// standard input again and again) with a dynamic table whose rows expire
// after 200 unseen steps keeps its memory flat: its RSS at the end is
// within 10% of its RSS at a tenth of the run. Behind -stream-memory.
func TestStreamMemoryFlat(t *testing.T) {
	if *streamMemory == 0 {
		t.Skip("-stream-memory DURATION runs it")
	}
	dir := t.TempDir()
	rows := filepath.Join(dir, "drift.tsv")
	if r := psgraph(t, "gen", "criteo", "-o", rows, "--rows", "200000", "--vocab", "200000", "--drift", "0.5", "--seed", "9"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	model := streamModel(t, dir, `csv: "-"`, "normalize: none", "adagrad")
	b, _ := os.ReadFile(model)
	s := strings.Replace(string(b), "hash_buckets: 5000}", "key: hash64}", 1)
	s = strings.Replace(s, "emb: {shape: [5000, 8], init: {type: normal, std: 0.01, seed: 1}}", "emb: {dynamic: {dim: 8, min_count: 1, ttl_steps: 200}, init: {type: normal, std: 0.01, seed: 1}}", 1)
	os.WriteFile(model, []byte(s), 0o644)
	data, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(binary, "run", "--role", "local", model, "--log-every", "5000")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb lockedBuffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	go func() {
		for {
			if _, err := in.Write(data); err != nil {
				return
			}
		}
	}()
	rss := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Process.Pid))
		if err != nil {
			t.Fatalf("the run ended: %v\n%s", err, errb.String())
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
		return 0
	}
	time.Sleep(*streamMemory / 10) // the run's first tenth: its memory then is the reference
	early := rss()
	time.Sleep(*streamMemory - *streamMemory/10) // the rest of the run
	late := rss()
	t.Logf("RSS %d KiB at %v, %d KiB at %v; %s", early, *streamMemory/10, late, *streamMemory, lastLine(errb.String()))
	if float64(late) > 1.1*float64(early) {
		t.Errorf("RSS grew from %d KiB to %d KiB (more than 10%%)", early, late)
	}
}
