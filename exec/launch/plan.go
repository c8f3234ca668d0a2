package launch

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/exec/modelfile"

	"github.com/psgraph/psgraph/transport"
)

// PlanOptions describe a `psgraph train` run: the plan its children run
// and the flags it passes on to them.
type PlanOptions struct {
	Dir       string   // the plan's directory ('psgraph split' output)
	Endpoints []string // each pserver's host:port, by index: one pserver each
	Trainers  int
	Token     string // the job's shared secret, every child's PSGRAPH_TOKEN

	// NumCPU is this machine's core count and GOMAXPROCSSet whether the
	// environment already sets GOMAXPROCS (which the children then inherit).
	NumCPU        int
	GOMAXPROCSSet bool
	// GODEBUG is this process's GODEBUG, which the children inherit with
	// SysmonNoPark added (ChildGODEBUG).
	GODEBUG string

	Steps, Batch int    // 0: the model's
	InitFrom     string // read by the pservers
	Save         string // trainer 0's file: the whole model, tables pulled from the pservers
	Metrics      string // trainer 0's file; MetricsFile names the others'
	LogFormat    string
	LogLevel     string // "" or "info": the children's default
	LogEvery     int
	FinalPass    string // the trainers' --final-pass: "true", "false", or "" for their default

	CheckpointDir   string
	CheckpointEvery int
	Resume          int64 // the step every pserver has a checkpoint of (Resume); 0: a fresh job
	// TrainerState: the trainers hold model state of their own
	// (batch_norm's running statistics), so they too read --init-from and
	// checkpoint into CheckpointDir.
	TrainerState bool
	// TrainerNormalizes: the trainers normalize their features, so they
	// read --init-from for the statistics a saved model carries.
	TrainerNormalizes bool
	// Serve, when set, is the --listen address of a serving replica that
	// follows the job (psgraph serve Model --plan Dir), a service child.
	Serve string
	Model string // the model file, for the replica
}

// JobNiceWithReplica is the nice value of a job's pservers and trainers
// when train --serve runs a serving replica beside them: on a 2-core
// machine, the replica's request p99 while it followed a 2x2 CTR job was
// 2.52x its steady p99 with the job at its priority and 1.48x with the
// job at nice 10 (docs/serving.md; `JOB_NICE=10 bash bench/serve-bench.sh`).
const JobNiceWithReplica = 10

// Plan returns the children of a `psgraph train` run, pservers first, each
// with the arguments of its `psgraph run` and its environment. It starts
// nothing and reads nothing.
func Plan(o PlanOptions) []Child {
	env := []string{"PSGRAPH_TOKEN=" + o.Token}
	if !o.GOMAXPROCSSet {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", GOMAXPROCS(o.NumCPU, o.Trainers+len(o.Endpoints))))
	}
	godebug, quiet := ChildGODEBUG(o.GODEBUG)
	if quiet {
		env = append(env, "GODEBUG="+godebug)
	}
	common := []string{"--plan", o.Dir, "--log-format", o.LogFormat}
	if o.LogLevel != "" && o.LogLevel != "info" {
		common = append(common, "--log-level", o.LogLevel)
	}
	if o.LogEvery > 0 {
		common = append(common, "--log-every", strconv.Itoa(o.LogEvery))
	}
	nice := 0 // the job's nodes yield to a serving replica beside them
	if o.Serve != "" {
		nice = JobNiceWithReplica
	}
	var children []Child
	for i, addr := range o.Endpoints {
		args := append([]string{"run", "--role", "pserver", "--index", strconv.Itoa(i), "--listen", addr}, common...)
		if o.InitFrom != "" {
			args = append(args, "--init-from", o.InitFrom)
		}
		if o.CheckpointDir != "" {
			args = append(args, "--checkpoint-dir", o.CheckpointDir, "--checkpoint-every", strconv.Itoa(o.CheckpointEvery))
			if o.Resume > 0 {
				args = append(args, "--resume-step", strconv.FormatInt(o.Resume, 10))
			}
		}
		children = append(children, Child{Name: fmt.Sprintf("pserver-%d", i), Args: args, Env: env, DropSchedTrace: quiet, Nice: nice})
	}
	for i := 0; i < o.Trainers; i++ {
		args := append([]string{"run", "--role", "trainer", "--index", strconv.Itoa(i), "--pserver-endpoints", strings.Join(o.Endpoints, ",")}, common...)
		if o.Steps > 0 {
			args = append(args, "--steps", strconv.Itoa(o.Steps))
		}
		if o.Resume > 0 {
			args = append(args, "--start-step", strconv.FormatInt(o.Resume, 10))
		}
		if o.Batch > 0 {
			args = append(args, "--batch", strconv.Itoa(o.Batch))
		}
		if (o.TrainerState || o.TrainerNormalizes) && o.InitFrom != "" {
			args = append(args, "--init-from", o.InitFrom)
		}
		if o.TrainerState && o.CheckpointDir != "" {
			args = append(args, "--checkpoint-dir", o.CheckpointDir, "--checkpoint-every", strconv.Itoa(o.CheckpointEvery))
		}
		if o.Save != "" && i == 0 {
			args = append(args, "--save", o.Save)
		}
		if o.Metrics != "" {
			args = append(args, "--metrics", MetricsFile(o.Metrics, i))
		}
		if o.FinalPass != "" {
			args = append(args, "--final-pass="+o.FinalPass)
		}
		children = append(children, Child{Name: fmt.Sprintf("trainer-%d", i), Args: args, Env: env, DropSchedTrace: quiet, Nice: nice})
	}
	if o.Serve != "" {
		args := []string{"serve", o.Model, "--plan", o.Dir, "--pserver-endpoints", strings.Join(o.Endpoints, ","), "--listen", o.Serve, "--log-format", o.LogFormat}
		children = append(children, Child{Name: "replica-0", Args: args, Env: env, DropSchedTrace: quiet, Service: true})
	}
	return children
}

