package launch

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/psgraph/psgraph/exec/modelfile"

	"github.com/psgraph/psgraph/exec/tensor"
)

// Plan's children of `psgraph train`: pservers first, each with the
// arguments of its `psgraph run` and the job's token and GOMAXPROCS.
func TestPlan(t *testing.T) {
	token, nopark := "PSGRAPH_TOKEN=t0k3n", "GODEBUG="+SysmonNoPark
	cases := []struct {
		name string
		opt  PlanOptions
		want []Child
	}{
		{
			name: "1x1",
			opt:  PlanOptions{Dir: "plan", Endpoints: []string{"127.0.0.1:7000"}, Trainers: 1, Token: "t0k3n", NumCPU: 2, LogFormat: "console"},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "127.0.0.1:7000", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "127.0.0.1:7000", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "2x2 with every flag passed on",
			opt: PlanOptions{Dir: "plan", Endpoints: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Trainers: 2, Token: "t0k3n", NumCPU: 8,
				Steps: 300, Batch: 32, InitFrom: "init.safetensors", Save: "out.safetensors", Metrics: "run.jsonl", LogFormat: "json", LogLevel: "debug", LogEvery: 50, FinalPass: "true"},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "127.0.0.1:7000", "--plan", "plan", "--log-format", "json", "--log-level", "debug", "--log-every", "50", "--init-from", "init.safetensors"}, Env: []string{token, "GOMAXPROCS=2", nopark}, DropSchedTrace: true},
				{Name: "pserver-1", Args: []string{"run", "--role", "pserver", "--index", "1", "--listen", "127.0.0.1:7001", "--plan", "plan", "--log-format", "json", "--log-level", "debug", "--log-every", "50", "--init-from", "init.safetensors"}, Env: []string{token, "GOMAXPROCS=2", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "127.0.0.1:7000,127.0.0.1:7001", "--plan", "plan", "--log-format", "json", "--log-level", "debug", "--log-every", "50", "--steps", "300", "--batch", "32", "--save", "out.safetensors", "--metrics", "run.jsonl", "--final-pass=true"}, Env: []string{token, "GOMAXPROCS=2", nopark}, DropSchedTrace: true},
				{Name: "trainer-1", Args: []string{"run", "--role", "trainer", "--index", "1", "--pserver-endpoints", "127.0.0.1:7000,127.0.0.1:7001", "--plan", "plan", "--log-format", "json", "--log-level", "debug", "--log-every", "50", "--steps", "300", "--batch", "32", "--metrics", "run.trainer-1.jsonl", "--final-pass=true"}, Env: []string{token, "GOMAXPROCS=2", nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "2x2 with a fresh checkpoint-dir",
			opt:  PlanOptions{Dir: "plan", Endpoints: []string{"a:1", "b:2"}, Trainers: 2, Token: "t0k3n", NumCPU: 2, LogFormat: "console", CheckpointDir: "ck", CheckpointEvery: 50},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "a:1", "--plan", "plan", "--log-format", "console", "--checkpoint-dir", "ck", "--checkpoint-every", "50"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "pserver-1", Args: []string{"run", "--role", "pserver", "--index", "1", "--listen", "b:2", "--plan", "plan", "--log-format", "console", "--checkpoint-dir", "ck", "--checkpoint-every", "50"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "a:1,b:2", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-1", Args: []string{"run", "--role", "trainer", "--index", "1", "--pserver-endpoints", "a:1,b:2", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "2x2 resuming at step 100, GOMAXPROCS set by the user",
			opt: PlanOptions{Dir: "plan", Endpoints: []string{"a:1", "b:2"}, Trainers: 2, Token: "t0k3n", NumCPU: 16, GOMAXPROCSSet: true, LogFormat: "console",
				CheckpointDir: "ck", CheckpointEvery: 50, Resume: 100, Steps: 200},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "a:1", "--plan", "plan", "--log-format", "console", "--checkpoint-dir", "ck", "--checkpoint-every", "50", "--resume-step", "100"}, Env: []string{token, nopark}, DropSchedTrace: true},
				{Name: "pserver-1", Args: []string{"run", "--role", "pserver", "--index", "1", "--listen", "b:2", "--plan", "plan", "--log-format", "console", "--checkpoint-dir", "ck", "--checkpoint-every", "50", "--resume-step", "100"}, Env: []string{token, nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "a:1,b:2", "--plan", "plan", "--log-format", "console", "--steps", "200", "--start-step", "100"}, Env: []string{token, nopark}, DropSchedTrace: true},
				{Name: "trainer-1", Args: []string{"run", "--role", "trainer", "--index", "1", "--pserver-endpoints", "a:1,b:2", "--plan", "plan", "--log-format", "console", "--steps", "200", "--start-step", "100"}, Env: []string{token, nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "1x1 whose trainer holds state of its own: it reads init-from and checkpoints too",
			opt: PlanOptions{Dir: "plan", Endpoints: []string{"a:1"}, Trainers: 1, Token: "t0k3n", NumCPU: 2, LogFormat: "console",
				InitFrom: "init.safetensors", CheckpointDir: "ck", CheckpointEvery: 50, Resume: 100, TrainerState: true},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "a:1", "--plan", "plan", "--log-format", "console", "--init-from", "init.safetensors", "--checkpoint-dir", "ck", "--checkpoint-every", "50", "--resume-step", "100"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "a:1", "--plan", "plan", "--log-format", "console", "--start-step", "100", "--init-from", "init.safetensors", "--checkpoint-dir", "ck", "--checkpoint-every", "50"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "1x1 whose trainer normalizes: it reads init-from for the statistics, and checkpoints nothing",
			opt: PlanOptions{Dir: "plan", Endpoints: []string{"a:1"}, Trainers: 1, Token: "t0k3n", NumCPU: 2, LogFormat: "console",
				InitFrom: "init.safetensors", CheckpointDir: "ck", CheckpointEvery: 50, TrainerNormalizes: true},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "a:1", "--plan", "plan", "--log-format", "console", "--init-from", "init.safetensors", "--checkpoint-dir", "ck", "--checkpoint-every", "50"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "a:1", "--plan", "plan", "--log-format", "console", "--init-from", "init.safetensors"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
			},
		},
		{
			name: "1x2 with save: trainer 0 saves the whole model (tables pulled from the pservers)",
			opt:  PlanOptions{Dir: "plan", Endpoints: []string{"a:1", "b:2"}, Trainers: 1, Token: "t0k3n", NumCPU: 3, LogFormat: "console", Save: "out.safetensors"},
			want: []Child{
				{Name: "pserver-0", Args: []string{"run", "--role", "pserver", "--index", "0", "--listen", "a:1", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "pserver-1", Args: []string{"run", "--role", "pserver", "--index", "1", "--listen", "b:2", "--plan", "plan", "--log-format", "console"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
				{Name: "trainer-0", Args: []string{"run", "--role", "trainer", "--index", "0", "--pserver-endpoints", "a:1,b:2", "--plan", "plan", "--log-format", "console", "--save", "out.safetensors"}, Env: []string{token, "GOMAXPROCS=1", nopark}, DropSchedTrace: true},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(c.opt)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan:\n%s\nwant:\n%s", show(got), show(c.want))
			}
		})
	}
}

// train's children keep the GODEBUG they inherit, with sysmon kept from
// parking unless the user traces the scheduler (then no line is dropped).
func TestChildGODEBUG(t *testing.T) {
	for _, c := range []struct {
		in, want string
		quiet    bool
	}{
		{"", SysmonNoPark, true},
		{"madvdontneed=1", "madvdontneed=1," + SysmonNoPark, true},
		{"gctrace=1,schedtrace=1000", "gctrace=1,schedtrace=1000", false},
		{"schedtrace=500", "schedtrace=500", false},
	} {
		got, quiet := ChildGODEBUG(c.in)
		if got != c.want || quiet != c.quiet {
			t.Errorf("ChildGODEBUG(%q) = %q, %v; want %q, %v", c.in, got, quiet, c.want, c.quiet)
		}
	}
	kids := Plan(PlanOptions{Dir: "plan", Endpoints: []string{"a:1"}, Trainers: 1, Token: "t", NumCPU: 2, GODEBUG: "schedtrace=1000"})
	for _, k := range kids {
		if k.DropSchedTrace || strings.Contains(strings.Join(k.Env, " "), "GODEBUG") {
			t.Errorf("%s with the user's own schedtrace: env %v, DropSchedTrace %v; want neither", k.Name, k.Env, k.DropSchedTrace)
		}
	}
}

// The runtime's scheduler-trace lines are dropped from a child's log when
// asked; every other line, one that merely mentions SCHED included, is
// copied with the child's prefix.
func TestPrefixWriterDropsSchedTrace(t *testing.T) {
	for _, drop := range []bool{true, false} {
		var out strings.Builder
		var mu sync.Mutex
		w := &prefixWriter{name: "pserver-0", out: &out, mu: &mu, dropSched: drop}
		// A periodic line, then a fatal error's dump: SCHED, P, M and G
		// lines, and the error after them.
		sched := "SCHED 0ms: gomaxprocs=1 idleprocs=1 threads=4\n"
		dump := "SCHED 12ms: gomaxprocs=1 idleprocs=0 threads=5 spinningthreads=0\n  P0: status=1 schedtick=3 m=0\n  M12: p=0 curg=1\n  G1: status=2() m=0 lockedm=0\n"
		w.Write([]byte(sched + "ready SCHED\n" + dump + "panic: boom\n  P0 is fine\npsgraph: boom\n"))
		want := "pserver-0 | ready SCHED\npserver-0 | panic: boom\npserver-0 |   P0 is fine\npserver-0 | psgraph: boom\n"
		if !drop {
			want = "pserver-0 | " + strings.TrimSuffix(strings.ReplaceAll(sched+"ready SCHED\n"+dump+"panic: boom\n  P0 is fine\npsgraph: boom\n", "\n", "\npserver-0 | "), "pserver-0 | ")
		}
		if out.String() != want {
			t.Errorf("dropSched %v: log\n%s\nwant\n%s", drop, out.String(), want)
		}
		if w.lastErr != "boom" {
			t.Errorf("last error %q, want boom", w.lastErr)
		}
	}
}

func show(cs []Child) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("  " + c.Name + ": " + strings.Join(c.Args, " ") + "  env " + strings.Join(c.Env, " ") + "\n")
	}
	return b.String()
}

