package testfix

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// MappingField is a field of the mapping of this process that holds
// address p, as /proc/self/smaps (Linux) writes it: the text after
// "Name:" on that mapping's line of the field (AnonHugePages, VmFlags).
func MappingField(p uintptr, name string) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 { // a mapping's first line
			in = lo <= p && p < hi
			found = found || in
			continue
		}
		if rest, ok := strings.CutPrefix(line, name+":"); ok && in {
			return strings.TrimSpace(rest), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("no mapping of /proc/self/smaps holds %#x", p)
	}
	return "", fmt.Errorf("the mapping holding %#x has no %s in /proc/self/smaps", p, name)
}
