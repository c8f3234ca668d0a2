package cmd_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A trainer of a running sync job (a dense model, which takes a
// restarted trainer back) reading a Kafka topic or a followed file,
// killed with SIGKILL at a step drawn from a seed and restarted with the
// same command line: it joins at the pservers' step, opens the source at
// its newest checkpoint's position and skips the batches of the steps
// the killed process trained after it. Each message before the trainers'
// final positions is trained once, by the killed process or the new one,
// in both blocks of the counting model (on two pservers, which the kill
// can leave a step apart) and no other is: C1 and C2 say so, message by
// message.
func TestStreamRestartedTrainerTrainsOnce(t *testing.T) {
	t.Parallel()
	for i, kind := range []string{"kafka", "file"} {
		t.Run(kind, func(t *testing.T) { restartedTrainer(t, kind, uint64(7+i)) })
	}
}

func restartedTrainer(t *testing.T, kind string, seed uint64) {
	dir := t.TempDir()
	const n = 4000
	tp := newIDTopic(t, 4)
	src := fmt.Sprintf("kafka: {brokers: [%q], topic: ids, start: earliest}", tp.addr)
	if kind == "kafka" {
		tp.produce(t, n/4, 0, 1, 2, 3)
	} else {
		// the lines of a file go to the trainers a batch (16) at a time,
		// in turn: "partition" 0 is trainer 0's, 1 trainer 1's, the
		// "offset" a line's index among its trainer's
		file := filepath.Join(dir, "ids.tsv")
		var b strings.Builder
		for id := range n {
			fmt.Fprintf(&b, "%d\n", id)
			tr, chunk := (id/16)%2, id/32
			tp.where[id] = [2]int64{int64(tr), int64(chunk*16 + id%16)}
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		src = "csv: " + file + "\n  follow: true"
	}
	b, err := os.ReadFile("testdata/stream/count-dense.yaml")
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "count-dense.yaml")
	if err := os.WriteFile(model, []byte(strings.NewReplacer("@SOURCE@", src, "@ROWS@", strconv.Itoa(n)).Replace(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan")
	r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan)
	if out := r.stdout + r.stderr; r.code != 0 || !regexp.MustCompile(`C1 .*-> pserver:0`).MatchString(out) || !regexp.MustCompile(`C2 .*-> pserver:1`).MatchString(out) {
		t.Fatalf("split: exit %d, want C1 and C2 dense blocks on pserver 0 and 1\n%s", r.code, out)
	}
	ck := filepath.Join(dir, "ck")
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=restart-test"}
	common := []string{"--plan", plan, "--checkpoint-dir", ck, "--checkpoint-every", "40", "--log-every", "1", "--log-format", "json"}
	var roles []*proc
	for j, a := range addrs {
		roles = append(roles, start(t, fmt.Sprintf("pserver-%d", j), env, append([]string{"run", "--role", "pserver", "--index", fmt.Sprint(j), "--listen", a, "--trainer-timeout", "60s"}, common...)...))
	}
	trainer := func(i int, name string, more ...string) *proc {
		args := append([]string{"run", "--role", "trainer", "--index", fmt.Sprint(i), "--pserver-endpoints", strings.Join(addrs, ","), "--steps", "120"}, common...)
		return start(t, name, env, append(args, more...)...)
	}
	save := filepath.Join(dir, "count.safetensors")
	t0 := trainer(0, "trainer-0", "--save", save)
	t1 := trainer(1, "trainer-1")
	target := killTargets(seed, 1, 20, 100)[0]
	killAt(t, t1, target)
	t1b := trainer(1, "trainer-1 (restarted)")
	dumpOnFailure(t, append([]*proc{t1, t1b}, roles...)...)
	for _, p := range append([]*proc{t0, t1b}, roles...) {
		if r := p.wait(t, 2*time.Minute); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	log := t1b.stderrText()
	// It joins at the pservers' step and skips the batches of the steps
	// since its newest checkpoint (from_step; -1: none yet, every step
	// from the stream's start), and only those. A kill that lands just
	// after a checkpoint leaves none to skip (checkpoints every 40 steps
	// and kills drawn from 20-100 make that rare; the trained-once check
	// below holds either way).
	const skipMsg = "skipping the rows of the steps the previous process trained"
	join, _ := logField(t, log, "joining at the pservers' step", "step")
	if _, skipped := logField(t, log, skipMsg, "batches"); skipped {
		batches, _ := logField(t, log, skipMsg, "batches")
		from, _ := logField(t, log, skipMsg, "from_step")
		to, _ := logField(t, log, skipMsg, "to_step")
		if to != join || from >= to || batches != to-max(from, 0) {
			t.Errorf("joined at step %d, skipped %d batches from step %d to %d", join, batches, from, to)
		}
	} else if ckpt, ok := logField(t, log, "restored this trainer's own state", "checkpoint"); !ok || ckpt != join {
		t.Errorf("joined at step %d, skipped nothing, restored checkpoint %d (found %v):\n%s", join, ckpt, ok, log)
	} else {
		t.Logf("killed just after checkpoint %d: no steps to skip this run", ckpt)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "joining") || strings.Contains(l, "skipping") {
			t.Log(l)
		}
	}
	t.Logf("trainer-1 killed after step %d (target %d)", lastStep(t1), target)
	offs := map[int64]int64{}
	if kind == "kafka" {
		offs = checkpointOffsets(t, ck, 2)
	} else { // each trainer's lines through its 120 batches
		offs[0], offs[1] = 120*16, 120*16
	}
	for _, c := range []string{"C1", "C2"} {
		tp.trainedOnceIn(t, save, c, offs, -0.5)
	}
}

// logField is the integer field key of the first JSON log line with
// message msg, and whether there is one.
func logField(t *testing.T, log, msg, key string) (int64, bool) {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `"message":"`+msg+`"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		v, ok := m[key].(float64)
		if !ok {
			t.Fatalf("log line %q has no number %q", l, key)
		}
		return int64(v), true
	}
	return 0, false
}