// Every child gets an equal share of the cores, at least one.
func TestGOMAXPROCS(t *testing.T) {
	cases := []struct{ cpus, procs, want int }{
		{2, 2, 1}, {2, 4, 1}, {1, 4, 1}, {8, 4, 2}, {8, 3, 2}, {16, 2, 8}, {64, 8, 8},
	}
	for _, c := range cases {
		if got := GOMAXPROCS(c.cpus, c.procs); got != c.want {
			t.Errorf("GOMAXPROCS(%d cores, %d processes) = %d, want %d", c.cpus, c.procs, got, c.want)
		}
	}
}

func TestMetricsFile(t *testing.T) {
	for _, c := range []struct {
		path string
		i    int
		want string
	}{
		{"run.jsonl", 0, "run.jsonl"}, {"run.jsonl", 3, "run.trainer-3.jsonl"}, {"out/m", 1, "out/m.trainer-1"},
	} {
		if got := MetricsFile(c.path, c.i); got != c.want {
			t.Errorf("MetricsFile(%q, %d) = %q, want %q", c.path, c.i, got, c.want)
		}
	}
}

func TestResultLastLineAndPeakRSS(t *testing.T) {
	r := &Result{
		Stdout:  map[string][]byte{"trainer-0": []byte("progress\n{\"role\":\"trainer-0\"}\n\n")},
		PeakRSS: map[string]int64{"pserver-0": 12 << 20, "trainer-0": 3 << 19},
	}
	if got := string(r.LastLine("trainer-0")); got != `{"role":"trainer-0"}` {
		t.Errorf("LastLine = %q", got)
	}
	children := []Child{{Name: "pserver-0"}, {Name: "trainer-0"}}
	if got, want := r.PeakRSSLine(children), "pserver-0 12.0 MiB, trainer-0 1.5 MiB"; got != want {
		t.Errorf("PeakRSSLine = %q, want %q", got, want)
	}
}