// SysmonNoPark is the GODEBUG setting that keeps the Go runtime's sysmon
// thread from parking when a process goes idle. A node of a sync job goes
// idle many times a step (it waits for a message); parked, sysmon is
// woken by the process's next system call and then polls every 20 us for
// a millisecond, and with four processes on two cores those wake-ups were
// half of all context switches (DCN-v2's 2x2 job: ~165 a step). With a
// schedtrace period the runtime never parks sysmon, which then backs off
// to 10 ms while there is nothing to retake; the period, 2^31-1 ms (24.8
// days of the monotonic clock, which starts at boot), means a process
// prints the runtime's "SCHED" line at most once every 24.8 days; a
// schedtrace setting also makes a fatal error print a scheduler dump
// before its stack. train drops both (Child.DropSchedTrace). Measured on
// 2 cores in 2x2 jobs: digits 1,864-2,110 -> 3,051-3,342 steps/s, DLRM (batch 64)
// 122-124 -> 161-205, DCN-v2 (batch 128) 128-140 -> 170-187
// (bench/history-2026-12.md, "The runtime's sysmon kept awake").
const SysmonNoPark = "schedtrace=2147483647"

// ChildGODEBUG is the GODEBUG of train's children given this process's:
// SysmonNoPark appended, and true; or, when it already sets schedtrace
// (the user wants the traces), it unchanged and false.
func ChildGODEBUG(inherited string) (string, bool) {
	for _, kv := range strings.Split(inherited, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "schedtrace=") {
			return inherited, false
		}
	}
	if inherited == "" {
		return SysmonNoPark, true
	}
	return inherited + "," + SysmonNoPark, true
}

// GOMAXPROCS is each child's GOMAXPROCS when processes share numCPU
// cores: more Go threads than cores only add context switches to every
// message's latency (2x2 digits on 2 cores: 1,550 steps/s with 2 each,
// 2,000 with 1).
func GOMAXPROCS(numCPU, processes int) int {
	return max(1, numCPU/processes)
}

// MetricsFile is trainer i's progress file: the given name for trainer 0,
// NAME.trainer-i.EXT for the others.
func MetricsFile(path string, i int) string {
	if i == 0 {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.trainer-%d%s", strings.TrimSuffix(path, ext), i, ext)
}

// Resume is the step a rerun with checkpoint directory dir resumes at:
// the newest step every one of the pservers has a checkpoint of (0: none,
// or no dir), and of the first trainers trainers (those holding state of
// their own) that have checkpoints in dir. A trainer that never wrote one
// (a directory of a job without that state) does not hold the others
// back, and starts its state from its initial values; when the trainers'
// steps and the pservers' share none, the pservers' step stands and each
// trainer restores its newest checkpoint before it (both logged by the
// trainer).
func Resume(dir string, pservers, trainers int) (int64, error) {
	if dir == "" {
		return 0, nil
	}
	var ids []string
	for i := 0; i < pservers; i++ {
		ids = append(ids, transport.PServer(i).String())
	}
	step, err := modelfile.CommonCheckpoint(dir, ids)
	if err != nil || step == 0 {
		return step, err
	}
	for i := 0; i < trainers; i++ {
		id := transport.Trainer(i).String()
		if _, ok, err := (&modelfile.Checkpointer{Dir: dir, Node: id}).Manifest(); err != nil {
			return 0, err
		} else if ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == pservers {
		return step, nil
	}
	if both, err := modelfile.CommonCheckpoint(dir, ids); err == nil && both > 0 {
		return both, nil
	}
	return step, nil
}

// PeakRSSLine reports each child's peak resident memory in MiB, in the
// children's order: "pserver-0 12.0 MiB, trainer-0 30.5 MiB".
func (r *Result) PeakRSSLine(children []Child) string {
	var rss []string
	for _, ch := range children {
		if n, ok := r.PeakRSS[ch.Name]; ok { // a service still running has none yet
			rss = append(rss, fmt.Sprintf("%s %.1f MiB", ch.Name, float64(n)/(1<<20)))
		}
	}
	return strings.Join(rss, ", ")
}

// LastLine is the last line the named child wrote on stdout: a node's
// JSON summary.
func (r *Result) LastLine(name string) []byte {
	out := bytes.TrimSpace(r.Stdout[name])
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return out
}

// FreePorts reserves n loopback ports by listening on port 0.
func FreePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cannot find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// SocketPaths are n Unix-domain socket endpoints in dir, one per pserver
// ("unix:DIR/ps-0.sock", transport.UnixPrefix), or nil when a path would
// be longer than the 103 bytes every Unix allows a socket's path.
func SocketPaths(dir string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("ps-%d.sock", i))
		if len(p) >= 104 {
			return nil
		}
		out = append(out, transport.UnixPrefix+p)
	}
	return out
}

// NewToken is a fresh random 256-bit job token, hex-encoded.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
