package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A launcher killed by SIGKILL cannot stop its children itself; Linux's
// Pdeathsig kills them with it (childAttr). The children here stay on
// SIGTERM, so only that SIGKILL ends them.
func TestNoChildOutlivesAKilledLauncher(t *testing.T) {
	dir := t.TempDir()
	launcher := osexec.Command(os.Args[0], "-test.run=^$")
	launcher.Env = append(os.Environ(), "LAUNCH_TEST_LAUNCHER="+dir)
	launcher.Stderr = os.Stderr
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- launcher.Wait() }()
	t.Cleanup(func() {
		launcher.Process.Kill()
		<-exited
	})
	names := []string{"pserver-0", "trainer-0"}
	pids := map[string]int{}
	for _, name := range names {
		if err := waitFor(filepath.Join(dir, name+".pid"), time.Minute); err != nil {
			t.Fatal(err)
		}
		pids[name] = readPID(t, dir, name)
	}
	if err := launcher.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	exited <- nil // for Cleanup
	for _, name := range names {
		for deadline := time.Now().Add(30 * time.Second); !gone(pids[name]); {
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) outlived its launcher by 30s", name, pids[name])
			}
			time.Sleep(5 * time.Millisecond) // polling another process's end
		}
		if got := signalsOf(t, dir, name); got != "" {
			t.Errorf("%s received %q; only the kernel's SIGKILL should have reached it", name, got)
		}
	}
}

// A child's peak memory is its own: a small child started by a parent
// holding a 256 MiB heap reports the few MiB it used. Linux's rusage of
// the same child says at least 256 MiB (the parent's resident size at
// the vfork+exec, folded into the child's maxrss), which Run reported
// before children reported their own VmHWM.
func TestChildPeakIsItsOwn(t *testing.T) {
	heap := make([]byte, 256<<20)
	for i := 0; i < len(heap); i += 4096 {
		heap[i] = 1 // resident, not just reserved
	}
	dir := t.TempDir()
	res, err := Run(context.Background(), []Child{child(dir, "trainer-0", "ok")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(heap)
	own := res.PeakRSS["trainer-0"]
	var rusage int64
	if ru, ok := res.State["trainer-0"].SysUsage().(*syscall.Rusage); ok {
		rusage = ru.Maxrss << 10
	}
	t.Logf("the child's own peak %.1f MiB; its rusage maxrss %.1f MiB", float64(own)/(1<<20), float64(rusage)/(1<<20))
	if own <= 0 || own > 64<<20 {
		t.Errorf("the child reported a peak of %.1f MiB, want its own few MiB (the parent holds 256 MiB)", float64(own)/(1<<20))
	}
}

// TestSetNiceLowersAChildsPriority: setNice, as Run calls it for a
// Child's Nice, changes the nice value the kernel reports for the
// process (/proc/PID/stat, field 19).
func TestSetNiceLowersAChildsPriority(t *testing.T) {
	c := osexec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Skip("no sleep to start:", err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	if err := setNice(c.Process.Pid, 7); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's ")" start at the third.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 17 || f[16] != "7" {
		t.Fatalf("nice of the child after setNice(7): stat fields %q, want the 19th \"7\"", f)
	}
}