// A rerun resumes at the newest step every pserver has a checkpoint of,
// and every trainer that checkpoints state of its own.
func TestResume(t *testing.T) {
	save := func(dir, node string, steps ...int64) {
		t.Helper()
		ck := &modelfile.Checkpointer{Dir: dir, Node: node, Model: "m"}
		for _, s := range steps {
			if err := ck.Save(s, map[string]*tensor.Tensor{"W": {DType: tensor.F32, Shape: tensor.Shape{1}, F: []float32{1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := Resume("", 2, 0); got != 0 || err != nil {
		t.Errorf("without a checkpoint dir: %d, %v; want 0, nil", got, err)
	}
	dir := t.TempDir()
	if got, err := Resume(dir, 2, 0); got != 0 || err != nil {
		t.Errorf("an empty checkpoint dir: %d, %v; want 0, nil", got, err)
	}
	save(dir, "pserver-0", 50, 100)
	if _, err := Resume(dir, 2, 0); err == nil || !strings.Contains(err.Error(), "some pservers but not all") {
		t.Errorf("pserver-1 has no checkpoint: %v, want an error saying so", err)
	}
	save(dir, "pserver-1", 50)
	if got, err := Resume(dir, 2, 0); got != 50 || err != nil {
		t.Errorf("pserver-0 at 50 and 100, pserver-1 at 50: %d, %v; want 50", got, err)
	}
	// Trainers with state of their own count where they have checkpoints:
	// trainer-0's newest is 50, trainer-1 has none (it does not hold the
	// others back).
	save(dir, "pserver-1", 100)
	save(dir, "trainer-0", 50)
	if got, err := Resume(dir, 2, 2); got != 50 || err != nil {
		t.Errorf("pservers at 50 and 100, trainer-0 at 50: %d, %v; want 50", got, err)
	}
	if got, err := Resume(dir, 2, 0); got != 100 || err != nil {
		t.Errorf("pservers at 50 and 100, trainers without state: %d, %v; want 100", got, err)
	}
	save(dir, "trainer-0", 100)
	if got, err := Resume(dir, 2, 2); got != 100 || err != nil {
		t.Errorf("pservers and trainer-0 at 100: %d, %v; want 100", got, err)
	}
	// Trainers whose steps the pservers' do not share (an async job's
	// pservers count every trainer's steps) leave the pservers' step.
	odd := t.TempDir()
	save(odd, "pserver-0", 36, 48)
	save(odd, "pserver-1", 36, 48)
	save(odd, "trainer-0", 18, 24)
	if got, err := Resume(odd, 2, 1); got != 48 || err != nil {
		t.Errorf("pservers at 36 and 48, trainer-0 at 18 and 24: %d, %v; want 48", got, err)
	}
}

// TestPlanNicesTheJobBesideAReplica: with a serving replica (train
// --serve) the pservers and trainers are planned at JobNiceWithReplica
// and the replica at this process's priority; without one, nobody is
// niced.
func TestPlanNicesTheJobBesideAReplica(t *testing.T) {
	o := PlanOptions{Dir: "plan", Endpoints: []string{"a", "b"}, Trainers: 2, Token: "t", NumCPU: 2, LogFormat: "text", Model: "m.yaml"}
	for _, c := range Plan(o) {
		if c.Nice != 0 {
			t.Errorf("without --serve, %s is planned at nice %d, want 0", c.Name, c.Nice)
		}
	}
	o.Serve = "127.0.0.1:8000"
	children := Plan(o)
	if len(children) != 5 {
		t.Fatalf("%d children, want 2 pservers, 2 trainers and a replica", len(children))
	}
	for _, c := range children {
		want := JobNiceWithReplica
		if c.Service {
			want = 0
		}
		if c.Nice != want || JobNiceWithReplica <= 0 {
			t.Errorf("with --serve, %s is planned at nice %d, want %d", c.Name, c.Nice, want)
		}
	}
}
