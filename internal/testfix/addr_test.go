package testfix

import "testing"

// TestFreeAddrNeverRepeats asks for more addresses than the kernel's
// ephemeral range hands out without wrapping around in a short run, and
// fails on the first repeat.
func TestFreeAddrNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 3000 {
		a := FreeAddr(t)
		if seen[a] {
			t.Fatalf("FreeAddr returned %s twice", a)
		}
		seen[a] = true
	}
}
