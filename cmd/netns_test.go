package cmd_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
)

// netns runs ip(8) and fails the test on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// A trainer and a pserver in separate network namespaces joined by a veth
// pair; the link is cut for a few seconds mid-run and restored. The job
// must finish normally. Needs root and iproute2; skipped otherwise.
func TestLinkCutBetweenNamespaces(t *testing.T) {
	testfix.Long(t)
	if testing.Short() {
		t.Skip("-short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	tag := fmt.Sprint(os.Getpid() % 100000)
	psNS, trNS := "psg-ps-"+tag, "psg-tr-"+tag
	vps, vtr := "vps"+tag, "vtr"+tag
	if out, err := exec.Command("ip", "netns", "add", psNS).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", psNS).Run() })
	ipCmd(t, "netns", "add", trNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", trNS).Run() })
	ipCmd(t, "link", "add", vps, "type", "veth", "peer", "name", vtr)
	ipCmd(t, "link", "set", vps, "netns", psNS)
	ipCmd(t, "link", "set", vtr, "netns", trNS)
	ipCmd(t, "-n", psNS, "addr", "add", "10.231.0.1/24", "dev", vps)
	ipCmd(t, "-n", trNS, "addr", "add", "10.231.0.2/24", "dev", vtr)
	for _, ns := range []string{psNS, trNS} {
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(t, "-n", psNS, "link", "set", vps, "up")
	ipCmd(t, "-n", trNS, "link", "set", vtr, "up")

	plan := splitDigits(t, 1)
	env := []string{"PSGRAPH_TOKEN=netns-secret"}
	inNS := func(ns string, args ...string) []string {
		return append([]string{"netns", "exec", ns, binary}, args...)
	}
	ps := startCmd(t, "pserver-0", env, "ip", inNS(psNS, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", "10.231.0.1:7000")...)
	tr := startCmd(t, "trainer-0", env, "ip", inNS(trNS, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", "10.231.0.1:7000", "--steps", "20000", "--log-every", "100")...)
	waitForLine(t, tr, "step=500")
	ipCmd(t, "-n", trNS, "link", "set", vtr, "down")
	time.Sleep(3 * time.Second) // the outage itself: the thing under test is its length
	ipCmd(t, "-n", trNS, "link", "set", vtr, "up")
	if r := tr.wait(t, 90*time.Second); r.code != 0 {
		t.Fatalf("trainer after a 3 s link cut: exit %d\n%s", r.code, r.stderr)
	}
	if r := ps.wait(t, 30*time.Second); r.code != 0 {
		t.Fatalf("pserver after a 3 s link cut: exit %d\n%s", r.code, r.stderr)
	}
}
