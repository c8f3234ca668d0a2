package launch

import (
	"os"
	osexec "os/exec"
	"path/filepath"
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
